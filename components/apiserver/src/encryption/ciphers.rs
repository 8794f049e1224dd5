//! The three local ciphers of upstream's EncryptionConfiguration, each laid out byte for byte as
//! kube-apiserver stores it (after the `k8s:enc:<provider>:v1:<key>:` prefix), so an etcd written by
//! either server reads in the other:
//! - aesgcm: 12-byte random nonce ‖ AES-GCM sealed data (ciphertext ‖ 16-byte tag); the etcd key is
//!   the authenticated data, so a value copied to another key does not decrypt.
//! - aescbc: 16-byte random IV ‖ AES-CBC of the PKCS#7-padded data (no authentication, as upstream).
//! - secretbox: 24-byte random nonce ‖ NaCl secretbox (16-byte Poly1305 tag ‖ XSalsa20 ciphertext).

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::AesGcm;
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyIvInit};
use rand::RngCore;

const GCM_NONCE: usize = 12;
const CBC_IV: usize = 16;
const SECRETBOX_NONCE: usize = 24;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CipherError {
    #[error("the stored data was shorter than the required size")]
    TooShort,
    #[error("cipher: message authentication failed")]
    Authentication,
    #[error("the stored data is not a multiple of the block size")]
    BlockSize,
    #[error("invalid padding on input")]
    Padding,
    #[error("secretbox: failed to decrypt data")]
    Secretbox,
    #[error("key is {0} bytes; AES takes 16, 24 or 32")]
    AesKeySize(usize),
    #[error("key is {0} bytes; secretbox takes 32")]
    SecretboxKeySize(usize),
}

/// One provider key, ready to seal and open values.
#[derive(Clone)]
pub enum Cipher {
    AesGcm(Box<Gcm>),
    AesCbc(Vec<u8>),
    Secretbox(Box<crypto_secretbox::XSalsa20Poly1305>),
}

/// AES-GCM with the key length the secret has (Go's aes.NewCipher picks it the same way).
#[derive(Clone)]
pub enum Gcm {
    A128(AesGcm<aes::Aes128, U12>),
    A192(AesGcm<aes::Aes192, U12>),
    A256(AesGcm<aes::Aes256, U12>),
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        f.write_str(match self {
            Cipher::AesGcm(_) => "Cipher::AesGcm",
            Cipher::AesCbc(_) => "Cipher::AesCbc",
            Cipher::Secretbox(_) => "Cipher::Secretbox",
        })
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rng().fill_bytes(&mut b);
    b
}

impl Cipher {
    pub fn aes_gcm(key: &[u8]) -> Result<Cipher, CipherError> {
        let bad = |_| CipherError::AesKeySize(key.len());
        Ok(Cipher::AesGcm(Box::new(match key.len() {
            16 => Gcm::A128(AesGcm::new_from_slice(key).map_err(bad)?),
            24 => Gcm::A192(AesGcm::new_from_slice(key).map_err(bad)?),
            32 => Gcm::A256(AesGcm::new_from_slice(key).map_err(bad)?),
            n => return Err(CipherError::AesKeySize(n)),
        })))
    }

    pub fn aes_cbc(key: &[u8]) -> Result<Cipher, CipherError> {
        match key.len() {
            16 | 24 | 32 => Ok(Cipher::AesCbc(key.to_vec())),
            n => Err(CipherError::AesKeySize(n)),
        }
    }

    pub fn secretbox(key: &[u8]) -> Result<Cipher, CipherError> {
        use crypto_secretbox::KeyInit as _;
        crypto_secretbox::XSalsa20Poly1305::new_from_slice(key)
            .map(|c| Cipher::Secretbox(Box::new(c)))
            .map_err(|_| CipherError::SecretboxKeySize(key.len()))
    }

    /// Seals `plain`; `context` is the etcd key (authenticated by aesgcm only, as upstream).
    pub fn seal(&self, plain: &[u8], context: &[u8]) -> Vec<u8> {
        match self {
            Cipher::AesGcm(gcm) => {
                let nonce = random::<GCM_NONCE>();
                let payload = Payload {
                    msg: plain,
                    aad: context,
                };
                let n = (&nonce).into();
                let sealed = match gcm.as_ref() {
                    Gcm::A128(c) => c.encrypt(n, payload),
                    Gcm::A192(c) => c.encrypt(n, payload),
                    Gcm::A256(c) => c.encrypt(n, payload),
                }
                // Only fails for messages beyond GCM's 64 GiB limit.
                .unwrap_or_default();
                [&nonce[..], &sealed].concat()
            }
            Cipher::AesCbc(key) => {
                let iv = random::<CBC_IV>();
                let body = cbc_encrypt(key, &iv, plain);
                [&iv[..], &body].concat()
            }
            Cipher::Secretbox(bx) => {
                use crypto_secretbox::aead::Aead as _;
                let nonce = random::<SECRETBOX_NONCE>();
                let sealed = bx.encrypt((&nonce).into(), plain).unwrap_or_default();
                [&nonce[..], &sealed].concat()
            }
        }
    }

    pub fn open(&self, data: &[u8], context: &[u8]) -> Result<Vec<u8>, CipherError> {
        match self {
            Cipher::AesGcm(gcm) => {
                if data.len() < GCM_NONCE {
                    return Err(CipherError::TooShort);
                }
                let (nonce, sealed) = data.split_at(GCM_NONCE);
                let n: &[u8; GCM_NONCE] = nonce.try_into().map_err(|_| CipherError::TooShort)?;
                let payload = Payload {
                    msg: sealed,
                    aad: context,
                };
                match gcm.as_ref() {
                    Gcm::A128(c) => c.decrypt(n.into(), payload),
                    Gcm::A192(c) => c.decrypt(n.into(), payload),
                    Gcm::A256(c) => c.decrypt(n.into(), payload),
                }
                .map_err(|_| CipherError::Authentication)
            }
            Cipher::AesCbc(key) => {
                if data.len() < CBC_IV {
                    return Err(CipherError::TooShort);
                }
                let (iv, body) = data.split_at(CBC_IV);
                if body.len() % CBC_IV != 0 {
                    return Err(CipherError::BlockSize);
                }
                cbc_decrypt(key, iv, body)
            }
            Cipher::Secretbox(bx) => {
                use crypto_secretbox::aead::Aead as _;
                if data.len() < SECRETBOX_NONCE {
                    return Err(CipherError::TooShort);
                }
                let (nonce, sealed) = data.split_at(SECRETBOX_NONCE);
                let n: &[u8; SECRETBOX_NONCE] =
                    nonce.try_into().map_err(|_| CipherError::TooShort)?;
                bx.decrypt(n.into(), sealed)
                    .map_err(|_| CipherError::Secretbox)
            }
        }
    }
}

fn cbc_encrypt(key: &[u8], iv: &[u8], plain: &[u8]) -> Vec<u8> {
    // The key length was checked when the cipher was made.
    match key.len() {
        16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map(|c| c.encrypt_padded_vec::<Pkcs7>(plain))
            .unwrap_or_default(),
        24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(key, iv)
            .map(|c| c.encrypt_padded_vec::<Pkcs7>(plain))
            .unwrap_or_default(),
        _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map(|c| c.encrypt_padded_vec::<Pkcs7>(plain))
            .unwrap_or_default(),
    }
}

fn cbc_decrypt(key: &[u8], iv: &[u8], body: &[u8]) -> Result<Vec<u8>, CipherError> {
    let out = match key.len() {
        16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map_err(|_| CipherError::AesKeySize(key.len()))?
            .decrypt_padded_vec::<Pkcs7>(body),
        24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(key, iv)
            .map_err(|_| CipherError::AesKeySize(key.len()))?
            .decrypt_padded_vec::<Pkcs7>(body),
        _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map_err(|_| CipherError::AesKeySize(key.len()))?
            .decrypt_padded_vec::<Pkcs7>(body),
    };
    out.map_err(|_| CipherError::Padding)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn each_cipher_round_trips_with_every_key_size() {
        for key in [&KEY[..16], &KEY[..24], KEY] {
            for c in [Cipher::aes_gcm(key).unwrap(), Cipher::aes_cbc(key).unwrap()] {
                let sealed = c.seal(b"top secret", b"/registry/secrets/ns/s");
                assert_eq!(
                    c.open(&sealed, b"/registry/secrets/ns/s").unwrap(),
                    b"top secret"
                );
            }
        }
        let bx = Cipher::secretbox(KEY).unwrap();
        let sealed = bx.seal(b"top secret", b"");
        assert_eq!(bx.open(&sealed, b"").unwrap(), b"top secret");
    }

    #[test]
    fn layouts_are_upstreams() {
        let plain = b"0123456789"; // 10 bytes
                                   // aesgcm: nonce 12 + data + tag 16
        let gcm = Cipher::aes_gcm(KEY).unwrap().seal(plain, b"k");
        assert_eq!(gcm.len(), 12 + 10 + 16);
        // aescbc: IV 16 + one padded block; the last plaintext byte after decryption is the
        // PKCS#7 pad (6 × 0x06), checked by decrypting the block with the IV by hand.
        let cbc = Cipher::aes_cbc(KEY).unwrap().seal(plain, b"k");
        assert_eq!(cbc.len(), 16 + 16);
        let raw = cbc::Decryptor::<aes::Aes256>::new_from_slices(KEY, &cbc[..16])
            .unwrap()
            .decrypt_padded_vec::<cbc::cipher::block_padding::NoPadding>(&cbc[16..])
            .unwrap();
        assert_eq!(&raw[10..], &[6u8; 6]);
        // secretbox: nonce 24 + tag 16 + data (tag first, as NaCl's secretbox.Seal)
        let bx = Cipher::secretbox(KEY).unwrap().seal(plain, b"");
        assert_eq!(bx.len(), 24 + 16 + 10);
    }

    #[test]
    fn aesgcm_authenticates_the_etcd_key_and_cbc_does_not() {
        let gcm = Cipher::aes_gcm(KEY).unwrap();
        let sealed = gcm.seal(b"v", b"/registry/secrets/a/x");
        assert_eq!(
            gcm.open(&sealed, b"/registry/secrets/b/x"),
            Err(CipherError::Authentication)
        );
        let cbc = Cipher::aes_cbc(KEY).unwrap();
        let sealed = cbc.seal(b"v", b"/registry/secrets/a/x");
        assert_eq!(cbc.open(&sealed, b"/other").unwrap(), b"v");
    }

    #[test]
    fn wrong_key_or_short_data_fails() {
        let other = b"fedcba9876543210fedcba9876543210";
        let sealed = Cipher::secretbox(KEY).unwrap().seal(b"v", b"");
        assert_eq!(
            Cipher::secretbox(other).unwrap().open(&sealed, b""),
            Err(CipherError::Secretbox)
        );
        assert_eq!(
            Cipher::aes_gcm(KEY).unwrap().open(b"short", b""),
            Err(CipherError::TooShort)
        );
        assert_eq!(
            Cipher::aes_cbc(KEY).unwrap().open(&[0u8; 20], b""),
            Err(CipherError::BlockSize)
        );
        assert!(matches!(
            Cipher::aes_gcm(&KEY[..8]),
            Err(CipherError::AesKeySize(8))
        ));
        assert!(matches!(
            Cipher::secretbox(&KEY[..16]),
            Err(CipherError::SecretboxKeySize(16))
        ));
    }
}
