//! kiln-kubelet: the node agent. Runs static pods from a manifest directory through a [`runtime::Runtime`]
//! (`kiln-host` now, CRI next), registers the Node, keeps its Lease and reports mirror pods.
//!
//! Static pods start without an API server (the control plane is made of them); the [`agent`] keeps retrying
//! until the API server answers.

pub mod agent;
pub mod cni;
pub mod config;
pub mod lease;
pub mod logs;
pub mod manifest;
pub mod mirror;
pub mod node;
pub mod runtime;
pub mod static_pods;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use agent::AgentState;
pub use config::{Flags, KubeletConfig};
use runtime::{HostRuntime, Runtime};
use static_pods::StaticPods;

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("creating {path}: {source}")]
    Dir {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A running kubelet. Dropping it without `shutdown` still kills the pods' processes (runtime drop).
pub struct KubeletHandle {
    pub runtime: Arc<HostRuntime>,
    pub static_pods: Arc<StaticPods>,
    pub agent_state: watch::Receiver<AgentState>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl KubeletHandle {
    /// Stops the agent and every static pod (SIGTERM, grace, SIGKILL), then returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// Resolves when the kubelet's tasks end (they end only on shutdown).
    pub async fn wait(&mut self) {
        for t in self.tasks.iter_mut() {
            let _ = t.await;
        }
    }
}

/// Starts the kubelet: the static pod loop right away, the node agent beside it.
pub async fn run(cfg: KubeletConfig) -> Result<KubeletHandle, KubeletError> {
    for dir in [&cfg.root_dir, &cfg.pod_log_dir] {
        std::fs::create_dir_all(dir).map_err(|source| KubeletError::Dir {
            path: dir.display().to_string(),
            source,
        })?;
    }
    tracing::info!(node = %cfg.node_name, ip = %cfg.node_ip, manifests = %cfg.pod_manifest_path.display(), "starting kiln-kubelet");
    let runtime = Arc::new(HostRuntime::new(
        &cfg.pod_log_dir,
        cfg.backoff_base,
        cfg.backoff_max,
        &cfg.node_name,
        cfg.node_ip,
    ));
    let dyn_runtime: Arc<dyn Runtime> = runtime.clone();
    let static_pods = Arc::new(StaticPods::new(
        &cfg.pod_manifest_path,
        &cfg.node_name,
        dyn_runtime.clone(),
    ));
    let (shutdown, shutdown_rx) = watch::channel(false);
    let pods_task = tokio::spawn(
        static_pods
            .clone()
            .run(cfg.file_check_frequency, shutdown_rx.clone()),
    );
    let (agent, agent_state) = agent::NodeAgent::new(cfg, dyn_runtime, static_pods.clone());
    let agent_task = tokio::spawn(agent.run(shutdown_rx));
    Ok(KubeletHandle {
        runtime,
        static_pods,
        agent_state,
        shutdown,
        tasks: vec![pods_task, agent_task],
    })
}
