//! `kiln snapshot save|list|restore`: store snapshots packed as bundles with everything a restore needs
//! (the store snapshot, the cluster's PKI and kubeconfigs, cluster.yaml), and restores that stop the whole
//! control plane first, restore every member, bring it back and verify the data against the bundle.

mod bundle;
mod restore;
pub(crate) mod store_client;

pub use bundle::{Bundle, BundleInfo};
pub use restore::restore;

use std::path::{Path, PathBuf};

use crate::bootstrap::{BootstrapError, Context};

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("store {endpoint}: {message}")]
    Store { endpoint: String, message: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bundle {path}: {message}")]
    Bundle { path: PathBuf, message: String },
    #[error("snapshot from {endpoint} is corrupt: {message}")]
    Corrupt { endpoint: String, message: String },
    #[error("restore verification failed: {0}")]
    Verify(String),
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Transport(#[from] crate::transport::TransportError),
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let path = path.to_path_buf();
    move |source| SnapshotError::Io { what, path, source }
}

/// Where bundles go by default: `<stateDir>/snapshots/`.
pub fn default_dir(ctx: &Context) -> PathBuf {
    ctx.state_dir.join("snapshots")
}

/// Take a snapshot from the first healthy controller, pack the bundle at `out` (or in the default dir),
/// then keep only the newest `keep` bundles of that directory when asked.
pub async fn save(
    ctx: &Context,
    out: Option<&Path>,
    keep: Option<usize>,
) -> Result<BundleInfo, SnapshotError> {
    let dir = match out {
        Some(p) if p.is_dir() => p.to_path_buf(),
        Some(p) => p
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
        None => default_dir(ctx),
    };
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    let mut last_err = None;
    for host in ctx.cluster.config.controllers() {
        let store = store_client::StoreClient::connect(ctx, host).await;
        let mut store = match store {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(host = %host.name, error = %e, "store not reachable, trying the next controller");
                last_err = Some(e);
                continue;
            }
        };
        let tmp = dir.join(format!(".{}.snapshot.partial", std::process::id()));
        let saved = store.save_snapshot(&tmp).await;
        let db = match saved.and_then(|mut db| {
            db.revision = store_client::snapshot_revision(&ctx.bin_dir.join("kiln-store"), &tmp)?;
            Ok(db)
        }) {
            Ok(db) => db,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                last_err = Some(e);
                continue;
            }
        };
        let count = store.count_registry(db.revision).await?;
        let info = BundleInfo::new(ctx, &host.name, db.revision, count, &db.sha256);
        let path = match out {
            Some(p) if !p.is_dir() => p.to_path_buf(),
            _ => dir.join(info.file_name()),
        };
        bundle::write(ctx, &info, &tmp, &path)?;
        let _ = std::fs::remove_file(&tmp);
        if let Some(keep) = keep {
            bundle::rotate(&dir, keep)?;
        }
        return Ok(BundleInfo {
            path: Some(path),
            ..info
        });
    }
    Err(last_err.unwrap_or_else(|| SnapshotError::Store {
        endpoint: "-".into(),
        message: "cluster.yaml has no controller".into(),
    }))
}

/// A store member's current revision and its number of Kubernetes objects (for `kiln status`).
pub async fn store_status(
    ctx: &Context,
    host: &crate::config::Host,
) -> Result<(i64, i64), SnapshotError> {
    let mut c = store_client::StoreClient::connect(ctx, host).await?;
    c.current().await
}

/// Bundles in `dir`, newest first.
pub fn list(dir: &Path) -> Result<Vec<BundleInfo>, SnapshotError> {
    bundle::list(dir)
}
