//! `kiln upgrade plan|apply`: see [`crate::upgrade`].

use super::cluster::{runtime, ClusterArgs};
use crate::upgrade::{apply, gather, plan};

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
    /// Upgrade the cluster to the binaries this kiln would push (--bin-dir): a snapshot bundle first,
    /// then the controllers one at a time, then the workers --max-unavailable at a time (cordoned and
    /// drained), each host gated (store healthy, API server ready, every component on the target
    /// build, node Ready) and put back on its previous binaries when a gate fails. A re-run resumes.
    /// --dry-run prints every host's steps and changes nothing; --host takes only the named hosts.
    Apply {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Workers upgraded at the same time.
        #[arg(long, default_value_t = 1)]
        max_unavailable: usize,
        /// Seconds each wait (drain, gates) may take.
        #[arg(long, default_value_t = 300)]
        wait_timeout: u64,
        /// Drain also evicts pods that no controller manages (like kubectl drain --force).
        #[arg(long)]
        force: bool,
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
        UpgradeCommand::Apply {
            cluster,
            max_unavailable,
            wait_timeout,
            force,
        } => {
            if max_unavailable == 0 {
                anyhow::bail!("--max-unavailable must be at least 1");
            }
            let mut args = cluster;
            // The dry run here is the upgrade's own (its steps per host), not the bootstrapper's.
            let dry_run = std::mem::take(&mut args.dry_run);
            let ctx = args.context(vec![], wait_timeout)?;
            let opts = apply::ApplyOptions {
                max_unavailable,
                force,
                dry_run,
            };
            runtime()?.block_on(apply::apply(&ctx, &opts))
        }
    }
}
