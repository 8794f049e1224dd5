//! The phases of `init`, each a function over the context and (for host phases) one host. Each looks at
//! the current state first and skips what is already done.

pub(crate) mod cp_join;
pub(crate) mod dns;
pub(crate) mod join_token;
mod leave;
pub(crate) mod member_client;
mod pki;
pub(crate) mod preflight;
pub(crate) mod push;
pub(super) mod runtime;
pub(crate) mod store_start;
pub(crate) mod wait;

use super::{BootstrapError, Context, JOIN_TOKEN_TTL};

/// Every phase name a playbook may use.
pub const PHASES: &[&str] = &[
    "preflight",
    "certs",
    "kubeconfigs",
    "push",
    "control-plane",
    "proxy",
    "dns",
    "dns-service",
    "container-runtime",
    "kubelet-start",
    "wait-control-plane",
    "wait-node-ready",
    "wait-static-pods",
    "upload-config",
    "mark-control-plane",
    "bootstrap-token",
    "store-learner",
    "store-promote",
    "apiserver-lb",
    "leave-cluster",
    "stop-static-pods",
    "stop-kubelet",
    "remove-workloads",
    "cleanup-network",
    "remove-files",
    "verify-clean",
];

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

pub async fn run_phase(
    ctx: &Context,
    name: &str,
    host: Option<&str>,
) -> Result<Outcome, BootstrapError> {
    let need_host = |h: Option<&str>| {
        h.map(str::to_string).ok_or_else(|| {
            BootstrapError::phase(name, "local", "this phase runs on hosts, not locally")
        })
    };
    match name {
        "preflight" => preflight::preflight_hosts(ctx, &[Some(need_host(host)?)])
            .await
            .map(|()| Outcome::Done("checked".into())),
        "certs" => pki::certs(ctx),
        "kubeconfigs" => pki::kubeconfigs(ctx),
        "push" => push::push(ctx, &need_host(host)?).await,
        "control-plane" => push::control_plane(ctx, &need_host(host)?).await,
        "proxy" => push::proxy(ctx, &need_host(host)?).await,
        "dns" => dns::dns(ctx, &need_host(host)?).await,
        "dns-service" => dns::dns_service(ctx).await,
        "container-runtime" => runtime::container_runtime(ctx, &need_host(host)?).await,
        "kubelet-start" => push::kubelet_start(ctx, &need_host(host)?).await,
        "wait-control-plane" => wait::wait_control_plane(ctx).await,
        "wait-node-ready" => wait::wait_node_ready(ctx, &need_host(host)?).await,
        "wait-static-pods" => wait::wait_static_pods(ctx, &need_host(host)?).await,
        "upload-config" => wait::upload_config(ctx).await,
        "mark-control-plane" => wait::mark_control_plane(ctx, &need_host(host)?).await,
        "bootstrap-token" => join_token::bootstrap_token(ctx).await,
        "store-learner" => cp_join::store_learner(ctx, &need_host(host)?).await,
        "store-promote" => cp_join::store_promote(ctx, &need_host(host)?).await,
        "apiserver-lb" => cp_join::apiserver_lb(ctx).await,
        "leave-cluster" => leave::leave_cluster(ctx, &need_host(host)?).await,
        other => super::reset::run_phase(ctx, other, &need_host(host)?).await,
    }
}
