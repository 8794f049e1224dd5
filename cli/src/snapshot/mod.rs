//! `kiln snapshot save|list|restore`: store snapshots packed as bundles with everything a restore needs
//! (the store snapshot, the cluster's PKI and kubeconfigs, cluster.yaml), and restores that stop the whole
//! control plane first, restore every member, bring it back and verify the data against the bundle.

mod bundle;
pub mod drill;
pub mod drill_cron;
pub mod drill_record;
pub mod drill_source;
pub mod external_restore;
pub mod manifest;
pub mod new_hosts;
pub mod offsite;
mod restore;
pub mod run_log;
pub mod status;
pub(crate) mod store_client;

pub use bundle::{Bundle, BundleInfo};
pub use restore::restore;

use std::path::{Path, PathBuf};

use crate::backup_store::encrypt::{CryptoError, KeyMaterial};
use crate::backup_store::s3::S3Error;
use crate::backup_store::{schedule, BackupStoreError};
use crate::bootstrap::phases::external_etcd::StoreAccess;
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
    #[error("cannot restore onto these hosts: {0}")]
    Incompatible(String),
    #[error("restore verification failed: {0}")]
    Verify(String),
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Transport(#[from] crate::transport::TransportError),
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error(transparent)]
    S3(#[from] S3Error),
    /// Boxed: it can carry a `BootstrapError` and more, and would double every `SnapshotError`'s size.
    #[error(transparent)]
    BackupStore(Box<BackupStoreError>),
}

impl From<BackupStoreError> for SnapshotError {
    fn from(e: BackupStoreError) -> Self {
        SnapshotError::BackupStore(Box::new(e))
    }
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let path = path.to_path_buf();
    move |source| SnapshotError::Io { what, path, source }
}

/// Where bundles go by default: `<stateDir>/snapshots/`.
pub fn default_dir(ctx: &Context) -> PathBuf {
    ctx.state_dir.join("snapshots")
}

/// How a save runs, besides where its data comes from.
#[derive(Debug, Default, Clone, Copy)]
pub struct SaveOptions<'a> {
    /// Output file or directory (default: the default directory of the source).
    pub out: Option<&'a Path>,
    /// Keep only the newest N bundles of the output directory.
    pub keep: Option<usize>,
    /// Encrypt the bundle with this key.
    pub key: Option<&'a KeyMaterial>,
}

/// Where a save gets its store and its state from.
struct SaveSource {
    cluster: String,
    cluster_yaml: PathBuf,
    /// Where the store answers, in the order tried: kiln-store members or an external etcd's endpoints.
    members: Vec<StoreAccess>,
    state: Vec<(String, PathBuf)>,
    state_from: &'static str,
    default_dir: PathBuf,
}

/// Take a snapshot from the first healthy controller, pack the bundle at `out` (or in the default dir),
/// then keep only the newest `keep` bundles of that directory when asked.
pub async fn save(ctx: &Context, opts: SaveOptions<'_>) -> Result<BundleInfo, SnapshotError> {
    let src = SaveSource {
        cluster: ctx.cluster.config.metadata.name.clone(),
        cluster_yaml: ctx.cluster.path.clone(),
        members: StoreAccess::for_cluster(ctx),
        state: bundle::state_files(&ctx.state_dir),
        state_from: "operator",
        default_dir: default_dir(ctx),
    };
    save_from(&src, opts).await
}

/// A save on a controller itself (the scheduled job): its local store member, with the host's PKI in
/// /etc/kiln/pki; the bundle holds cluster.yaml (pushed by `snapshot schedule`) and that PKI.
pub async fn save_on_host(
    cluster_yaml: &Path,
    host: &str,
    opts: SaveOptions<'_>,
) -> Result<BundleInfo, SnapshotError> {
    let cluster = crate::config::load(cluster_yaml).map_err(|e| SnapshotError::Bundle {
        path: cluster_yaml.into(),
        message: e.to_string(),
    })?;
    let h = cluster
        .config
        .host(host)
        .ok_or_else(|| SnapshotError::Bundle {
            path: cluster_yaml.into(),
            message: format!("no host named {host}"),
        })?;
    let pki = PathBuf::from(schedule::HOST_PKI);
    let state = bundle::state_files(&pki)
        .into_iter()
        .map(|(rel, p)| (format!("pki/{host}/{rel}"), p))
        .collect();
    let src = SaveSource {
        cluster: cluster.config.metadata.name.clone(),
        cluster_yaml: cluster_yaml.to_path_buf(),
        // With an external etcd: its endpoints, with this controller's copies of the client cert.
        members: match &cluster.config.spec.store.external {
            Some(ext) => StoreAccess::external_from_pki(ext, &pki),
            None => vec![StoreAccess::kiln_store(&h.name, &h.node_address(), &pki)],
        },
        state,
        state_from: "host",
        default_dir: PathBuf::from(schedule::DEFAULT_DIR),
    };
    save_from(&src, opts).await
}

/// How much of the arriving snapshot is written to the bundle at once.
const WRITE_EVERY: usize = 1 << 20;

async fn save_from(src: &SaveSource, opts: SaveOptions<'_>) -> Result<BundleInfo, SnapshotError> {
    let out = opts.out;
    let dir = match out {
        Some(p) if p.is_dir() => p.to_path_buf(),
        Some(p) => p
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
        None => src.default_dir.clone(),
    };
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io("creating", &dir))?;
    }
    let mut last_err = None;
    for access in &src.members {
        let name = &access.name;
        let store = store_client::StoreClient::connect_access(access).await;
        let mut store = match store {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(host = %name, error = %e, "store not reachable, trying the next controller");
                last_err = Some(e);
                continue;
            }
        };
        // A plain bundle is written as the snapshot arrives; an encrypted one once it is complete.
        let mut incoming = match opts.key {
            None => Some(bundle::Incoming::create(&dir)?),
            Some(_) => None,
        };
        // Stage timings at debug level (`--log kiln=debug`): what a slow save spends its time on.
        let t = std::time::Instant::now();
        let mut counter = manifest::Counter::default();
        // Written to the bundle a MiB at a time, not one syscall per 32 KiB message.
        let mut written = 0;
        let fetched = store
            .fetch_snapshot(|data| {
                if let Some(b) = incoming.as_mut() {
                    if data.len() - written >= WRITE_EVERY {
                        b.write_snapshot(&data[written..])?;
                        written = data.len();
                    }
                }
                counter.feed(data);
                Ok(())
            })
            .await;
        let snap = match fetched {
            Ok(s) => s,
            Err(e) => {
                last_err = Some(e);
                continue;
            }
        };
        tracing::debug!(
            seconds = t.elapsed().as_secs_f64(),
            bytes = snap.data.len(),
            "snapshot received"
        );
        if let Some(b) = incoming.as_mut() {
            b.write_snapshot(&snap.data[written..])?;
            b.start_writeback();
        }
        // The revision and the object count come from the snapshot's own bytes (read as they arrived): the
        // same answers as reads at its revision, without asking the store again or reading the file back.
        let t = std::time::Instant::now();
        let counted = match counter.finish(&snap.data) {
            Ok(r) => r,
            Err(e) => {
                last_err = Some(SnapshotError::Corrupt {
                    endpoint: store.endpoint().to_string(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        tracing::debug!(
            seconds = t.elapsed().as_secs_f64(),
            revision = counted.revision,
            objects = counted.registry_objects,
            "revision read and objects counted"
        );
        let mut info = BundleInfo::new(
            &src.cluster,
            name,
            counted.revision,
            counted.registry_objects,
            &snap.sha256,
        );
        info.state_from = src.state_from.into();
        let path = match out {
            Some(p) if !p.is_dir() => p.to_path_buf(),
            _ => dir.join(info.file_name()),
        };
        let contents = bundle::Contents {
            snapshot: &snap.data,
            cluster_yaml: &src.cluster_yaml,
            state: src.state.clone(),
        };
        let t = std::time::Instant::now();
        let streamed = match incoming {
            Some(b) => b.finish(&info, &contents, &path)?,
            None => false,
        };
        if !streamed {
            bundle::write(&info, &contents, opts.key, &path)?;
        }
        tracing::debug!(seconds = t.elapsed().as_secs_f64(), "bundle written");
        if let Some(keep) = opts.keep {
            bundle::rotate(&dir, keep, opts.key)?;
        }
        return Ok(BundleInfo {
            path: Some(path),
            encrypted: opts.key.is_some(),
            ..info
        });
    }
    Err(last_err.unwrap_or_else(|| SnapshotError::Store {
        endpoint: "-".into(),
        message: "cluster.yaml has no controller".into(),
    }))
}

/// A store member's (or external etcd endpoint's) current revision and its number of Kubernetes
/// objects (for `kiln status`).
pub async fn store_status(access: &StoreAccess) -> Result<(i64, i64), SnapshotError> {
    let mut c = store_client::StoreClient::connect_access(access).await?;
    c.current().await
}

/// Bundles in `dir`, newest first (encrypted ones the key does not open: from their file's time only).
pub fn list(dir: &Path, key: Option<&KeyMaterial>) -> Result<Vec<BundleInfo>, SnapshotError> {
    bundle::list(dir, key)
}
