//! `kiln drill`: restore a bundle onto a scratch lab and prove it (see `crate::snapshot::drill`).

use std::path::PathBuf;
use std::time::Duration;

use super::cluster::{runtime, ClusterArgs};
use crate::backup_store::encrypt::KeyMaterial;
use crate::snapshot::{self, drill, SaveOptions};

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
    /// Seconds to wait for the scratch control plane.
    #[arg(long, default_value_t = 180)]
    pub wait_timeout: u64,
}

pub fn run(a: DrillArgs) -> anyhow::Result<i32> {
    let key = match &a.encrypt_key_file {
        Some(f) => Some(KeyMaterial::from_file(f)?),
        None => None,
    };
    let json = a.cluster.output == "json";
    let bundle = match a.bundle {
        Some(url) if url.starts_with("s3://") => {
            let ctx = a.cluster.context(vec![], 60)?;
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
            let ctx = a.cluster.context(vec![], 60)?;
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
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(if report.passed { 0 } else { 1 })
}
