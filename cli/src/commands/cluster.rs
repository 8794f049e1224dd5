//! `kiln init`, `kiln reset`, `kiln kubeconfig`, `kiln certs`: playbooks and certificates over the hosts of one
//! cluster.yaml.

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
    /// Print the plan (every phase and the hosts it runs on) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Phases to leave out, by name (comma-separated), like kubeadm's --skip-phases.
    #[arg(long, value_delimiter = ',')]
    pub skip_phases: Vec<String>,
    /// Only these hosts (by name in the cluster file; repeat or comma-separate), for join and reset.
    #[arg(long = "host", value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Print one JSON object per phase and host instead of text.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    pub output: String,
}

impl ClusterArgs {
    pub(super) fn context(&self, ignore: Vec<String>, wait: u64) -> anyhow::Result<Context> {
        let cluster = crate::config::load(&self.file)?;
        for h in &self.hosts {
            if cluster.config.host(h).is_none() {
                let known: Vec<&str> = cluster
                    .config
                    .spec
                    .hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect();
                anyhow::bail!(
                    "--host {h}: no host of that name in {} (hosts: {})",
                    self.file.display(),
                    known.join(", ")
                );
            }
        }
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
                only_hosts: self.hosts.clone(),
                preflight_fix: false,
                dry_run: self.dry_run,
                joining_controllers: vec![],
            },
        )?)
    }
}

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Run the named playbook, or only print its plan with --dry-run.
pub(super) fn play(args: &ClusterArgs, ctx: &Context, name: &str) -> anyhow::Result<bool> {
    let pb = Playbook::load(name, args.playbook.as_deref())?.without(&args.skip_phases)?;
    if args.dry_run {
        let plan = bootstrap::plan(ctx, &pb)?;
        if args.output == "json" {
            let v: Vec<_> = plan
                .iter()
                .map(|(p, h)| serde_json::json!({"phase": p, "hosts": h}))
                .collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!("{} plan for {}:", pb.name, args.file.display());
            for (i, (phase, hosts)) in plan.iter().enumerate() {
                let on = if hosts.is_empty() {
                    "(no hosts)".to_string()
                } else {
                    hosts.join(", ")
                };
                println!("  {:>2}. {phase:<20} {on}", i + 1);
            }
        }
        // Then every phase against the hosts, read-only: what would change where.
        runtime()?.block_on(bootstrap::run(ctx, &pb))?;
        if let Some(plan) = &ctx.plan {
            if args.output == "json" {
                println!("{}", serde_json::json!({"changes": plan.to_json()}));
            } else {
                let text = plan.render();
                println!(
                    "\nchanges (nothing was changed):\n{}",
                    if text.is_empty() {
                        "  none\n".into()
                    } else {
                        text
                    }
                );
            }
        }
        return Ok(false);
    }
    runtime()?.block_on(bootstrap::run(ctx, &pb))?;
    Ok(true)
}

pub fn init(args: ClusterArgs, ignore: Vec<String>, wait: u64) -> anyhow::Result<i32> {
    if !args.hosts.is_empty() {
        anyhow::bail!("--host selects hosts for `kiln join` and `kiln reset`; `kiln init` runs on every host of the file");
    }
    let ctx = args.context(ignore, wait)?;
    let late = bootstrap::phases::store_start::unrecorded_controllers(&ctx);
    if !late.is_empty() {
        anyhow::bail!(
            "{} in {}: controller(s) added after the cluster started; `kiln init` would start them as a \
             new store cluster. Run `kiln join --control-plane -f {}`",
            late.join(", "),
            args.file.display(),
            args.file.display()
        );
    }
    if !play(&args, &ctx, "init")? {
        return Ok(0);
    }
    summary(&args, &ctx)?;
    Ok(0)
}

/// The end of a successful init: where the admin kubeconfig is and how to add hosts (kubeadm prints a
/// `kubeadm join` line; kiln's join needs only the file, it mints its token itself).
fn summary(args: &ClusterArgs, ctx: &Context) -> anyhow::Result<()> {
    let pin = crate::bootstrap::phases::join_token::ca_cert_hash(ctx)?;
    let file = args.file.display();
    let kubeconfig = ctx.admin_conf();
    if ctx.opts.json {
        println!(
            "{}",
            serde_json::json!({"result": "ok", "kubeconfig": kubeconfig, "caCertHash": pin,
                "join": format!("kiln join -f {file}")})
        );
    } else {
        println!(
            "\nThe control plane is up. Use it with:\n  kubectl --kubeconfig {} get nodes\n\n\
             Add hosts: list them in {file}, then run\n  kiln join -f {file}\n\
             (it mints a 1 h bootstrap token; joining kubelets verify the API server against the CA {pin})",
            kubeconfig.display()
        );
    }
    Ok(())
}

pub fn join(
    args: ClusterArgs,
    ignore: Vec<String>,
    wait: u64,
    control_plane: bool,
) -> anyhow::Result<i32> {
    if control_plane {
        return super::join_control_plane::run(args, ignore, wait);
    }
    let ctx = args.context(ignore, wait)?;
    if play(&args, &ctx, "join")? {
        super::join_control_plane::mention_unjoined(&args, &ctx);
    }
    Ok(0)
}

pub fn preflight(args: ClusterArgs, ignore: Vec<String>, fix: bool) -> anyhow::Result<i32> {
    let mut ctx = args.context(ignore, 0)?;
    ctx.opts.preflight_fix = fix;
    play(&args, &ctx, "preflight")?;
    Ok(0)
}

pub fn reset(args: ClusterArgs) -> anyhow::Result<i32> {
    let ctx = args.context(vec![], 60)?;
    let whole = ctx
        .cluster
        .config
        .controllers()
        .all(|c| args.hosts.is_empty() || args.hosts.contains(&c.name));
    if play(&args, &ctx, "reset")? && whole {
        // The store is gone: a later init starts every controller as a founder again.
        bootstrap::phases::store_start::forget_all(&ctx);
    }
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

/// `kiln certs check-expiration`: every certificate in the state directory (the tree per controller and
/// the kubeconfigs' client certificates), like kubeadm's table.
pub fn check_expiration(args: ClusterArgs) -> anyhow::Result<i32> {
    let ctx = args.context(vec![], 0)?;
    let now = time::OffsetDateTime::now_utc();
    let fmt =
        time::macros::format_description!("[month repr:short] [day], [year] [hour]:[minute] UTC");
    let rows = crate::certs::expiry::rows(&ctx)?;
    if rows.is_empty() {
        anyhow::bail!(
            "no certificates under {} (run `kiln init` first)",
            ctx.state_dir.join("pki").display()
        );
    }
    if args.output == "json" {
        let v: Vec<_> = rows
            .iter()
            .map(|r| serde_json::json!({"host": r.host, "certificate": r.name, "ca": r.info.is_ca, "expires": r.info.not_after.format(&fmt).unwrap_or_default(), "residualDays": r.info.remaining(now).whole_days()}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!(
        "{:<10} {:<30} {:<24} {:>14}",
        "HOST", "CERTIFICATE", "EXPIRES", "RESIDUAL TIME"
    );
    for r in rows {
        let days = r.info.remaining(now).whole_days();
        let residual = if days < 0 {
            "expired".to_string()
        } else {
            format!("{days}d")
        };
        println!(
            "{:<10} {:<30} {:<24} {residual:>14}",
            r.host,
            r.name,
            r.info.not_after.format(&fmt).unwrap_or_default()
        );
    }
    Ok(0)
}

/// `kiln certs renew all|NAME…`: see `crate::certs::renew`.
pub fn renew_certs(args: ClusterArgs, names: Vec<String>, wait: u64) -> anyhow::Result<i32> {
    if !args.hosts.is_empty() {
        anyhow::bail!("--host does not apply to `kiln certs renew`: certificates are renewed on every host that uses them");
    }
    let targets = crate::certs::resolve(&names)?;
    let ctx = args.context(vec![], wait)?;
    runtime()?.block_on(crate::certs::renew(&ctx, &targets))?;
    Ok(0)
}
