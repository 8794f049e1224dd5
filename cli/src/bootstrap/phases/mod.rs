//! The phases of `init`, each a function over the context and (for host phases) one host. Each looks at
//! the current state first and skips what is already done.

pub(crate) mod apiserver_config;
mod backup;
pub(crate) mod binary_hash;
pub(crate) mod cp_join;
pub(crate) mod dns;
pub(crate) mod external_etcd;
pub(crate) mod join_token;
pub(crate) mod kubelet_config;
mod leave;
pub(crate) mod member_client;
mod pki;
pub(crate) mod preflight;
pub(crate) mod push;
mod registry_mirrors;
pub(super) mod runtime;
pub(crate) mod storage;
pub(crate) mod store_start;
pub(crate) mod table;
pub(crate) mod wait;

use super::{BootstrapError, Context, JOIN_TOKEN_TTL};

/// Component binaries pushed to controllers, and to every other node.
pub const CONTROL_PLANE_BINARIES: &[&str] = &[
    "kiln-store",
    "kiln-apiserver",
    "kiln-scheduler",
    "kiln-controller-manager",
    "kiln-kubelet",
    "kiln-proxy",
    "kiln-dns",
];
/// The control plane's static pods, in the order they are written.
pub const CONTROL_PLANE_MANIFESTS: &[&str] = &[
    "kiln-store.yaml",
    "kiln-apiserver.yaml",
    "kiln-scheduler.yaml",
    "kiln-controller-manager.yaml",
];
pub const NODE_BINARIES: &[&str] = &["kiln-kubelet", "kiln-proxy", "kiln-dns"];
/// The node components' shared identities, made in the state directory and installed on every host
/// (`/etc/kiln/<file>`), pointed at the node API server (the balancer when highly available).
pub const NODE_KUBECONFIGS: &[kiln_pki::KubeconfigKind] = &[
    kiln_pki::KubeconfigKind::Proxy,
    kiln_pki::KubeconfigKind::Dns,
];
pub const REMOTE_BIN: &str = "/usr/local/bin";
pub const KILN_ETC: &str = "/etc/kiln";
pub const MANIFESTS: &str = "/etc/kiln/manifests";
/// Where a joining kubelet finds its bootstrap token and the cluster CA (TLS bootstrap).
pub const BOOTSTRAP_KUBECONFIG: &str = "/etc/kiln/bootstrap-kubelet.conf";
pub const SUPERVISOR: &str = "/etc/kiln/kubelet-supervisor.sh";
pub const BOOT_SCRIPT: &str = "/etc/kiln/boot.sh";
pub const SUPERVISOR_PID: &str = "/run/kiln/kubelet-supervisor.pid";
pub const UNIT: &str = "/etc/systemd/system/kiln-kubelet.service";

#[derive(Debug, Clone)]
pub enum Outcome {
    Done(String),
    Skipped(String),
}

impl Outcome {
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Done(_) => "done",
            Outcome::Skipped(_) => "skipped",
        }
    }
    pub fn detail(&self) -> &str {
        match self {
            Outcome::Done(s) | Outcome::Skipped(s) => s,
        }
    }
}

/// Run `phase` on one host (`None`: the operator's machine). A host phase given no host is refused here,
/// in one place, with the text every host phase used to give.
pub async fn run_phase(
    ctx: &Context,
    phase: &table::Phase,
    host: Option<&str>,
) -> Result<Outcome, BootstrapError> {
    let need_host = || {
        host.ok_or_else(|| {
            BootstrapError::phase(phase.name, "local", "this phase runs on hosts, not locally")
        })
    };
    match phase.run {
        table::Run::Local(run) => run(ctx).await,
        table::Run::Host(run) => run(ctx, need_host()?).await,
        table::Run::AllHosts(run) => run(ctx, &[Some(need_host()?.to_string())])
            .await
            .map(|()| Outcome::Done("checked".into())),
    }
}
