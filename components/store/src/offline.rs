//! Offline tools, like etcdutl's: `kiln-store snapshot restore FILE ...` turns a snapshot saved
//! with `etcdctl snapshot save` (against kiln-store) into the data dir of a member of a new
//! cluster; `kiln-store snapshot status FILE` describes a snapshot. Both verify the trailing
//! sha256 first, so a corrupt or truncated file is refused before anything is written.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use rocksdb::WriteBatch;
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::db::{self, CF_KV, CF_SM_META};
use crate::identity::{self, Identity};
use crate::mvcc::{META_ALARMS, META_REVISION};
use crate::raft::snapshot::{self, SnapshotError};
use crate::raft::state_machine::{META_BATCH_PROGRESS, META_LAST_APPLIED, META_MEMBERSHIP};

/// kiln-store offline commands.
#[derive(Debug, Parser)]
#[command(name = "kiln-store", version)]
pub struct OfflineCli {
    #[command(subcommand)]
    pub command: Offline,
}

#[derive(Debug, Subcommand)]
pub enum Offline {
    /// Snapshot files saved with `etcdctl snapshot save`.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Restores a snapshot into a new data dir for a member of a new cluster.
    Restore(RestoreArgs),
    /// Prints hash, revision, total keys and size of a snapshot.
    Status(StatusArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RestoreArgs {
    /// The snapshot file.
    pub file: PathBuf,
    /// Data dir to create (must not exist or be empty); defaults to `<name>.etcd` as etcd.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Name of the member this data dir is for.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// The new cluster, `name=peerURL,...`; defaults to this member alone.
    #[arg(long)]
    pub initial_cluster: Option<String>,
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    #[arg(long, value_delimiter = ',', default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    pub file: PathBuf,
    /// Output format: simple or json.
    #[arg(long, short = 'w', default_value = "simple")]
    pub write_out: String,
}

#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("reading snapshot {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("snapshot {path} is unusable: {source}")]
    Snapshot { path: String, source: SnapshotError },
    #[error("data dir {0} already exists and is not empty; restore into a new directory")]
    DataDirExists(String),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Identity(#[from] identity::IdentityError),
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error("writing restored data: {0}")]
    Write(#[from] rocksdb::Error),
    #[error("--write-out {0:?} is not simple or json")]
    Format(String),
}

/// What a snapshot holds, for `snapshot status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotStatus {
    pub hash: u32,
    pub revision: i64,
    pub total_keys: usize,
    pub total_size: usize,
}

fn read_verified(path: &Path) -> Result<Vec<u8>, OfflineError> {
    let data = std::fs::read(path).map_err(|source| OfflineError::Read {
        path: path.display().to_string(),
        source,
    })?;
    snapshot::parse(&data).map_err(|source| OfflineError::Snapshot {
        path: path.display().to_string(),
        source,
    })?;
    Ok(data)
}

pub fn status(path: &Path) -> Result<SnapshotStatus, OfflineError> {
    let data = read_verified(path)?;
    let records = snapshot::parse(&data).map_err(|source| OfflineError::Snapshot {
        path: path.display().to_string(),
        source,
    })?;
    let revision = records
        .iter()
        .find(|r| r.family == CF_SM_META && r.key == META_REVISION && r.value.len() == 8)
        .map_or(1, |r| {
            let mut b = [0u8; 8];
            b.copy_from_slice(r.value);
            i64::from_be_bytes(b)
        });
    let digest = &data[data.len() - 32..];
    Ok(SnapshotStatus {
        hash: u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]),
        revision,
        total_keys: records.iter().filter(|r| r.family == CF_KV).count(),
        total_size: data.len(),
    })
}

/// Restores `args.file` into a fresh data dir; returns the new member's identity.
pub fn restore(args: &RestoreArgs) -> Result<Identity, OfflineError> {
    let data = read_verified(&args.file)?;
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.etcd", args.name)));
    let non_empty = std::fs::read_dir(&data_dir).is_ok_and(|mut d| d.next().is_some());
    if non_empty {
        return Err(OfflineError::DataDirExists(data_dir.display().to_string()));
    }
    let mut config = Config::for_test(&data_dir);
    config.name = args.name.clone();
    config.initial_cluster = args.initial_cluster.clone();
    config.initial_cluster_token = args.initial_cluster_token.clone();
    config.initial_advertise_peer_urls = args.initial_advertise_peer_urls.clone();
    config.initial_members()?;
    let mut ident = identity::for_new_cluster(&config)?;
    // A new cluster ID, also distinct from a cluster formed with the same flags from scratch.
    let digest = Sha256::digest(&data);
    let mut salt = [0u8; 8];
    salt.copy_from_slice(&digest[..8]);
    ident.cluster_id = identity::cluster_id(
        &[ident.cluster_id, u64::from_be_bytes(salt)],
        &args.initial_cluster_token,
    );

    let database = db::open(&data_dir.join("member"))?;
    let records = snapshot::parse(&data).map_err(|source| OfflineError::Snapshot {
        path: args.file.display().to_string(),
        source,
    })?;
    let mut batch = WriteBatch::default();
    for r in records {
        // The old cluster's Raft position (last applied, progress into a batch entry),
        // membership and alarms do not carry over.
        let dropped = r.family == CF_SM_META
            && [
                META_LAST_APPLIED,
                META_BATCH_PROGRESS,
                META_MEMBERSHIP,
                META_ALARMS,
            ]
            .contains(&r.key);
        if !dropped {
            batch.put_cf(db::cf(&database, r.family), r.key, r.value);
        }
    }
    database.write_opt(batch, &db::sync_write())?;
    identity::save(&database, &ident)?;
    tracing::info!(
        data_dir = %data_dir.display(),
        member = %format!("{:x}", ident.member_id),
        cluster = %format!("{:x}", ident.cluster_id),
        "restored snapshot"
    );
    Ok(ident)
}

/// Runs an offline command; returns what to print.
pub fn run(cli: OfflineCli) -> Result<String, OfflineError> {
    match cli.command {
        Offline::Snapshot(SnapshotCommand::Restore(args)) => {
            let ident = restore(&args)?;
            Ok(format!(
                "restored snapshot {} as member {:x} ({}) of new cluster {:x}\n",
                args.file.display(),
                ident.member_id,
                ident.name,
                ident.cluster_id
            ))
        }
        Offline::Snapshot(SnapshotCommand::Status(args)) => {
            let s = status(&args.file)?;
            match args.write_out.as_str() {
                "simple" => Ok(format!(
                    "{:x}, {}, {}, {} B\n",
                    s.hash, s.revision, s.total_keys, s.total_size
                )),
                "json" => Ok(format!(
                    "{}\n",
                    serde_json::json!({
                        "hash": s.hash,
                        "revision": s.revision,
                        "totalKey": s.total_keys,
                        "totalSize": s.total_size,
                    })
                )),
                other => Err(OfflineError::Format(other.to_string())),
            }
        }
    }
}
