//! The snapshot bundle: one tar file (0600: it holds the cluster CA's key) with `bundle.json` first, then
//! the store snapshot, cluster.yaml and the state directory (PKI, kubeconfigs) — everything a restore
//! needs, so a restore never depends on anything that was only on the lost machines.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::manifest::{self, ObjectRecord};
use super::{io, SnapshotError};
use crate::backup_store::encrypt::{self, DecryptReader, EncryptWriter, KeyMaterial};
use crate::backup_store::BUNDLE_SUFFIX;

pub const FORMAT: &str = "kiln-snapshot/v1";
const SKIP_STATE: &[&str] = &["snapshots", "rendered"];
/// The member that listed the Kubernetes objects at the snapshot's revision in bundles of earlier kiln
/// versions (now read from the snapshot when a drill asks).
pub const OBJECTS: &str = "objects.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleInfo {
    pub format: String,
    pub cluster: String,
    /// RFC 3339, UTC.
    pub created: String,
    pub source_host: String,
    /// The store revision the snapshot holds.
    pub revision: i64,
    /// Keys under /registry/ at that revision: a restore must show exactly these.
    pub registry_objects: i64,
    pub snapshot_sha256: String,
    pub kiln_version: String,
    /// Where the state directory in the bundle came from: "operator" (the whole state directory) or
    /// "host" (a scheduled save on a controller: that host's /etc/kiln/pki).
    #[serde(default = "operator")]
    pub state_from: String,
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// The file is encrypted (known from its header, not stored in bundle.json).
    #[serde(skip)]
    pub encrypted: bool,
}

fn operator() -> String {
    "operator".into()
}

impl BundleInfo {
    pub fn new(
        cluster: &str,
        host: &str,
        revision: i64,
        registry_objects: i64,
        sha256: &str,
    ) -> BundleInfo {
        let now = time::OffsetDateTime::now_utc();
        BundleInfo {
            format: FORMAT.into(),
            cluster: cluster.into(),
            created: now
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            source_host: host.into(),
            revision,
            registry_objects,
            snapshot_sha256: sha256.into(),
            kiln_version: env!("CARGO_PKG_VERSION").into(),
            state_from: operator(),
            path: None,
            encrypted: false,
        }
    }

    pub fn file_name(&self) -> String {
        let stamp: String = self
            .created
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(15)
            .collect();
        format!("{}-{stamp}-r{}{BUNDLE_SUFFIX}", self.cluster, self.revision)
    }
}

/// A tar error, named by what it really is when the cause is the decryption underneath.
fn tar_err(path: &Path) -> impl Fn(std::io::Error) -> SnapshotError + '_ {
    move |e| SnapshotError::Bundle {
        path: path.to_path_buf(),
        message: match encrypt::crypto_cause(&e) {
            Some(c) => c.to_string(),
            None => e.to_string(),
        },
    }
}

/// Where the tar goes: the file itself, or the file through the chunked AEAD.
enum Sink {
    Plain(std::fs::File),
    Sealed(Box<EncryptWriter<std::fs::File>>),
}

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(f) => f.write(b),
            Sink::Sealed(w) => w.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(f) => f.flush(),
            Sink::Sealed(w) => w.flush(),
        }
    }
}

impl Sink {
    fn finish(self) -> std::io::Result<std::fs::File> {
        match self {
            Sink::Plain(f) => Ok(f),
            Sink::Sealed(w) => (*w).finish(),
        }
    }
}

/// Where the tar comes from.
enum Source {
    Plain(std::fs::File),
    Sealed(Box<DecryptReader<std::fs::File>>),
}

impl Read for Source {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Plain(f) => f.read(b),
            Source::Sealed(r) => r.read(b),
        }
    }
}

/// Open a bundle for reading: an encrypted one needs the key, and says so by name when it is missing.
fn source(path: &Path, key: Option<&KeyMaterial>) -> Result<(Source, bool), SnapshotError> {
    let sealed = encrypt::is_encrypted(path).map_err(io("opening", path))?;
    let f = std::fs::File::open(path).map_err(io("opening", path))?;
    if !sealed {
        return Ok((Source::Plain(f), false));
    }
    let Some(key) = key else {
        return Err(SnapshotError::Bundle {
            path: path.into(),
            message: "the bundle is encrypted: pass --encrypt-key-file".into(),
        });
    };
    let r = DecryptReader::new(f, key).map_err(|e| SnapshotError::Bundle {
        path: path.into(),
        message: e.to_string(),
    })?;
    Ok((Source::Sealed(Box::new(r)), true))
}

fn append_bytes<W: Write>(
    b: &mut tar::Builder<W>,
    name: &str,
    data: &[u8],
    out: &Path,
) -> Result<(), SnapshotError> {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o600);
    h.set_mtime(0);
    h.set_cksum();
    b.append_data(&mut h, name, data).map_err(tar_err(out))
}

fn append_file<W: Write>(
    b: &mut tar::Builder<W>,
    name: &str,
    src: &Path,
    out: &Path,
) -> Result<(), SnapshotError> {
    let mut f = std::fs::File::open(src).map_err(io("reading", src))?;
    let len = f.metadata().map_err(io("reading", src))?.len();
    let mut h = tar::Header::new_gnu();
    h.set_size(len);
    h.set_mode(0o600);
    h.set_mtime(0);
    h.set_cksum();
    b.append_data(&mut h, name, &mut f).map_err(tar_err(out))
}

fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let rel = p
            .strip_prefix(base)
            .expect("under base")
            .to_string_lossy()
            .into_owned();
        if SKIP_STATE.iter().any(|s| rel == *s) || rel.ends_with(".partial") {
            continue;
        }
        if p.is_dir() {
            walk(&p, base, out);
        } else {
            out.push((rel, p));
        }
    }
}

/// The files of a state directory, as (path inside it, file), sorted; snapshots and renders left out.
pub fn state_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v = vec![];
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// What goes into a bundle besides bundle.json.
pub struct Contents<'a> {
    /// The store snapshot's bytes (received into memory: written here once, never copied from a file).
    pub snapshot: &'a [u8],
    pub cluster_yaml: &'a Path,
    /// (path under state/, file)
    pub state: Vec<(String, PathBuf)>,
}

fn create_private(partial: &Path) -> Result<std::fs::File, SnapshotError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(partial)
        .map_err(io("creating", partial))
}

/// Pack the bundle next to `path` and rename it into place (never a half-written bundle under its name),
/// encrypted when a key is given.
pub fn write(
    info: &BundleInfo,
    contents: &Contents<'_>,
    key: Option<&KeyMaterial>,
    path: &Path,
) -> Result<(), SnapshotError> {
    let partial = path.with_extension("partial");
    let file = create_private(&partial)?;
    let sink = match key {
        Some(k) => Sink::Sealed(Box::new(
            EncryptWriter::new(file, k).map_err(tar_err(&partial))?,
        )),
        None => Sink::Plain(file),
    };
    let mut b = tar::Builder::new(sink);
    let json = serde_json::to_vec_pretty(info).expect("bundle info serializes");
    append_bytes(&mut b, "bundle.json", &json, &partial)?;
    append_bytes(&mut b, "snapshot.db", contents.snapshot, &partial)?;
    append_rest(&mut b, contents, &partial)?;
    let sink = b.into_inner().map_err(tar_err(&partial))?;
    let file = sink.finish().map_err(tar_err(&partial))?;
    file.sync_all().map_err(io("syncing", &partial))?;
    std::fs::rename(&partial, path).map_err(io("renaming", path))
}

/// Everything after snapshot.db: cluster.yaml and the state directory.
fn append_rest<W: Write>(
    b: &mut tar::Builder<W>,
    contents: &Contents<'_>,
    out: &Path,
) -> Result<(), SnapshotError> {
    append_file(b, "cluster.yaml", contents.cluster_yaml, out)?;
    for (rel, p) in &contents.state {
        append_file(b, &format!("state/{rel}"), p, out)?;
    }
    Ok(())
}

const BLOCK: u64 = 512;
/// Bytes bundle.json gets in a bundle written while its snapshot arrives (bundle.json needs the
/// snapshot's revision and sha256 but comes first): the JSON, padded with spaces. It needs about 400.
const INFO_SLOT: u64 = 4096;

/// A plain bundle written while its snapshot arrives, so the snapshot is written once, as it comes: its
/// bytes go straight to their place in the tar, after bundle.json's header and slot and snapshot.db's
/// header; when the snapshot is complete the rest is appended and those two headers and bundle.json are
/// filled in. The same tar as [`write`] makes, but for bundle.json's padding. Removed when dropped
/// unfinished.
pub struct Incoming {
    file: Option<std::fs::File>,
    partial: PathBuf,
    snapshot_len: u64,
    /// Snapshot bytes whose writeback was started (see [`WRITEBACK_EVERY`]).
    written_back: u64,
}

/// While the snapshot arrives, its writeback to disk is started every this many bytes (as rocksdb's
/// bytes_per_sync), so the fsync at the end waits for the last few MiB only, not for the whole file.
const WRITEBACK_EVERY: u64 = 4 << 20;

impl Incoming {
    /// Start a bundle in `dir` (under a temporary name; [`Incoming::finish`] names it).
    pub fn create(dir: &Path) -> Result<Incoming, SnapshotError> {
        let partial = dir.join(format!(".{}.bundle.partial", std::process::id()));
        let mut file = create_private(&partial)?;
        let at = file
            .seek(SeekFrom::Start(BLOCK + INFO_SLOT + BLOCK))
            .map_err(io("writing", &partial));
        let incoming = Incoming {
            file: Some(file),
            partial,
            snapshot_len: 0,
            written_back: 0,
        };
        at?;
        Ok(incoming)
    }

    /// The next bytes of the snapshot.
    pub fn write_snapshot(&mut self, chunk: &[u8]) -> Result<(), SnapshotError> {
        let file = self.file.as_mut().expect("open until finished");
        file.write_all(chunk)
            .map_err(io("writing", &self.partial))?;
        self.snapshot_len += chunk.len() as u64;
        if self.snapshot_len - self.written_back >= WRITEBACK_EVERY {
            self.start_writeback();
        }
        Ok(())
    }

    /// Start writing the snapshot's bytes not yet on their way to disk, without waiting: every
    /// [`WRITEBACK_EVERY`] bytes, and once the snapshot is complete (so the writeback of its last bytes
    /// overlaps the work before [`Incoming::finish`]).
    pub fn start_writeback(&mut self) {
        use std::os::fd::AsRawFd;
        let Some(file) = self.file.as_ref() else {
            return;
        };
        let from = BLOCK + INFO_SLOT + BLOCK + self.written_back;
        let len = self.snapshot_len - self.written_back;
        // SAFETY: a plain syscall on a descriptor we own; it only starts writeback of a range already
        // written. A failure is no error: the fsync in `finish` writes everything anyway.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                from as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        self.written_back = self.snapshot_len;
    }

    /// Complete the bundle and rename it to `path`. `Ok(false)`, and nothing left behind, when bundle.json
    /// does not fit its slot (absurdly long cluster or host names): the caller then uses [`write`].
    pub fn finish(
        mut self,
        info: &BundleInfo,
        contents: &Contents<'_>,
        path: &Path,
    ) -> Result<bool, SnapshotError> {
        let mut json = serde_json::to_vec_pretty(info).expect("bundle info serializes");
        if json.len() as u64 >= INFO_SLOT {
            return Ok(false);
        }
        json.push(b'\n');
        json.resize(INFO_SLOT as usize, b' ');
        let partial = self.partial.clone();
        let mut file = self.file.take().expect("open until finished");
        let pad = (BLOCK - self.snapshot_len % BLOCK) % BLOCK;
        file.write_all(&vec![0u8; pad as usize])
            .map_err(io("writing", &partial))?;
        let mut b = tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, file));
        append_rest(&mut b, contents, &partial)?;
        let mut file = b
            .into_inner()
            .map_err(tar_err(&partial))?
            .into_inner()
            .map_err(|e| io("writing", &partial)(e.into_error()))?;
        let mut front = header("bundle.json", INFO_SLOT, &partial)?;
        front.extend_from_slice(&json);
        front.extend_from_slice(&header("snapshot.db", self.snapshot_len, &partial)?);
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&front))
            .map_err(io("writing", &partial))?;
        file.sync_all().map_err(io("syncing", &partial))?;
        std::fs::rename(&partial, path).map_err(io("renaming", path))?;
        Ok(true)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Unfinished or failed (once renamed, there is nothing under this name).
        let _ = std::fs::remove_file(&self.partial);
    }
}

/// A tar header as [`append_bytes`] makes it.
fn header(name: &str, size: u64, out: &Path) -> Result<Vec<u8>, SnapshotError> {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).map_err(tar_err(out))?;
    h.set_size(size);
    h.set_mode(0o600);
    h.set_mtime(0);
    h.set_cksum();
    Ok(h.as_bytes().to_vec())
}

/// The bundle's description (its first entry), without reading the rest.
pub fn info(path: &Path, key: Option<&KeyMaterial>) -> Result<BundleInfo, SnapshotError> {
    let (src, encrypted) = source(path, key)?;
    let mut ar = tar::Archive::new(src);
    let mut entries = ar.entries().map_err(tar_err(path))?;
    let mut first = entries
        .next()
        .ok_or_else(|| SnapshotError::Bundle {
            path: path.into(),
            message: "empty archive".into(),
        })?
        .map_err(tar_err(path))?;
    if first.path().map_err(tar_err(path))?.to_string_lossy() != "bundle.json" {
        return Err(SnapshotError::Bundle {
            path: path.into(),
            message: "not a kiln bundle (no bundle.json)".into(),
        });
    }
    let mut s = String::new();
    first.read_to_string(&mut s).map_err(tar_err(path))?;
    let mut info: BundleInfo = serde_json::from_str(&s).map_err(|e| SnapshotError::Bundle {
        path: path.into(),
        message: format!("bundle.json: {e}"),
    })?;
    if info.format != FORMAT {
        return Err(SnapshotError::Bundle {
            path: path.into(),
            message: format!("format {:?}, expected {FORMAT}", info.format),
        });
    }
    info.path = Some(path.to_path_buf());
    info.encrypted = encrypted;
    Ok(info)
}

/// An unpacked, verified bundle (in a private temp dir, removed on drop).
pub struct Bundle {
    pub info: BundleInfo,
    pub dir: tempfile::TempDir,
}

impl Bundle {
    /// Unpack and check: every chunk of an encrypted bundle authenticated (to its end), and the snapshot's
    /// sha256 as recorded.
    pub fn open(path: &Path, key: Option<&KeyMaterial>) -> Result<Bundle, SnapshotError> {
        let info = info(path, key)?;
        let dir = tempfile::Builder::new()
            .prefix("kiln-restore-")
            .tempdir()
            .map_err(io("creating temp dir", path))?;
        let (src, _) = source(path, key)?;
        let mut ar = tar::Archive::new(src);
        ar.unpack(dir.path()).map_err(tar_err(path))?;
        // tar stops at its end-of-archive blocks: drain the rest so a cut or tampered tail is noticed.
        std::io::copy(&mut ar.into_inner(), &mut std::io::sink()).map_err(tar_err(path))?;
        let db = dir.path().join("snapshot.db");
        let mut h = Sha256::new();
        let mut f = std::fs::File::open(&db).map_err(io("reading", &db))?;
        std::io::copy(&mut f, &mut h).map_err(io("reading", &db))?;
        let got = hex::encode(h.finalize());
        if got != info.snapshot_sha256 {
            return Err(SnapshotError::Bundle {
                path: path.into(),
                message: format!(
                    "snapshot.db sha256 {got} does not match bundle.json's {}",
                    info.snapshot_sha256
                ),
            });
        }
        Ok(Bundle { info, dir })
    }

    pub fn snapshot(&self) -> PathBuf {
        self.dir.path().join("snapshot.db")
    }

    pub fn cluster_yaml(&self) -> PathBuf {
        self.dir.path().join("cluster.yaml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The objects at the snapshot's revision, read from the bundle's snapshot (checked against
    /// bundle.json when the bundle was opened); bundles saved by earlier kiln versions carry them as
    /// objects.json, read as it is.
    pub fn objects(&self) -> Result<Vec<ObjectRecord>, SnapshotError> {
        let p = self.dir.path().join(OBJECTS);
        match std::fs::read(&p) {
            Ok(b) => {
                return serde_json::from_slice(&b).map_err(|e| SnapshotError::Bundle {
                    path: p,
                    message: e.to_string(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("reading", &p)(e)),
        }
        let snap = self.snapshot();
        let data = std::fs::read(&snap).map_err(io("reading", &snap))?;
        manifest::objects_in(&data).map_err(|e| SnapshotError::Bundle {
            path: snap,
            message: e.to_string(),
        })
    }
}

/// Bundles in `dir`, newest first. Encrypted ones that the key (if any) does not open are listed from
/// their file's time only, marked encrypted.
pub fn list(dir: &Path, key: Option<&KeyMaterial>) -> Result<Vec<BundleInfo>, SnapshotError> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if !p.to_string_lossy().ends_with(BUNDLE_SUFFIX) {
            continue;
        }
        match info(&p, key) {
            Ok(i) => out.push(i),
            Err(err) if encrypt::is_encrypted(&p).unwrap_or(false) => {
                tracing::debug!(error = %err, "encrypted bundle listed without its contents");
                out.push(unopened(&p));
            }
            Err(e) => tracing::warn!(error = %e, "skipping unreadable bundle"),
        }
    }
    out.sort_by(|a, b| b.created.cmp(&a.created).then(b.revision.cmp(&a.revision)));
    Ok(out)
}

fn unopened(p: &Path) -> BundleInfo {
    let created = std::fs::metadata(p)
        .and_then(|m| m.modified())
        .map(time::OffsetDateTime::from)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default();
    BundleInfo {
        format: FORMAT.into(),
        cluster: "?".into(),
        created,
        source_host: "?".into(),
        revision: 0,
        registry_objects: 0,
        snapshot_sha256: String::new(),
        kiln_version: String::new(),
        state_from: String::new(),
        path: Some(p.to_path_buf()),
        encrypted: true,
    }
}

/// Keep the newest `keep` bundles in `dir`, delete the rest.
pub fn rotate(
    dir: &Path,
    keep: usize,
    key: Option<&KeyMaterial>,
) -> Result<Vec<PathBuf>, SnapshotError> {
    let mut removed = vec![];
    for old in list(dir, key)?.into_iter().skip(keep) {
        if let Some(p) = old.path {
            std::fs::remove_file(&p).map_err(io("removing", &p))?;
            removed.push(p);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(dir: &Path, key: Option<&KeyMaterial>) -> PathBuf {
        let db = vec![42u8; 3 << 20];
        let cy = dir.join("cluster.yaml");
        std::fs::write(&cy, "kind: Cluster\n").unwrap();
        let sha = hex::encode(Sha256::digest(&db));
        let info = BundleInfo::new("c1", "host1", 7, 3, &sha);
        let out = dir.join(info.file_name());
        let contents = Contents {
            snapshot: &db,
            cluster_yaml: &cy,
            state: vec![("pki/host1/ca.crt".into(), cy.clone())],
        };
        write(&info, &contents, key, &out).unwrap();
        out
    }

    #[test]
    fn an_encrypted_bundle_opens_only_with_its_key() {
        let d = tempfile::tempdir().unwrap();
        let key = KeyMaterial::from_bytes(b"bundle passphrase".to_vec()).unwrap();
        let p = sample(d.path(), Some(&key));
        let b = Bundle::open(&p, Some(&key)).unwrap();
        assert!(b.info.encrypted);
        assert_eq!(b.info.revision, 7);
        assert!(b.state_dir().join("pki/host1/ca.crt").exists());
        let e = Bundle::open(&p, None).err().unwrap().to_string();
        assert!(e.contains("encrypted: pass --encrypt-key-file"), "{e}");
        let wrong = KeyMaterial::from_bytes(b"another passphrase".to_vec()).unwrap();
        let e = Bundle::open(&p, Some(&wrong)).err().unwrap().to_string();
        assert_eq!(
            e,
            format!(
                "bundle {}: wrong key or corrupted (authentication failed)",
                p.display()
            )
        );
        // Listed without the key: present, marked encrypted.
        let l = list(d.path(), None).unwrap();
        assert_eq!(l.len(), 1);
        assert!(l[0].encrypted);
    }

    #[test]
    fn a_cut_or_flipped_encrypted_bundle_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let key = KeyMaterial::from_bytes(vec![1u8; 32]).unwrap();
        let p = sample(d.path(), Some(&key));
        let bytes = std::fs::read(&p).unwrap();
        let cut = d.path().join("cut.tar");
        std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
        assert!(Bundle::open(&cut, Some(&key)).is_err());
        let mut flipped = bytes.clone();
        let n = flipped.len();
        flipped[n / 2] ^= 0x10;
        let bad = d.path().join("bad.tar");
        std::fs::write(&bad, flipped).unwrap();
        let e = Bundle::open(&bad, Some(&key)).err().unwrap().to_string();
        assert!(e.contains("authentication failed"), "{e}");
    }

    #[test]
    fn a_bundle_written_as_its_snapshot_arrives_opens_like_any_other() {
        let d = tempfile::tempdir().unwrap();
        // A kiln-store snapshot of a little over 1 MiB (the bundle is written a MiB at a time).
        use kiln_common::store_snapshot::{encode_kv, kv_record};
        let cm = br#"{"metadata":{"name":"c","namespace":"n","uid":"u-1"}}"#;
        let filler = vec![b'x'; (1 << 20) + 77];
        let kv = [
            kv_record(b"/registry/configmaps/n/c", 3, Some(cm)),
            kv_record(b"/registry/events/n/e", 4, Some(&filler)),
        ];
        let db = encode_kv(&kv, 4);
        let cy = d.path().join("cluster.yaml");
        std::fs::write(&cy, "kind: Cluster\n").unwrap();
        let info = BundleInfo::new("c1", "host1", 9, 4, &hex::encode(Sha256::digest(&db)));
        let contents = Contents {
            snapshot: &db,
            cluster_yaml: &cy,
            state: vec![("pki/host1/ca.crt".into(), cy.clone())],
        };
        let mut incoming = Incoming::create(d.path()).unwrap();
        for chunk in db.chunks(32 * 1024) {
            incoming.write_snapshot(chunk).unwrap();
        }
        let out = d.path().join(info.file_name());
        assert!(incoming.finish(&info, &contents, &out).unwrap());
        let b = Bundle::open(&out, None).unwrap();
        assert_eq!(b.info.revision, 9);
        assert_eq!(b.info.registry_objects, 4);
        assert_eq!(std::fs::read(b.snapshot()).unwrap(), db);
        assert!(b.state_dir().join("pki/host1/ca.crt").exists());
        // The objects at the snapshot's revision, read from the snapshot in the bundle.
        let objects = b.objects().unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(
            (objects[0].id(), objects[0].uid.as_str()),
            ("ConfigMap n/c".to_string(), "u-1")
        );
        // Only the bundle is left in the directory.
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");

        // Dropped unfinished (a failed transfer): nothing left behind.
        let mut cut = Incoming::create(d.path()).unwrap();
        cut.write_snapshot(b"part").unwrap();
        drop(cut);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_plain_bundle_still_opens_without_a_key() {
        let d = tempfile::tempdir().unwrap();
        let p = sample(d.path(), None);
        let b = Bundle::open(&p, None).unwrap();
        assert!(!b.info.encrypted);
        // Its snapshot is no kiln-store snapshot: no objects to read, and the error names the file.
        let e = b.objects().unwrap_err().to_string();
        assert!(e.contains("snapshot.db"), "{e}");
    }
}
