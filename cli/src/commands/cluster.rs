//! `kiln init`, `kiln reset`, `kiln kubeconfig`: playbooks over the hosts of one cluster.yaml.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::bootstrap::{self, Context, Options, Playbook};
use crate::transport::{ConnectOptions, HostKeyPolicy};

#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// The cluster description.
    #[arg(
        long,
        short = 'f',
        env = "KILN_CLUSTER",
        default_value = "cluster.yaml"
    )]
    pub file: PathBuf,
    /// Trust and record host keys seen for the first time (like OpenSSH's StrictHostKeyChecking=accept-new).
    #[arg(long)]
    pub accept_new_host_keys: bool,
    /// Run on this machine instead of over SSH (for a single-host cluster on the host itself).
    #[arg(long)]
    pub local: bool,
    /// A playbook file to run instead of the embedded one.
    #[arg(long)]
    pub playbook: Option<PathBuf>,
    /// Where kiln's component binaries are (default: beside this kiln binary).
    #[arg(long, env = "KILN_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Print one JSON object per phase and host instead of text.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    pub output: String,
}

impl ClusterArgs {
    fn context(&self, ignore: Vec<String>, wait: u64) -> anyhow::Result<Context> {
        let cluster = crate::config::load(&self.file)?;
        let connect = ConnectOptions {
            local: self.local,
            host_key_policy: if self.accept_new_host_keys {
                HostKeyPolicy::AcceptNew
            } else {
                HostKeyPolicy::Strict
            },
            ..ConnectOptions::default()
        };
        Ok(Context::new(
            cluster,
            Options {
                connect,
                bin_dir: self.bin_dir.clone(),
                ignore_preflight_errors: ignore,
                wait_timeout: Duration::from_secs(wait),
                json: self.output == "json",
            },
        )?)
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub fn init(args: ClusterArgs, ignore: Vec<String>, wait: u64) -> anyhow::Result<i32> {
    let ctx = args.context(ignore, wait)?;
    let pb = Playbook::load("init", args.playbook.as_deref())?;
    runtime()?.block_on(bootstrap::run(&ctx, &pb))?;
    ctx.say(&format!(
        "\nThe control plane is up. Use it with:\n  kubectl --kubeconfig {} get nodes",
        ctx.admin_conf().display()
    ));
    Ok(0)
}

pub fn join(args: ClusterArgs, ignore: Vec<String>, wait: u64) -> anyhow::Result<i32> {
    let ctx = args.context(ignore, wait)?;
    let pb = Playbook::load("join", args.playbook.as_deref())?;
    runtime()?.block_on(bootstrap::run(&ctx, &pb))?;
    Ok(0)
}

pub fn reset(args: ClusterArgs) -> anyhow::Result<i32> {
    let ctx = args.context(vec![], 60)?;
    let pb = Playbook::load("reset", args.playbook.as_deref())?;
    runtime()?.block_on(bootstrap::run(&ctx, &pb))?;
    Ok(0)
}

pub fn kubeconfig(args: ClusterArgs) -> anyhow::Result<i32> {
    let ctx = args.context(vec![], 0)?;
    let path = ctx.admin_conf();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e} (run `kiln init -f {}` first)",
            path.display(),
            args.file.display()
        )
    })?;
    print!("{text}");
    Ok(0)
}
