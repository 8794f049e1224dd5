//! `kiln upgrade plan`: see [`crate::upgrade`].

use super::cluster::{runtime, ClusterArgs};
use crate::upgrade::{gather, plan};

#[derive(Debug, clap::Subcommand)]
pub enum UpgradeCommand {
    /// What runs on each host, the binaries this kiln would push (--bin-dir), the order an upgrade
    /// takes and what restarts; refused, with the reason, when the version skew policy forbids it.
    /// Changes nothing.
    Plan {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Workers upgraded at the same time.
        #[arg(long, default_value_t = 1)]
        max_unavailable: usize,
    },
}

pub fn run(c: UpgradeCommand) -> anyhow::Result<i32> {
    match c {
        UpgradeCommand::Plan {
            cluster,
            max_unavailable,
        } => {
            if max_unavailable == 0 {
                anyhow::bail!("--max-unavailable must be at least 1");
            }
            let ctx = cluster.context(vec![], 0)?;
            let targets = gather::targets(&ctx)?;
            let hosts = runtime()?.block_on(gather::hosts(&ctx))?;
            let p = plan::plan(&hosts, &targets, max_unavailable);
            let target = &targets["kiln-apiserver"].stamp;
            println!(
                "target: kiln {target} (Kubernetes v{}) from {}",
                target.kube_or_default(),
                ctx.bin_dir.display()
            );
            print!("{}", plan::render(&p));
            Ok(if p.refused.is_some() { 1 } else { 0 })
        }
    }
}
