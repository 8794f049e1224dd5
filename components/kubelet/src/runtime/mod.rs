//! The container runtime as the kubelet sees it: start a pod (sandbox + containers), stop it, report its
//! containers. Two implementations: `kiln-host` (host processes, for the control plane's static pods) and
//! `cri` (containerd over CRI v1, for workload pods).

pub mod cri;
pub mod host;
mod supervisor;

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;

use crate::container_status::ContainerStatus;

pub use cri::CriRuntime;
pub use host::HostRuntime;
pub use supervisor::Backoff;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("pod {pod}: {message}")]
    InvalidSpec { pod: String, message: String },
    #[error("pod {0} is already running")]
    AlreadyRunning(String),
    #[error("pod {0} is not running")]
    NotFound(String),
    #[error("runtime {handler} is not ready: {message}")]
    NotReady {
        handler: &'static str,
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodStatus {
    pub uid: String,
    pub started_at: SystemTime,
    pub containers: Vec<ContainerStatus>,
    /// Init containers, in spec order (empty when the pod has none).
    pub init_containers: Vec<ContainerStatus>,
    /// Ephemeral containers (`kubectl debug`), in the order they were added.
    pub ephemeral_containers: Vec<ContainerStatus>,
    /// The sandbox's IP; None for hostNetwork pods (their IP is the node's).
    pub pod_ip: Option<String>,
    /// In-place resize: the resources containers run with, a resize not admitted or not applied.
    pub resize: crate::pod_resize::ResizeStatus,
}

/// Stop grace when the pod does not say (Kubernetes' default terminationGracePeriodSeconds).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

#[async_trait]
pub trait Runtime: Send + Sync {
    /// The runtime handler name (`runtimeClassName`), e.g. "kiln-host".
    fn handler(&self) -> &'static str;
    /// NodeInfo.containerRuntimeVersion, e.g. "kiln-host://0.1.0".
    fn version(&self) -> String;
    /// Ok when the runtime can run pods (feeds the node's Ready condition).
    async fn ready(&self) -> Result<(), RuntimeError>;
    /// Creates the pod's sandbox and starts its containers; they are then kept running per restartPolicy.
    async fn run_pod(&self, pod: &Pod) -> Result<(), RuntimeError>;
    /// Stops every container of the pod (SIGTERM, `grace` or the pod's own grace period, then SIGKILL)
    /// and removes the sandbox.
    async fn stop_pod(&self, uid: &str, grace: Option<Duration>) -> Result<(), RuntimeError>;
    /// The running pod's object changed in the API: the runtime gets the new one, so that what the pod
    /// is shown of its own metadata (its downwardAPI volumes' labels and annotations) follows, as
    /// upstream's pod workers get every update. Runtimes that show pods nothing of their object ignore it.
    fn update_pod(&self, _pod: &Pod) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn pod_status(&self, uid: &str) -> Option<PodStatus>;
    fn pod_uids(&self) -> Vec<String>;
    /// Once, before the first start, with this node's pods from the API's first full list: take over the
    /// pods an earlier run of the kubelet left running and clear the rest. Runtimes whose pods die with
    /// the kubelet have nothing to adopt.
    async fn adopt(&self, _wanted: &[Pod]) -> Result<(), RuntimeError> {
        Ok(())
    }
    /// Notified whenever a pod's status changes, so that the kubelet reports it at once instead of on
    /// its next periodic pass (the difference between "Running" now and up to a second later).
    fn status_changes(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }
    /// The status a stopped pod ended with (its containers' real exits, read before they were
    /// removed), handed over once for the pod's last report; None when the runtime kept none.
    fn take_final_status(&self, _uid: &str) -> Option<PodStatus> {
        None
    }
    /// The pod is gone from the API and its containers from the node: drop what the node still keeps
    /// of it — its log directory under the log root — as upstream's container GC does for deleted
    /// pods (evictPodLogsDirectories). A pod that still exists keeps its logs for `kubectl logs`.
    fn forget_pod(&self, _uid: &str) {}
}
