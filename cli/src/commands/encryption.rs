//! `kiln encryption rotate|status`: see [`crate::encryption`].

use super::cluster::{runtime, ClusterArgs};

#[derive(Debug, clap::Subcommand)]
pub enum EncryptionCommand {
    /// Rotate the key that encrypts Secrets at rest, as upstream documents it: a new key added as the
    /// second key (every API server restarted, one at a time, /readyz before the next), made the
    /// first (restarted again), every Secret not sealed with it replaced unchanged (so the API server
    /// writes it with the new key) and checked in the store, then the old keys removed (restarted
    /// again). The new key is of cluster.yaml's provider. Each step is recorded in the state
    /// directory: a re-run after an interruption resumes. --dry-run prints the steps left.
    Rotate {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Seconds each API server may take to be ready again.
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
    },
    /// Which key writes, how many Secrets each key sealed, a rotation under way, and whether every
    /// controller has the state directory's configuration.
    Status {
        #[command(flatten)]
        cluster: ClusterArgs,
    },
}

pub fn run(c: EncryptionCommand) -> anyhow::Result<i32> {
    match c {
        EncryptionCommand::Rotate {
            cluster,
            wait_timeout,
        } => {
            let mut args = cluster;
            // The dry run is the rotation's own (its steps), not the bootstrapper's.
            let dry_run = std::mem::take(&mut args.dry_run);
            let ctx = args.context(vec![], wait_timeout)?;
            runtime()?.block_on(crate::encryption::run::rotate(&ctx, dry_run))?;
            Ok(0)
        }
        EncryptionCommand::Status { cluster } => {
            let ctx = cluster.context(vec![], 30)?;
            print!(
                "{}",
                runtime()?.block_on(crate::encryption::run::status(&ctx))?
            );
            Ok(0)
        }
    }
}
