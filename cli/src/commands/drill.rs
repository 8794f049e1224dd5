//! `kiln drill`: restore a bundle onto a scratch lab and prove it (see `crate::snapshot::drill`).

use std::path::PathBuf;
use std::time::Duration;

use super::cluster::{runtime, ClusterArgs};
use crate::snapshot::{self, drill, KeyMaterial, SaveOptions};

#[derive(Debug, clap::Args)]
pub struct DrillArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The bundle to drill (default: the newest in <stateDir>/snapshots/, or one taken now).
    #[arg(long)]
    pub bundle: Option<PathBuf>,
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
        Some(b) => b,
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
