//! `kiln drill`: restore a bundle onto a scratch lab and prove it (see `crate::snapshot::drill`).

use std::path::PathBuf;
use std::time::Duration;

use super::cluster::{runtime, ClusterArgs};
use crate::backup_store::encrypt::KeyMaterial;
use crate::snapshot::{self, drill, drill_record, drill_source, SaveOptions};

#[derive(Debug, clap::Args)]
pub struct DrillArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The bundle to drill (default: the newest in <stateDir>/snapshots/, or one taken now), or
    /// s3://bucket/key (fetched to <stateDir>/snapshots/from-s3/ first).
    #[arg(long)]
    pub bundle: Option<String>,
    #[command(flatten)]
    pub s3_args: super::snapshot::S3Args,
    /// Key of an encrypted bundle.
    #[arg(long)]
    pub encrypt_key_file: Option<PathBuf>,
    /// Name of the scratch lab (default: drill-<cluster>).
    #[arg(long)]
    pub lab_name: Option<String>,
    /// Drill the newest bundle of the schedule's destination (spec.store.backup: its S3 bucket, else the
    /// first controller's backup directory), fetched to <stateDir>/snapshots/ first.
    #[arg(long, conflicts_with = "bundle")]
    pub latest: bool,
    /// As --latest, but only when spec.store.backup.drill.every bundles were taken since the last drill
    /// (else exit 0 saying so): for the operator machine's cron or timer.
    #[arg(long, conflicts_with_all = ["bundle", "latest"])]
    pub scheduled: bool,
    /// Seconds to wait for the scratch control plane.
    #[arg(long, default_value_t = 180)]
    pub wait_timeout: u64,
}

pub fn run(mut a: DrillArgs) -> anyhow::Result<i32> {
    let key = match &a.encrypt_key_file {
        Some(f) => Some(KeyMaterial::from_file(f)?),
        None => None,
    };
    let json = a.cluster.output == "json";
    // Every drill run against a cluster.yaml is recorded in its state dir, for `kiln status` and the
    // every-N decision of --scheduled.
    let ctx = a.cluster.context(vec![], 60)?;
    let record = drill_record::path(&ctx.state_dir);
    if a.latest || a.scheduled {
        match latest(&ctx, &record, a.scheduled)? {
            Some(b) => a.bundle = Some(b.display().to_string()),
            None => return Ok(0),
        }
    }
    let bundle = match a.bundle {
        Some(url) if url.starts_with("s3://") => {
            let dest = crate::snapshot::offsite::destination(
                &url,
                &a.s3_args.flags(),
                Some(&ctx.cluster),
            )?;
            // A runtime of its own, gone before the drill's: the drill enters the lab's network
            // namespace on this thread before it starts one.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(crate::snapshot::offsite::fetch(
                &url,
                &dest,
                &super::snapshot::fetch_dir(&ctx.state_dir),
            ))?
        }
        Some(b) => PathBuf::from(b),
        None => {
            let newest = snapshot::list(&snapshot::default_dir(&ctx), key.as_ref())?
                .into_iter()
                .find(|i| !(i.encrypted && i.snapshot_sha256.is_empty()))
                .and_then(|i| i.path);
            match newest {
                Some(p) => p,
                None => {
                    let info = runtime()?.block_on(snapshot::save(
                        &ctx,
                        SaveOptions {
                            key: key.as_ref(),
                            ..SaveOptions::default()
                        },
                    ))?;
                    info.path.expect("a saved bundle has a path")
                }
            }
        }
    };
    let report = drill::run(&drill::DrillOptions {
        bundle,
        key,
        lab_name: a.lab_name,
        wait_timeout: Duration::from_secs(a.wait_timeout),
        progress: !json,
    });
    let finished = time::OffsetDateTime::now_utc();
    if let Err(e) = drill_record::append(&record, drill_record::from_report(&report, finished)) {
        // The drill itself ran: its report still prints; only the record is missing.
        tracing::error!(error = %e, "cannot record the drill");
        eprintln!("drill: cannot record the result: {e}");
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(if report.passed { 0 } else { 1 })
}

/// The newest bundle of the schedule's destination, fetched; None when `scheduled` and not yet due (or
/// nothing to drill), which is said on stderr.
fn latest(
    ctx: &crate::bootstrap::Context,
    record: &std::path::Path,
    scheduled: bool,
) -> anyhow::Result<Option<PathBuf>> {
    // Entered on this thread before the runtime, which runs on it too (current-thread), and left before
    // the drill, which must start from the machine's own namespace.
    let _inside = match lab_netns(ctx) {
        Some(ns) => Some(
            drill::NetnsGuard::enter(&ns).map_err(|e| anyhow::anyhow!("{}: {e}", ns.display()))?,
        ),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // A runtime of its own, gone before the drill's (see the s3:// fetch above).
    rt.block_on(async {
        let listed = drill_source::list(ctx).await?;
        if scheduled {
            let every = ctx
                .cluster
                .config
                .backup()
                .and_then(|b| b.drill.as_ref())
                .map(|d| d.every)
                .ok_or_else(|| {
                    anyhow::anyhow!("--scheduled: no spec.store.backup.drill in cluster.yaml")
                })?;
            let log = drill_record::load(record)?;
            if let drill_record::Due::No { since, every } =
                drill_record::due(&listed.names, &log, every)
            {
                eprintln!(
                    "drill: not due: {since} of {every} bundle(s) in {} since the last drill",
                    listed.origin()
                );
                return Ok(None);
            }
        }
        let dir = super::snapshot::fetch_dir(&ctx.state_dir);
        let got = drill_source::fetch_newest(ctx, &listed, &dir).await?;
        match (&got, scheduled) {
            (None, true) => eprintln!("drill: no bundle in {}", listed.origin()),
            (None, false) => anyhow::bail!("--latest: no bundle in {}", listed.origin()),
            _ => {}
        }
        Ok(got)
    })
}

/// The network namespace of the `kiln lab` this cluster is, when its cluster.yaml is a lab's on this
/// machine: its hosts answer only inside it, while the drill's scratch lab is made from outside.
fn lab_netns(ctx: &crate::bootstrap::Context) -> Option<PathBuf> {
    let layout = crate::lab::LabLayout::new(&ctx.cluster.config.metadata.name).ok()?;
    let file = std::fs::canonicalize(&ctx.cluster.path).ok()?;
    let dir = std::fs::canonicalize(&layout.dir).ok()?;
    let ns = std::path::Path::new("/run/netns").join(&layout.netns);
    (file.starts_with(dir) && ns.exists()).then_some(ns)
}
