//! `kiln snapshot save|list|restore`

use std::path::PathBuf;

use clap::Subcommand;

use super::cluster::{runtime, ClusterArgs};
use crate::snapshot;

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save a consistent store snapshot plus PKI and cluster.yaml as one bundle (0600), checked by sha256.
    Save {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Output file or directory (default: <stateDir>/snapshots/).
        #[arg(long, short = 'o')]
        out: Option<PathBuf>,
        /// Keep only the newest N bundles in the output directory.
        #[arg(long)]
        keep: Option<usize>,
    },
    /// List bundles, newest first.
    List {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Directory to list (default: <stateDir>/snapshots/).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Restore a bundle: stop the control plane everywhere, restore every store member, start, verify.
    Restore {
        #[command(flatten)]
        cluster: ClusterArgs,
        bundle: PathBuf,
        /// Seconds to wait for the control plane after the restore.
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
    },
}

pub fn run(cmd: SnapshotCommand) -> anyhow::Result<i32> {
    match cmd {
        SnapshotCommand::Save { cluster, out, keep } => {
            let ctx = cluster.context(vec![], 60)?;
            let info = runtime()?.block_on(snapshot::save(&ctx, out.as_deref(), keep))?;
            if cluster.output == "json" {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                println!(
                    "saved {} (revision {}, {} objects, from {}, sha256 {})",
                    info.path
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    info.revision,
                    info.registry_objects,
                    info.source_host,
                    &info.snapshot_sha256[..16]
                );
            }
            Ok(0)
        }
        SnapshotCommand::List { cluster, dir } => {
            let ctx = cluster.context(vec![], 0)?;
            let dir = dir.unwrap_or_else(|| snapshot::default_dir(&ctx));
            let all = snapshot::list(&dir)?;
            if cluster.output == "json" {
                let v: Vec<_> = all
                    .iter()
                    .map(|i| serde_json::json!({"path": i.path, "info": i}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(0);
            }
            println!(
                "{:<26} {:>9} {:>8} {:<8} FILE",
                "CREATED", "REVISION", "OBJECTS", "FROM"
            );
            for i in all {
                println!(
                    "{:<26} {:>9} {:>8} {:<8} {}",
                    i.created,
                    i.revision,
                    i.registry_objects,
                    i.source_host,
                    i.path.map(|p| p.display().to_string()).unwrap_or_default()
                );
            }
            Ok(0)
        }
        SnapshotCommand::Restore {
            cluster,
            bundle,
            wait_timeout,
        } => {
            let ctx = cluster.context(vec![], wait_timeout)?;
            let info = runtime()?.block_on(snapshot::restore(&ctx, &bundle))?;
            println!(
                "restored {} (revision {}, {} objects) and verified",
                bundle.display(),
                info.revision,
                info.registry_objects
            );
            Ok(0)
        }
    }
}
