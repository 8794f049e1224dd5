//! Encrypted bundles: a plaintext header, then the bundle's tar in AES-256-GCM chunks, streamed (a bundle
//! of any size needs one chunk of memory).
//!
//! Layout: `KILNENC1` · version (1) · kdf (0 = a raw 32-byte key, 1 = PBKDF2-HMAC-SHA256 of a passphrase) ·
//! 2 reserved bytes · PBKDF2 iterations (u32 BE) · 16-byte random salt · chunk size (u32 BE), then chunks of
//! `ciphertext length (u32 BE) · ciphertext+tag`. Every bundle gets its own key, HKDF(master key, salt), so a
//! key file reused for many bundles never reuses a (key, nonce) pair. A chunk's nonce is its index (u64)
//! plus a flag on the last chunk, and every chunk authenticates the header: reordered, dropped, truncated
//! or tampered chunks, and a changed header, all fail authentication.

use std::io::{Read, Write};
use std::num::NonZeroU32;
use std::path::Path;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::rand::{SecureRandom, SystemRandom};

pub const MAGIC: &[u8; 8] = b"KILNENC1";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 36;
/// Plaintext bytes per chunk.
pub const CHUNK: usize = 1 << 20;
const TAG: usize = 16;
const KDF_RAW: u8 = 0;
const KDF_PBKDF2: u8 = 1;
/// OWASP's 2023 figure for PBKDF2-HMAC-SHA256.
const PBKDF2_ITERATIONS: u32 = 600_000;
const RAW_KEY_LEN: usize = 32;
const MIN_PASSPHRASE: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("wrong key or corrupted (authentication failed)")]
    Authentication,
    #[error("truncated (the last chunk is missing)")]
    Truncated,
    #[error("not an encrypted kiln bundle: {0}")]
    Header(String),
    #[error("key file {path}: {message}")]
    KeyFile { path: String, message: String },
    #[error("no system randomness available")]
    Random,
}

/// What the key file holds: exactly 32 bytes is a raw key (`head -c 32 /dev/urandom`), anything else a
/// passphrase (one trailing newline ignored) stretched with PBKDF2.
#[derive(Clone)]
pub struct KeyMaterial(Vec<u8>);

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyMaterial(..)")
    }
}

impl KeyMaterial {
    pub fn from_file(path: &Path) -> Result<KeyMaterial, CryptoError> {
        let bytes = std::fs::read(path).map_err(|e| CryptoError::KeyFile {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_bytes(bytes).map_err(|message| CryptoError::KeyFile {
            path: path.display().to_string(),
            message,
        })
    }

    pub fn from_bytes(mut bytes: Vec<u8>) -> Result<KeyMaterial, String> {
        if bytes.len() != RAW_KEY_LEN {
            if bytes.last() == Some(&b'\n') {
                bytes.pop();
            }
            if bytes.len() < MIN_PASSPHRASE {
                return Err(format!(
                    "neither a 32-byte key nor a passphrase of at least {MIN_PASSPHRASE} bytes"
                ));
            }
        }
        Ok(KeyMaterial(bytes))
    }

    fn kdf(&self) -> u8 {
        if self.0.len() == RAW_KEY_LEN {
            KDF_RAW
        } else {
            KDF_PBKDF2
        }
    }
}

/// Does this file start like an encrypted bundle?
pub fn is_encrypted(path: &Path) -> std::io::Result<bool> {
    let mut f = std::fs::File::open(path)?;
    let mut magic = [0u8; 8];
    let mut got = 0;
    while got < magic.len() {
        match f.read(&mut magic[got..])? {
            0 => return Ok(false),
            n => got += n,
        }
    }
    Ok(&magic == MAGIC)
}

struct Header {
    bytes: [u8; HEADER_LEN],
}

impl Header {
    fn new(kdf: u8, salt: [u8; 16]) -> Header {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8] = VERSION;
        b[9] = kdf;
        b[12..16].copy_from_slice(&PBKDF2_ITERATIONS.to_be_bytes());
        b[16..32].copy_from_slice(&salt);
        b[32..36].copy_from_slice(&(CHUNK as u32).to_be_bytes());
        Header { bytes: b }
    }

    fn parse(b: [u8; HEADER_LEN]) -> Result<Header, CryptoError> {
        if &b[..8] != MAGIC {
            return Err(CryptoError::Header("bad magic".into()));
        }
        if b[8] != VERSION {
            return Err(CryptoError::Header(format!("version {}", b[8])));
        }
        if b[9] > KDF_PBKDF2 {
            return Err(CryptoError::Header(format!("key derivation {}", b[9])));
        }
        let h = Header { bytes: b };
        if h.chunk() == 0 || h.chunk() > 64 * CHUNK || h.iterations() == 0 {
            return Err(CryptoError::Header("implausible parameters".into()));
        }
        Ok(h)
    }

    fn kdf(&self) -> u8 {
        self.bytes[9]
    }
    fn iterations(&self) -> u32 {
        u32::from_be_bytes(self.bytes[12..16].try_into().expect("4 bytes"))
    }
    fn salt(&self) -> &[u8] {
        &self.bytes[16..32]
    }
    fn chunk(&self) -> usize {
        u32::from_be_bytes(self.bytes[32..36].try_into().expect("4 bytes")) as usize
    }

    /// This bundle's AEAD key: HKDF-SHA256(master, salt), where master is the raw key or PBKDF2 of the
    /// passphrase with the same salt.
    fn key(&self, km: &KeyMaterial) -> Result<LessSafeKey, CryptoError> {
        let master: Vec<u8> = match self.kdf() {
            KDF_RAW => {
                if km.0.len() != RAW_KEY_LEN {
                    return Err(CryptoError::Authentication);
                }
                km.0.clone()
            }
            _ => {
                let mut out = vec![0u8; 32];
                ring::pbkdf2::derive(
                    ring::pbkdf2::PBKDF2_HMAC_SHA256,
                    NonZeroU32::new(self.iterations()).expect("checked in parse"),
                    self.salt(),
                    &km.0,
                    &mut out,
                );
                out
            }
        };
        let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, self.salt()).extract(&master);
        let okm = prk
            .expand(&[b"kiln bundle v1"], &AES_256_GCM)
            .map_err(|_| CryptoError::Random)?;
        Ok(LessSafeKey::new(UnboundKey::from(okm)))
    }
}

fn nonce(index: u64, last: bool) -> Nonce {
    let mut n = [0u8; 12];
    n[3] = u8::from(last);
    n[4..].copy_from_slice(&index.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

fn to_io(e: CryptoError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}

/// Encrypts everything written to it; [`EncryptWriter::finish`] writes the last chunk (required: without
/// it the reader reports truncation).
pub struct EncryptWriter<W: Write> {
    inner: W,
    key: LessSafeKey,
    header: Header,
    buf: Vec<u8>,
    index: u64,
}

impl<W: Write> EncryptWriter<W> {
    pub fn new(mut inner: W, km: &KeyMaterial) -> Result<EncryptWriter<W>, std::io::Error> {
        let mut salt = [0u8; 16];
        SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| to_io(CryptoError::Random))?;
        let header = Header::new(km.kdf(), salt);
        let key = header.key(km).map_err(to_io)?;
        inner.write_all(&header.bytes)?;
        Ok(EncryptWriter {
            inner,
            key,
            header,
            buf: Vec::with_capacity(CHUNK + TAG),
            index: 0,
        })
    }

    fn seal(&mut self, last: bool) -> std::io::Result<()> {
        let mut chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK + TAG));
        self.key
            .seal_in_place_append_tag(
                nonce(self.index, last),
                Aad::from(&self.header.bytes[..]),
                &mut chunk,
            )
            .map_err(|_| to_io(CryptoError::Authentication))?;
        self.inner.write_all(&(chunk.len() as u32).to_be_bytes())?;
        self.inner.write_all(&chunk)?;
        self.index += 1;
        Ok(())
    }

    /// Seal the last chunk (possibly empty) and hand back the inner writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.seal(true)?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for EncryptWriter<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        // A full buffer is sealed only when more data comes: the last chunk is known only at finish().
        if self.buf.len() == CHUNK && !data.is_empty() {
            self.seal(false)?;
        }
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Decrypts a stream written by [`EncryptWriter`]; every byte it returns has been authenticated, and the
/// end of the stream is only reported after the authenticated last chunk.
pub struct DecryptReader<R: Read> {
    inner: R,
    key: LessSafeKey,
    header: Header,
    plain: Vec<u8>,
    pos: usize,
    index: u64,
    done: bool,
}

impl<R: Read> DecryptReader<R> {
    pub fn new(mut inner: R, km: &KeyMaterial) -> Result<DecryptReader<R>, CryptoError> {
        let mut b = [0u8; HEADER_LEN];
        inner
            .read_exact(&mut b)
            .map_err(|_| CryptoError::Header("shorter than the header".into()))?;
        let header = Header::parse(b)?;
        let key = header.key(km)?;
        Ok(DecryptReader {
            inner,
            key,
            header,
            plain: vec![],
            pos: 0,
            index: 0,
            done: false,
        })
    }

    fn next_chunk(&mut self) -> Result<(), CryptoError> {
        let mut len = [0u8; 4];
        read_full(&mut self.inner, &mut len)?;
        let len = u32::from_be_bytes(len) as usize;
        if !(TAG..=self.header.chunk() + TAG).contains(&len) {
            return Err(CryptoError::Authentication);
        }
        let mut chunk = vec![0u8; len];
        read_full(&mut self.inner, &mut chunk)?;
        let aad = self.header.bytes;
        // Which flag the writer used is not stored: try "more follows" first, then "last".
        for last in [false, true] {
            let mut attempt = chunk.clone();
            if let Ok(plain) =
                self.key
                    .open_in_place(nonce(self.index, last), Aad::from(&aad[..]), &mut attempt)
            {
                let n = plain.len();
                attempt.truncate(n);
                self.plain = attempt;
                self.pos = 0;
                self.index += 1;
                if last {
                    let mut extra = [0u8; 1];
                    if self
                        .inner
                        .read(&mut extra)
                        .map_err(|_| CryptoError::Truncated)?
                        != 0
                    {
                        return Err(CryptoError::Authentication);
                    }
                    self.done = true;
                }
                return Ok(());
            }
        }
        Err(CryptoError::Authentication)
    }
}

/// Fill `buf`; end of input before that means the stream was cut.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<(), CryptoError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err(CryptoError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(CryptoError::Truncated),
        }
    }
    Ok(())
}

impl<R: Read> Read for DecryptReader<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.plain.len() {
            if self.done {
                return Ok(0);
            }
            self.next_chunk().map_err(to_io)?;
        }
        let n = out.len().min(self.plain.len() - self.pos);
        out[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The crypto error inside an I/O error from a [`DecryptReader`], if that is what it is (possibly wrapped
/// by a reader on top, like tar's).
pub fn crypto_cause(e: &std::io::Error) -> Option<&CryptoError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = e.get_ref().map(|r| r as _);
    while let Some(err) = cur {
        if let Some(c) = err.downcast_ref::<CryptoError>() {
            return Some(c);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            cur = io.get_ref().map(|r| r as _);
            continue;
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> KeyMaterial {
        KeyMaterial::from_bytes(vec![7u8; 32]).unwrap()
    }

    fn seal(data: &[u8], km: &KeyMaterial) -> Vec<u8> {
        let mut w = EncryptWriter::new(Vec::new(), km).unwrap();
        // Odd write sizes cross chunk boundaries.
        for part in data.chunks(300_001) {
            w.write_all(part).unwrap();
        }
        w.finish().unwrap()
    }

    fn open(sealed: &[u8], km: &KeyMaterial) -> Result<Vec<u8>, String> {
        let mut r = DecryptReader::new(sealed, km).map_err(|e| e.to_string())?;
        let mut out = vec![];
        r.read_to_end(&mut out).map_err(|e| {
            crypto_cause(&e)
                .map(|c| c.to_string())
                .unwrap_or_else(|| e.to_string())
        })?;
        Ok(out)
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// Offset of chunk `i`'s length prefix in a sealed stream.
    fn chunk_offset(sealed: &[u8], i: usize) -> usize {
        let mut off = HEADER_LEN;
        for _ in 0..i {
            let len = u32::from_be_bytes(sealed[off..off + 4].try_into().unwrap()) as usize;
            off += 4 + len;
        }
        off
    }

    #[test]
    fn roundtrip_raw_key_and_passphrase_across_chunks() {
        for km in [
            key(),
            KeyMaterial::from_bytes(b"correct horse battery staple\n".to_vec()).unwrap(),
        ] {
            for n in [0, 1, CHUNK, CHUNK + 1, 2 * CHUNK + 12345] {
                let d = data(n);
                let sealed = seal(&d, &km);
                assert_eq!(&sealed[..8], MAGIC);
                assert_eq!(open(&sealed, &km).unwrap(), d, "{n} bytes");
            }
        }
    }

    #[test]
    fn the_same_key_never_produces_the_same_ciphertext() {
        let d = data(1000);
        assert_ne!(seal(&d, &key()), seal(&d, &key()));
    }

    #[test]
    fn wrong_key_is_refused() {
        let sealed = seal(&data(5000), &key());
        let other = KeyMaterial::from_bytes(vec![8u8; 32]).unwrap();
        assert_eq!(
            open(&sealed, &other).unwrap_err(),
            "wrong key or corrupted (authentication failed)"
        );
        let pass = KeyMaterial::from_bytes(b"a passphrase".to_vec()).unwrap();
        let sealed = seal(&data(5000), &pass);
        let wrong = KeyMaterial::from_bytes(b"a passphrasE".to_vec()).unwrap();
        assert!(open(&sealed, &wrong)
            .unwrap_err()
            .contains("authentication failed"));
    }

    #[test]
    fn truncation_is_detected_even_at_a_chunk_boundary() {
        let sealed = seal(&data(2 * CHUNK + 10), &key());
        let cut = chunk_offset(&sealed, 2);
        assert!(open(&sealed[..cut], &key())
            .unwrap_err()
            .contains("truncated"));
        assert!(open(&sealed[..sealed.len() - 1], &key())
            .unwrap_err()
            .contains("truncated"));
        // Appended bytes after the last chunk are refused too.
        let mut longer = sealed.clone();
        longer.push(0);
        assert!(open(&longer, &key()).is_err());
    }

    #[test]
    fn a_tampered_chunk_or_header_fails_authentication() {
        let sealed = seal(&data(2 * CHUNK + 10), &key());
        let mut t = sealed.clone();
        let off = chunk_offset(&sealed, 1) + 100;
        t[off] ^= 1;
        assert!(open(&t, &key())
            .unwrap_err()
            .contains("authentication failed"));
        let mut h = sealed.clone();
        h[10] ^= 1; // a reserved header byte: authenticated as AAD
        assert!(open(&h, &key())
            .unwrap_err()
            .contains("authentication failed"));
    }

    #[test]
    fn reordered_chunks_fail_authentication() {
        let sealed = seal(&data(3 * CHUNK), &key());
        let (a, b, c) = (
            chunk_offset(&sealed, 0),
            chunk_offset(&sealed, 1),
            chunk_offset(&sealed, 2),
        );
        let mut swapped = sealed[..a].to_vec();
        swapped.extend_from_slice(&sealed[b..c]);
        swapped.extend_from_slice(&sealed[a..b]);
        swapped.extend_from_slice(&sealed[c..]);
        assert_eq!(swapped.len(), sealed.len());
        assert!(open(&swapped, &key())
            .unwrap_err()
            .contains("authentication failed"));
    }

    #[test]
    fn short_passphrases_are_refused() {
        assert!(KeyMaterial::from_bytes(b"short\n".to_vec()).is_err());
    }
}
