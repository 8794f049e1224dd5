//! `kiln snapshot save|list|restore|schedule`

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::cluster::{runtime, ClusterArgs};
use crate::backup_store::encrypt::KeyMaterial;
use crate::backup_store::{s3, schedule};
use crate::snapshot::{self, offsite, run_log, SaveOptions};

/// Where an `s3://` destination is served and how to sign in; each flag defaults to cluster.yaml's
/// `spec.store.backup.destination.s3`. Credentials are read from the file (0600) or from
/// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never taken on the command line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct S3Args {
    /// Endpoint of an S3-compatible service (http(s)://host[:port]).
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    /// Region to sign for (default us-east-1).
    #[arg(long)]
    pub s3_region: Option<String>,
    /// AWS shared-credentials file (mode 0600).
    #[arg(long)]
    pub s3_credentials_file: Option<PathBuf>,
}

impl S3Args {
    pub(super) fn flags(&self) -> offsite::S3Flags {
        offsite::S3Flags {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            credentials_file: self.s3_credentials_file.clone(),
        }
    }
}

/// Bundles fetched from S3 for a restore or a drill: `<stateDir>/snapshots/from-s3/`.
pub(super) fn fetch_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("snapshots").join("from-s3")
}

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
        /// Also upload the bundle to s3://bucket/prefix (key <prefix>/<host>/<file>, verified by
        /// sha256); with --keep, keep that many of the host's bundles there too.
        #[arg(long, value_name = "URL")]
        s3: Option<String>,
        #[command(flatten)]
        s3_args: S3Args,
    },
    /// List bundles, newest first.
    List {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Directory to list (default: <stateDir>/snapshots/), or s3://bucket/prefix.
        #[arg(long)]
        dir: Option<String>,
        /// Key for encrypted bundles (without it they are listed by file time only).
        #[arg(long)]
        encrypt_key_file: Option<PathBuf>,
        #[command(flatten)]
        s3_args: S3Args,
    },
    /// Restore a bundle: stop the control plane everywhere, restore every store member, start, verify.
    /// Onto other or fresh hosts (a cluster.yaml whose controllers differ from the bundle's): seed the
    /// state from the bundle (same CA), re-issue serving certificates, init, restore, settle the nodes.
    Restore {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// A bundle file, or s3://bucket/key (fetched to <stateDir>/snapshots/from-s3/ first).
        bundle: String,
        /// Seconds to wait for the control plane after the restore.
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
        /// Key of an encrypted bundle.
        #[arg(long)]
        encrypt_key_file: Option<PathBuf>,
        #[command(flatten)]
        s3_args: S3Args,
    },
    /// What `etcdctl snapshot status` says of a bundle's snapshot: hash, revision, total keys, size.
    Status {
        /// A bundle file.
        bundle: PathBuf,
        /// Key of an encrypted bundle.
        #[arg(long)]
        encrypt_key_file: Option<PathBuf>,
        /// table or json (etcdctl's `-w json` fields).
        #[arg(long, short = 'o', default_value = "table")]
        output: String,
    },
    /// Scheduled bundles on every controller (systemd timer, or a loop script without systemd); what
    /// `kiln init` installs from spec.store.backup.
    Schedule {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Interval (6h, 30m, 45s, 1d) or a cron schedule as spec.store.backup.schedule takes it
        /// ("0 */6 * * *", @daily, "@every 6h").
        /// With --drill: when the drill entry runs, as cron reads it (5 fields or @hourly/@daily…;
        /// default "30 * * * *").
        #[arg(long, required_unless_present_any = ["remove", "status", "drill"])]
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
        /// Uninstall the schedule (bundles and the log stay); with --drill, the drill entry.
        #[arg(long, conflicts_with_all = ["status", "every"])]
        remove: bool,
        /// Routine drills instead: install this machine's cron entry for `kiln drill --scheduled`
        /// (/etc/cron.d/kiln-drill-<cluster>; spec.store.backup.drill says how often a drill is due).
        #[arg(long, conflicts_with_all = ["status", "s3"])]
        drill: bool,
        /// Where --drill writes its entry.
        #[arg(long, hide = true, default_value = crate::snapshot::drill_cron::CRON_DIR)]
        cron_dir: PathBuf,
        /// Per controller: installed?, interval, last run and result, bundle count.
        #[arg(long, conflicts_with = "every")]
        status: bool,
        /// Also upload every bundle to s3://bucket/prefix (the credentials go to the controllers as
        /// /etc/kiln/s3.credentials, 0600).
        #[arg(long, value_name = "URL")]
        s3: Option<String>,
        #[command(flatten)]
        s3_args: S3Args,
    },
    /// The next run of a cron schedule, in seconds since the epoch (for the scheduled loop).
    #[command(hide = true)]
    NextRun { schedule: String },
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
            s3,
            s3_args,
        } => {
            let key = key(encrypt_key_file.as_deref())?;
            // cluster.yaml completes the S3 flags; on a controller it is the copy `schedule` pushed.
            let s3 = match &s3 {
                Some(url) => {
                    let file = crate::config::load(&cluster.file).ok();
                    Some(offsite::destination(url, &s3_args.flags(), file.as_ref())?)
                }
                None => None,
            };
            let opts = SaveOptions {
                out: out.as_deref(),
                keep,
                key: key.as_ref(),
            };
            let rt = runtime()?;
            let mut result = match &on_host {
                Some(host) => rt.block_on(snapshot::save_on_host(&cluster.file, host, opts)),
                None => {
                    let ctx = cluster.context(vec![], 60)?;
                    rt.block_on(snapshot::save(&ctx, opts))
                }
            };
            let mut uploaded = None;
            if let (Some(dest), Ok(info)) = (&s3, &result) {
                match rt.block_on(offsite::upload_bundle(dest, info, keep)) {
                    Ok(url) => uploaded = Some(url),
                    Err(e) => result = Err(e),
                }
            }
            if let Some(log) = &log_file {
                let mut line = run_log::log_line(&result);
                if let Some(url) = &uploaded {
                    line = format!("{} uploaded={url}\n", line.trim_end());
                }
                if let Err(e) = run_log::append_log(log, &line) {
                    tracing::warn!(log = %log.display(), error = %e, "cannot append to the log");
                }
            }
            print_saved(&result?, cluster.output == "json")?;
            if let Some(url) = uploaded {
                if cluster.output != "json" {
                    println!("uploaded {url} (sha256 verified)");
                }
            }
            Ok(0)
        }
        SnapshotCommand::List {
            cluster,
            dir,
            encrypt_key_file,
            s3_args,
        } => {
            let ctx = cluster.context(vec![], 0)?;
            let key = key(encrypt_key_file.as_deref())?;
            if let Some(url) = dir.as_deref().filter(|d| d.starts_with("s3://")) {
                let dest = offsite::destination(url, &s3_args.flags(), Some(&ctx.cluster))?;
                let objects =
                    runtime()?.block_on(async { offsite::open(&dest)?.objects().await })?;
                return print_s3_list(&dest.bucket, objects, cluster.output == "json");
            }
            let dir = dir
                .map(PathBuf::from)
                .unwrap_or_else(|| snapshot::default_dir(&ctx));
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
            s3_args,
        } => {
            let key = key(encrypt_key_file.as_deref())?;
            let ctx = cluster.context(vec![], wait_timeout)?;
            let rt = runtime()?;
            let bundle = if bundle.starts_with("s3://") {
                let dest = offsite::destination(&bundle, &s3_args.flags(), Some(&ctx.cluster))?;
                let path =
                    rt.block_on(offsite::fetch(&bundle, &dest, &fetch_dir(&ctx.state_dir)))?;
                println!("fetched {bundle} to {}", path.display());
                path
            } else {
                PathBuf::from(bundle)
            };
            if ctx.cluster.config.spec.store.external.is_some() {
                // The members are the etcd operator's: the steps, not a restore (see external_restore).
                let steps = rt.block_on(snapshot::external_restore::steps(
                    &ctx,
                    &bundle,
                    key.as_ref(),
                ))?;
                print!("{steps}");
                return Ok(0);
            }
            let info = rt.block_on(snapshot::restore(&ctx, &bundle, key.as_ref()))?;
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
            drill,
            cron_dir,
            status,
            s3,
            s3_args,
        } => {
            let ctx = cluster.context(vec![], 0)?;
            if drill {
                return drill_entry(
                    &ctx,
                    &cron_dir,
                    every.as_deref(),
                    encrypt_key_file.as_deref(),
                    remove,
                );
            }
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
            let s3 = match &s3 {
                Some(url) => {
                    let dest = offsite::destination(url, &s3_args.flags(), Some(&ctx.cluster))?;
                    let creds = s3::Credentials::resolve(dest.credentials_file.as_deref())?;
                    Some((dest, creds))
                }
                None => None,
            };
            rt.block_on(schedule::install(
                &ctx,
                &schedule::Schedule {
                    every: &every,
                    keep,
                    dir: &dir,
                    key_file: encrypt_key_file.as_deref(),
                    s3: s3.as_ref().map(|(d, c)| (d, c)),
                },
            ))?;
            Ok(0)
        }
        SnapshotCommand::Status {
            bundle,
            encrypt_key_file,
            output,
        } => {
            let key = key(encrypt_key_file.as_deref())?;
            let opened = snapshot::Bundle::open(&bundle, key.as_ref())?;
            let st = snapshot::status::of_bundle(&opened)?;
            if output == "json" {
                println!("{}", serde_json::to_string(&st)?);
            } else {
                print!("{}", snapshot::status::table(&st));
            }
            Ok(0)
        }
        SnapshotCommand::NextRun { schedule: spec } => {
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            println!("{}", schedule::next_run(&spec, now)?);
            Ok(0)
        }
    }
}

/// `snapshot schedule --drill [--remove]`: this machine's cron entry for routine drills.
fn drill_entry(
    ctx: &crate::bootstrap::Context,
    cron_dir: &Path,
    every: Option<&str>,
    key_file: Option<&Path>,
    remove: bool,
) -> anyhow::Result<i32> {
    use crate::snapshot::drill_cron;
    let cluster = &ctx.cluster.config.metadata.name;
    if remove {
        match drill_cron::remove(cron_dir, cluster)? {
            Some(p) => println!("removed {}", p.display()),
            None => println!(
                "no drill entry for cluster {cluster} in {}",
                cron_dir.display()
            ),
        }
        return Ok(0);
    }
    let declared = ctx.cluster.config.backup().and_then(|b| b.drill.as_ref());
    if declared.is_none() {
        anyhow::bail!(
            "--drill: no spec.store.backup.drill in cluster.yaml (declare `drill: {{every: N}}` under \
             spec.store.backup: how many bundles between two drills)"
        );
    }
    let absolute = |p: &Path| -> anyhow::Result<PathBuf> {
        std::fs::canonicalize(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
    };
    let entry = drill_cron::DrillCron {
        cluster: cluster.clone(),
        at: drill_cron::cron_time(every)?,
        kiln: std::env::current_exe()?,
        file: absolute(&ctx.cluster.path)?,
        key_file: key_file.map(absolute).transpose()?,
        state_dir: std::path::absolute(&ctx.state_dir)?,
    };
    match drill_cron::install(cron_dir, &entry)? {
        drill_cron::Installed::Written(p) => println!("installed {}", p.display()),
        drill_cron::Installed::Unchanged(p) => println!("{} up to date", p.display()),
    }
    println!("{} root {}", entry.at, entry.command());
    Ok(0)
}

/// `snapshot list --dir s3://…`: the bundles under the prefix, newest first.
fn print_s3_list(bucket: &str, mut objects: Vec<s3::Object>, json: bool) -> anyhow::Result<i32> {
    objects.retain(|o| o.key.ends_with(".kiln-bundle.tar"));
    objects.sort_by(|a, b| (b.modified, &b.key).cmp(&(a.modified, &a.key)));
    if json {
        let v: Vec<_> = objects
            .iter()
            .map(|o| serde_json::json!({"url": format!("s3://{bucket}/{}", o.key), "size": o.size, "modified": o.modified}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("{:<21} {:>12} URL", "UPLOADED", "BYTES");
    for o in objects {
        let at = time::OffsetDateTime::from_unix_timestamp(o.modified)
            .ok()
            .and_then(|t| {
                t.format(time::macros::format_description!(
                    "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
                ))
                .ok()
            })
            .unwrap_or_default();
        println!("{at:<21} {:>12} s3://{bucket}/{}", o.size, o.key);
    }
    Ok(0)
}
