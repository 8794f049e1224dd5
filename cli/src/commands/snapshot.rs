//! `kiln snapshot save|list|restore|schedule`

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::cluster::{runtime, ClusterArgs};
use crate::snapshot::{self, schedule, KeyMaterial, SaveOptions};

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
        /// Encrypt the bundle (AES-256-GCM): the file holds 32 random bytes or a passphrase.
        #[arg(long)]
        encrypt_key_file: Option<PathBuf>,
        /// Run on a controller itself against its local store member, with /etc/kiln/pki (what the
        /// scheduled job does); the value is this host's name in cluster.yaml.
        #[arg(long, value_name = "HOST")]
        on_host: Option<String>,
        /// Append the result (time, file, revision, sha256, or the error) to this file.
        #[arg(long)]
        log_file: Option<PathBuf>,
    },
    /// List bundles, newest first.
    List {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Directory to list (default: <stateDir>/snapshots/).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Key for encrypted bundles (without it they are listed by file time only).
        #[arg(long)]
        encrypt_key_file: Option<PathBuf>,
    },
    /// Restore a bundle: stop the control plane everywhere, restore every store member, start, verify.
    /// Onto other or fresh hosts (a cluster.yaml whose controllers differ from the bundle's): seed the
    /// state from the bundle (same CA), re-issue serving certificates, init, restore, settle the nodes.
    Restore {
        #[command(flatten)]
        cluster: ClusterArgs,
        bundle: PathBuf,
        /// Seconds to wait for the control plane after the restore.
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
        /// Key of an encrypted bundle.
        #[arg(long)]
        encrypt_key_file: Option<PathBuf>,
    },
    /// Scheduled bundles on every controller (systemd timer, or a loop script without systemd).
    Schedule {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Interval: 6h, 30m, 45s, 1d.
        #[arg(long, required_unless_present_any = ["remove", "status"])]
        every: Option<String>,
        /// Bundles to keep on each controller.
        #[arg(long, default_value_t = 10)]
        keep: usize,
        /// Directory on the controllers (user data: `kiln reset` leaves it).
        #[arg(long, default_value = schedule::DEFAULT_DIR)]
        dir: String,
        /// Encrypt the scheduled bundles with this key (copied to the controllers, 0600).
        #[arg(long)]
        encrypt_key_file: Option<PathBuf>,
        /// Uninstall the schedule (bundles and the log stay).
        #[arg(long, conflicts_with_all = ["status", "every"])]
        remove: bool,
        /// Per controller: installed?, interval, last run and result, bundle count.
        #[arg(long, conflicts_with = "every")]
        status: bool,
    },
}

fn key(file: Option<&Path>) -> anyhow::Result<Option<KeyMaterial>> {
    Ok(match file {
        Some(f) => Some(KeyMaterial::from_file(f)?),
        None => None,
    })
}

fn print_saved(info: &snapshot::BundleInfo, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(info)?);
    } else {
        println!(
            "saved {} (revision {}, {} objects, from {}, sha256 {}{})",
            info.path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            info.revision,
            info.registry_objects,
            info.source_host,
            &info.snapshot_sha256[..16],
            if info.encrypted { ", encrypted" } else { "" }
        );
    }
    Ok(())
}

pub fn run(cmd: SnapshotCommand) -> anyhow::Result<i32> {
    match cmd {
        SnapshotCommand::Save {
            cluster,
            out,
            keep,
            encrypt_key_file,
            on_host,
            log_file,
        } => {
            let key = key(encrypt_key_file.as_deref())?;
            let opts = SaveOptions {
                out: out.as_deref(),
                keep,
                key: key.as_ref(),
            };
            let result = match &on_host {
                Some(host) => {
                    runtime()?.block_on(snapshot::save_on_host(&cluster.file, host, opts))
                }
                None => {
                    let ctx = cluster.context(vec![], 60)?;
                    runtime()?.block_on(snapshot::save(&ctx, opts))
                }
            };
            if let Some(log) = &log_file {
                if let Err(e) = schedule::append_log(log, &schedule::log_line(&result)) {
                    tracing::warn!(log = %log.display(), error = %e, "cannot append to the log");
                }
            }
            print_saved(&result?, cluster.output == "json")?;
            Ok(0)
        }
        SnapshotCommand::List {
            cluster,
            dir,
            encrypt_key_file,
        } => {
            let ctx = cluster.context(vec![], 0)?;
            let key = key(encrypt_key_file.as_deref())?;
            let dir = dir.unwrap_or_else(|| snapshot::default_dir(&ctx));
            let all = snapshot::list(&dir, key.as_ref())?;
            if cluster.output == "json" {
                let v: Vec<_> = all
                    .iter()
                    .map(|i| serde_json::json!({"path": i.path, "encrypted": i.encrypted, "info": i}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(0);
            }
            println!(
                "{:<26} {:>9} {:>8} {:<8} {:<9} FILE",
                "CREATED", "REVISION", "OBJECTS", "FROM", "ENCRYPTED"
            );
            for i in all {
                let unopened = i.encrypted && i.snapshot_sha256.is_empty();
                println!(
                    "{:<26} {:>9} {:>8} {:<8} {:<9} {}",
                    i.created,
                    if unopened {
                        "?".into()
                    } else {
                        i.revision.to_string()
                    },
                    if unopened {
                        "?".into()
                    } else {
                        i.registry_objects.to_string()
                    },
                    i.source_host,
                    if unopened {
                        "yes (key?)"
                    } else if i.encrypted {
                        "yes"
                    } else {
                        "no"
                    },
                    i.path.map(|p| p.display().to_string()).unwrap_or_default()
                );
            }
            Ok(0)
        }
        SnapshotCommand::Restore {
            cluster,
            bundle,
            wait_timeout,
            encrypt_key_file,
        } => {
            let key = key(encrypt_key_file.as_deref())?;
            let ctx = cluster.context(vec![], wait_timeout)?;
            let info = runtime()?.block_on(snapshot::restore(&ctx, &bundle, key.as_ref()))?;
            println!(
                "restored {} (revision {}, {} objects) and verified",
                bundle.display(),
                info.revision,
                info.registry_objects
            );
            Ok(0)
        }
        SnapshotCommand::Schedule {
            cluster,
            every,
            keep,
            dir,
            encrypt_key_file,
            remove,
            status,
        } => {
            let ctx = cluster.context(vec![], 0)?;
            let rt = runtime()?;
            if remove {
                rt.block_on(schedule::remove(&ctx))?;
                return Ok(0);
            }
            if status {
                let all = rt.block_on(schedule::status(&ctx))?;
                if cluster.output == "json" {
                    println!("{}", serde_json::to_string_pretty(&all)?);
                    return Ok(0);
                }
                println!(
                    "{:<10} {:<9} {:<8} {:<7} {:>4} {:>7}  {:<25} LAST RESULT",
                    "HOST", "INSTALLED", "MODE", "EVERY", "KEEP", "BUNDLES", "LAST RUN"
                );
                for s in all {
                    println!(
                        "{:<10} {:<9} {:<8} {:<7} {:>4} {:>7}  {:<25} {}",
                        s.host,
                        match (s.installed, s.running) {
                            (true, true) => "yes",
                            (true, false) => "stopped",
                            _ => "no",
                        },
                        s.mode,
                        s.every,
                        s.keep,
                        s.bundles,
                        s.last_run,
                        s.last_result
                    );
                }
                return Ok(0);
            }
            let every = every.expect("clap requires --every here");
            rt.block_on(schedule::install(
                &ctx,
                &schedule::Schedule {
                    every: &every,
                    keep,
                    dir: &dir,
                    key_file: encrypt_key_file.as_deref(),
                },
            ))?;
            Ok(0)
        }
    }
}
