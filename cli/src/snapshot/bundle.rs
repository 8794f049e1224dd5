//! The snapshot bundle: one tar file (0600: it holds the cluster CA's key) with `bundle.json` first, then
//! the store snapshot, cluster.yaml and the state directory (PKI, kubeconfigs) — everything a restore
//! needs, so a restore never depends on anything that was only on the lost machines.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{io, SnapshotError};
use crate::bootstrap::Context;

pub const FORMAT: &str = "kiln-snapshot/v1";
pub const SUFFIX: &str = ".kiln-bundle.tar";
const SKIP_STATE: &[&str] = &["snapshots", "rendered"];

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
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

impl BundleInfo {
    pub fn new(
        ctx: &Context,
        host: &str,
        revision: i64,
        registry_objects: i64,
        sha256: &str,
    ) -> BundleInfo {
        let now = time::OffsetDateTime::now_utc();
        BundleInfo {
            format: FORMAT.into(),
            cluster: ctx.cluster.config.metadata.name.clone(),
            created: now
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            source_host: host.into(),
            revision,
            registry_objects,
            snapshot_sha256: sha256.into(),
            kiln_version: env!("CARGO_PKG_VERSION").into(),
            path: None,
        }
    }

    pub fn file_name(&self) -> String {
        let stamp: String = self
            .created
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(15)
            .collect();
        format!("{}-{stamp}-r{}{SUFFIX}", self.cluster, self.revision)
    }
}

fn tar_err(path: &Path) -> impl Fn(std::io::Error) -> SnapshotError + '_ {
    move |e| SnapshotError::Bundle {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn append_file(
    b: &mut tar::Builder<std::fs::File>,
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

/// Pack the bundle next to `path` and rename it into place (never a half-written bundle under its name).
pub fn write(
    ctx: &Context,
    info: &BundleInfo,
    snapshot: &Path,
    path: &Path,
) -> Result<(), SnapshotError> {
    let partial = path.with_extension("partial");
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .map_err(io("creating", &partial))?
    };
    let mut b = tar::Builder::new(file);
    let json = serde_json::to_vec_pretty(info).expect("bundle info serializes");
    let mut h = tar::Header::new_gnu();
    h.set_size(json.len() as u64);
    h.set_mode(0o600);
    h.set_mtime(0);
    h.set_cksum();
    b.append_data(&mut h, "bundle.json", json.as_slice())
        .map_err(tar_err(&partial))?;
    append_file(&mut b, "snapshot.db", snapshot, &partial)?;
    append_file(&mut b, "cluster.yaml", &ctx.cluster.path, &partial)?;
    let mut state = vec![];
    walk(&ctx.state_dir, &ctx.state_dir, &mut state);
    state.sort();
    for (rel, p) in state {
        append_file(&mut b, &format!("state/{rel}"), &p, &partial)?;
    }
    let file = b.into_inner().map_err(tar_err(&partial))?;
    file.sync_all().map_err(io("syncing", &partial))?;
    std::fs::rename(&partial, path).map_err(io("renaming", path))
}

/// The bundle's description (its first entry), without reading the rest.
pub fn info(path: &Path) -> Result<BundleInfo, SnapshotError> {
    let f = std::fs::File::open(path).map_err(io("opening", path))?;
    let mut ar = tar::Archive::new(f);
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
    Ok(info)
}

/// An unpacked, verified bundle (in a private temp dir, removed on drop).
pub struct Bundle {
    pub info: BundleInfo,
    pub dir: tempfile::TempDir,
}

impl Bundle {
    pub fn open(path: &Path) -> Result<Bundle, SnapshotError> {
        let info = info(path)?;
        let dir = tempfile::Builder::new()
            .prefix("kiln-restore-")
            .tempdir()
            .map_err(io("creating temp dir", path))?;
        let f = std::fs::File::open(path).map_err(io("opening", path))?;
        tar::Archive::new(f)
            .unpack(dir.path())
            .map_err(tar_err(path))?;
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
}

pub fn list(dir: &Path) -> Result<Vec<BundleInfo>, SnapshotError> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.to_string_lossy().ends_with(SUFFIX) {
            match info(&p) {
                Ok(i) => out.push(i),
                Err(e) => tracing::warn!(error = %e, "skipping unreadable bundle"),
            }
        }
    }
    out.sort_by(|a, b| b.created.cmp(&a.created).then(b.revision.cmp(&a.revision)));
    Ok(out)
}

/// Keep the newest `keep` bundles in `dir`, delete the rest.
pub fn rotate(dir: &Path, keep: usize) -> Result<Vec<PathBuf>, SnapshotError> {
    let mut removed = vec![];
    for old in list(dir)?.into_iter().skip(keep) {
        if let Some(p) = old.path {
            std::fs::remove_file(&p).map_err(io("removing", &p))?;
            removed.push(p);
        }
    }
    Ok(removed)
}
