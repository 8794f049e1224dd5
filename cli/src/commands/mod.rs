//! The command line, defined once as data (clap derive), and the dispatch from parsed arguments to the
//! library. `main.rs` only calls [`main`].

mod apply;
mod cluster;
mod dns_probe;
mod drill;
mod encryption;
mod join_control_plane;
mod lab;
mod snapshot;
mod status;
mod status_drills;
mod token;
mod upgrade;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kiln",
    version = kiln_common::version::LONG,
    about = "A declarative cluster bootstrapper for kiln's own Kubernetes components"
)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `debug` or `kiln=trace`.
    #[arg(
        long,
        global = true,
        env = "KILN_LOG",
        default_value = "info,kube_client=off"
    )]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A local cluster of real hosts (namespaces, sshd, containerd) on this machine.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Bring up the first control plane: preflight, PKI, push, static pods, kubelet, wait until Ready.
    Init {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
        /// Checks to report as warnings instead of errors (names as printed, or `all`).
        #[arg(long, value_delimiter = ',')]
        ignore_preflight_errors: Vec<String>,
        /// Seconds to wait for the control plane and the node.
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
    },
    /// Join the worker hosts of cluster.yaml to the running control plane (skips hosts already joined);
    /// with --control-plane, the controllers not yet part of it.
    Join {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
        /// Join the controllers of cluster.yaml that are not yet part of the running control plane
        /// (store member as a learner, promoted once caught up; API server, scheduler,
        /// controller-manager; every node's API balancer updated), one at a time.
        #[arg(long)]
        control_plane: bool,
        #[arg(long, value_delimiter = ',')]
        ignore_preflight_errors: Vec<String>,
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
    },
    /// Run the preflight checks on every host of cluster.yaml (changes nothing unless --fix).
    Preflight {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
        #[arg(long, value_delimiter = ',')]
        ignore_preflight_errors: Vec<String>,
        /// First remedy what is safe (swap off + fstab, br_netfilter/overlay + modules-load.d, sysctls +
        /// sysctl.d, ports in firewalld/ufw), print each change, then check again.
        #[arg(long)]
        fix: bool,
    },
    /// The cluster at a glance: nodes, control-plane pods, store members.
    Status {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
    },
    /// Bootstrap tokens: create, list, delete.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Store snapshots: save, list, restore.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Disaster-recovery drill: restore a bundle onto a scratch lab, verify it, report RPO/RTO, tear down.
    Drill(drill::DrillArgs),
    /// Certificates of the cluster.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Encryption of Secrets at rest: rotate the key (re-encrypting every Secret), status.
    #[command(subcommand)]
    Encryption(encryption::EncryptionCommand),
    /// Undo everything kiln did on every host of the cluster, and verify nothing is left.
    Reset {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
    },
    /// Make the cluster match the file: init when there is none; roll changed settings and binaries
    /// out host by host (controllers one at a time, gated as an upgrade is); join hosts added to the
    /// file; remove hosts deleted from it (drained, Node deleted, store member removed, reset).
    /// Refuses, naming the field, what a running cluster cannot change. --dry-run prints the actions.
    Apply {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
        #[arg(long, value_delimiter = ',')]
        ignore_preflight_errors: Vec<String>,
        /// Seconds each wait (init, joins, drains, gates) may take.
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
        /// Drains also evict pods that no controller manages (like kubectl drain --force).
        #[arg(long)]
        force: bool,
    },
    /// Upgrades: `plan` shows what an upgrade to the binaries this kiln would push does, `apply` does it.
    #[command(subcommand)]
    Upgrade(upgrade::UpgradeCommand),
    /// Print the cluster's admin kubeconfig.
    Kubeconfig {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// When each certificate in the cluster's state directory expires.
    CheckExpiration {
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
    },
    /// Re-sign certificates with the same CA (same subject and SANs, new validity), push them to the
    /// hosts that use them and restart the static pods that read them. `all`, or names as
    /// check-expiration prints them (apiserver, store-peer, admin.conf, …).
    Renew {
        /// `all`, or certificate names.
        #[arg(required = true)]
        names: Vec<String>,
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
        /// Seconds to wait for each restarted static pod to be Ready again.
        #[arg(long, default_value_t = 180)]
        wait_timeout: u64,
    },
}

/// Parse, run, and turn the outcome into a process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    init_tracing(&cli.log);
    let result = match cli.command {
        Command::Lab(c) => lab::run(c),
        Command::Init {
            cluster,
            ignore_preflight_errors,
            wait_timeout,
        } => cluster::init(cluster, ignore_preflight_errors, wait_timeout),
        Command::Join {
            cluster,
            control_plane,
            ignore_preflight_errors,
            wait_timeout,
        } => cluster::join(
            cluster,
            ignore_preflight_errors,
            wait_timeout,
            control_plane,
        ),
        Command::Reset { cluster } => cluster::reset(cluster),
        Command::Preflight {
            cluster,
            ignore_preflight_errors,
            fix,
        } => cluster::preflight(cluster, ignore_preflight_errors, fix),
        Command::Snapshot(c) => snapshot::run(c),
        Command::Drill(a) => drill::run(a),
        Command::Token(c) => token::run(c),
        Command::Status { cluster } => status::run(cluster),
        Command::Certs(CertsCommand::CheckExpiration { cluster }) => {
            cluster::check_expiration(cluster)
        }
        Command::Certs(CertsCommand::Renew {
            names,
            cluster,
            wait_timeout,
        }) => cluster::renew_certs(cluster, names, wait_timeout),
        Command::Kubeconfig { cluster } => cluster::kubeconfig(cluster),
        Command::Encryption(c) => encryption::run(c),
        Command::Upgrade(c) => upgrade::run(c),
        Command::Apply {
            cluster,
            ignore_preflight_errors,
            wait_timeout,
            force,
        } => apply::run(cluster, ignore_preflight_errors, wait_timeout, force),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
