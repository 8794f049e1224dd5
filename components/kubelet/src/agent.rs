//! The node agent: everything that talks to the API server. It starts with the kubelet but the API server
//! may be one of the static pods it is starting, so every step retries with bounded backoff and a failure is
//! logged once per change, not once per attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api_client::ClientSwitch;
use crate::config::KubeletConfig;
use crate::lease;
use crate::mirror::MirrorSync;
use crate::node::{self, HostInfo};
use crate::runtime::Runtime;
use crate::static_pods::StaticPods;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error(transparent)]
    Node(#[from] node::NodeError),
    #[error(transparent)]
    Lease(#[from] lease::LeaseError),
    #[error(transparent)]
    Mirror(#[from] crate::mirror::MirrorError),
    #[error("TLS bootstrap: {0}")]
    Bootstrap(#[from] crate::tls_bootstrap::BootstrapError),
}

impl AgentError {
    fn stage(&self) -> &'static str {
        match self {
            AgentError::Kubeconfig { .. } => "kubeconfig",
            AgentError::Node(node::NodeError::Register { .. }) => "register",
            AgentError::Node(node::NodeError::Status { .. }) => "node-status",
            AgentError::Lease(_) => "lease",
            AgentError::Mirror(_) => "mirror-pods",
            AgentError::Bootstrap(_) => "tls-bootstrap",
        }
    }
}

/// What the agent has achieved so far, for tests and health endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentState {
    pub node_uid: Option<String>,
    pub lease_renewals: u64,
    pub status_updates: u64,
    pub mirror_syncs: u64,
    pub last_error: Option<String>,
}

/// Logs a stage's failure when it differs from the previous one, and its recovery once.
#[derive(Default)]
struct FailureLog {
    last: HashMap<&'static str, String>,
}

impl FailureLog {
    fn failed(&mut self, e: &AgentError) {
        let msg = e.to_string();
        if self.last.get(e.stage()) != Some(&msg) {
            tracing::warn!(stage = e.stage(), error = %msg, "API server call failed; retrying");
            self.last.insert(e.stage(), msg);
        } else {
            tracing::debug!(stage = e.stage(), error = %msg, "still failing");
        }
    }

    fn ok(&mut self, stage: &'static str) {
        if self.last.remove(stage).is_some() {
            tracing::info!(stage, "API server call succeeded again");
        }
    }
}

/// The kubelet's identity for [`crate::tls_bootstrap`].
pub fn credentials(cfg: &KubeletConfig) -> crate::tls_bootstrap::Credentials {
    crate::tls_bootstrap::Credentials {
        kubeconfig: cfg.kubeconfig.clone(),
        bootstrap_kubeconfig: cfg.bootstrap_kubeconfig.clone(),
        node_name: cfg.node_name.clone(),
        sign_timeout: Duration::from_secs(120),
    }
}

/// One TLS bootstrap at a time: the agent and the workload loop both load the client at start.
static BOOTSTRAP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A client with the node's credentials, bootstrapping them first when needed.
pub async fn load_client(cfg: &KubeletConfig) -> Result<Client, AgentError> {
    {
        let _one = BOOTSTRAP.lock().await;
        crate::tls_bootstrap::ensure(&credentials(cfg)).await?;
    }
    let err = |message: String| AgentError::Kubeconfig {
        path: cfg.kubeconfig.display().to_string(),
        message,
    };
    let kc = Kubeconfig::read_from(&cfg.kubeconfig).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    Client::try_from(config).map_err(|e| err(e.to_string()))
}

pub struct NodeAgent {
    cfg: KubeletConfig,
    runtime: Arc<dyn Runtime>,
    static_pods: Arc<StaticPods>,
    host: HostInfo,
    state: watch::Sender<AgentState>,
    /// Where each client the agent loads (at start, after every rotation) is published.
    clients: Option<Arc<ClientSwitch>>,
    /// The eviction manager's pressure conditions; None: always False.
    pressure: Option<watch::Receiver<crate::eviction::Pressure>>,
    /// The CRI runtime's supplementalGroupsPolicy feature, once read (None inside: not reported).
    features: Option<watch::Receiver<Option<bool>>>,
    /// The workload pods' runtime (CRI), whose version the node reports as upstream's kubelet does;
    /// None: the static pods' runtime is the node's only one.
    container_runtime: Option<Arc<dyn Runtime>>,
}

const TICK: Duration = Duration::from_secs(1);
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// How often the client certificate's age is checked for rotation.
const ROTATION_CHECK: Duration = Duration::from_secs(60);

impl NodeAgent {
    pub fn new(
        cfg: KubeletConfig,
        runtime: Arc<dyn Runtime>,
        static_pods: Arc<StaticPods>,
    ) -> (Self, watch::Receiver<AgentState>) {
        let (state, rx) = watch::channel(AgentState::default());
        (
            NodeAgent {
                cfg,
                runtime,
                static_pods,
                host: HostInfo::gather(),
                state,
                clients: None,
                pressure: None,
                features: None,
                container_runtime: None,
            },
            rx,
        )
    }

    /// Publishes every client the agent loads to `clients`, so their holders follow certificate rotation.
    pub fn with_clients(mut self, clients: Arc<ClientSwitch>) -> Self {
        self.clients = Some(clients);
        self
    }

    /// Reports the eviction manager's pressure conditions; a change is posted at once.
    pub fn with_pressure(mut self, pressure: watch::Receiver<crate::eviction::Pressure>) -> Self {
        self.pressure = Some(pressure);
        self
    }

    /// Reports the workload pods' runtime in `nodeInfo.containerRuntimeVersion`
    /// (`containerd://1.6.20~ds1`) instead of the static pods' `kiln-host://…`.
    pub fn with_container_runtime(mut self, runtime: Arc<dyn Runtime>) -> Self {
        self.container_runtime = Some(runtime);
        self
    }

    /// Reports the CRI runtime's features in `status.features` once they are read.
    pub fn with_runtime_features(mut self, features: watch::Receiver<Option<bool>>) -> Self {
        self.features = Some(features);
        self
    }

    fn pressure(&self) -> crate::eviction::Pressure {
        self.pressure
            .as_ref()
            .map(|r| *r.borrow())
            .unwrap_or_default()
    }

    async fn status(&self) -> k8s_openapi::api::core::v1::NodeStatus {
        let err = self.runtime.ready().await.err().map(|e| e.to_string());
        let version = self
            .container_runtime
            .as_ref()
            .unwrap_or(&self.runtime)
            .version();
        let mut status = node::node_status(&self.cfg, &self.host, &version, err.as_deref());
        node::set_pressure(&mut status, self.pressure());
        node::set_features(
            &mut status,
            self.features.as_ref().and_then(|r| *r.borrow()),
        );
        status
    }

    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        /// How long the Node must stay missing before the kubelet registers it again (see the
        /// status update below).
        const NODE_GONE_REREGISTER: Duration = Duration::from_secs(60);
        let mut client: Option<Client> = None;
        let mut node_uid: Option<String> = None;
        let mut node_missing_since: Option<Instant> = None;
        let mut mirrors = MirrorSync::default();
        let mut log = FailureLog::default();
        let now = Instant::now();
        let (mut next_lease, mut next_status, mut next_full) = (now, now, now);
        let mut next_rotation_check = now + ROTATION_CHECK;
        let mut retry = FIRST_RETRY;
        let mut reported_pressure = crate::eviction::Pressure::default();
        loop {
            let step = async {
                let c = match &client {
                    Some(c) => c.clone(),
                    None => {
                        let c = load_client(&self.cfg).await?;
                        if let Some(clients) = &self.clients {
                            clients.set(c.clone());
                        }
                        client = Some(c.clone());
                        c
                    }
                };
                log.ok("kubeconfig");
                if self.cfg.rotate_certificates && Instant::now() >= next_rotation_check {
                    next_rotation_check = Instant::now() + ROTATION_CHECK;
                    let _one = BOOTSTRAP.lock().await;
                    if crate::tls_bootstrap::rotate_if_due(&credentials(&self.cfg)).await? {
                        // The next step connects with the new certificate.
                        client = None;
                        return Ok(());
                    }
                }
                let uid = match &node_uid {
                    Some(u) => u.clone(),
                    None => {
                        let n = node::register(&c, &self.cfg, self.status().await).await?;
                        let uid = n.metadata.uid.unwrap_or_default();
                        node_uid = Some(uid.clone());
                        self.state.send_modify(|s| s.node_uid = Some(uid.clone()));
                        next_status = Instant::now();
                        uid
                    }
                };
                log.ok("register");
                if Instant::now() >= next_lease {
                    lease::renew(
                        &c,
                        &self.cfg.node_name,
                        &uid,
                        self.cfg.lease_duration_seconds,
                    )
                    .await?;
                    next_lease = Instant::now() + self.cfg.lease_renew_interval;
                    self.state.send_modify(|s| s.lease_renewals += 1);
                    log.ok("lease");
                }
                let pressure = self.pressure();
                if pressure != reported_pressure {
                    next_status = Instant::now();
                }
                if Instant::now() >= next_status {
                    match node::update_status(&c, &self.cfg, self.status().await).await {
                        Err(node::NodeError::Status {
                            source: kube::Error::Api(e),
                            ..
                        }) if e.code == 404 => {
                            // A Node deleted under a running kubelet is not created again at once:
                            // reset's leave-cluster deletes it a few seconds before it stops the
                            // kubelet, and an immediate re-registration brought the removed host
                            // back, NotReady. Upstream's kubelet never registers again; kiln does
                            // after NODE_GONE_REREGISTER, because a store restored onto new hosts
                            // lacks the Nodes their kubelets registered before the restore.
                            let since = *node_missing_since.get_or_insert_with(Instant::now);
                            tracing::warn!(node = %self.cfg.node_name, "Error updating node status, will retry: error getting node {:?}: {}", self.cfg.node_name, e.message);
                            if since.elapsed() >= NODE_GONE_REREGISTER {
                                node_uid = None;
                                node_missing_since = None;
                            }
                        }
                        r => {
                            r?;
                            node_missing_since = None;
                        }
                    };
                    next_status = Instant::now() + self.cfg.node_status_update_frequency;
                    reported_pressure = pressure;
                    self.state.send_modify(|s| s.status_updates += 1);
                    log.ok("node-status");
                }
                let full = Instant::now() >= next_full;
                let pods = self.static_pods.pods();
                let ip = self.cfg.node_ip.to_string();
                mirrors
                    .sync(&c, &self.cfg.node_name, &uid, &ip, &pods, full)
                    .await?;
                if full {
                    next_full = Instant::now() + self.cfg.node_status_update_frequency;
                }
                self.state.send_modify(|s| s.mirror_syncs += 1);
                log.ok("mirror-pods");
                Ok::<(), AgentError>(())
            };
            // A request hanging on an unresponsive server must not delay shutdown.
            let step: Result<(), AgentError> = tokio::select! {
                r = step => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let wait = match step {
                Ok(()) => {
                    retry = FIRST_RETRY;
                    self.state.send_modify(|s| s.last_error = None);
                    TICK
                }
                Err(e) => {
                    log.failed(&e);
                    self.state
                        .send_modify(|s| s.last_error = Some(e.to_string()));
                    let w = retry;
                    retry = (retry * 2).min(self.cfg.api_retry_max);
                    w
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}
