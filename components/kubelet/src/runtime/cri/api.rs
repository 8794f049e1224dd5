//! The CRI calls the kubelet makes, as a trait: [`super::grpc::GrpcCri`] speaks them to containerd over the
//! unix socket, and tests use a recording fake, so the pod sync logic is tested without root or containerd.

use std::collections::HashMap;

use async_trait::async_trait;
use k8s_cri::v1 as cri;

pub use super::security_context::ImageUser;
pub use crate::container_status::LinuxUser;

#[derive(Debug, Clone, thiserror::Error)]
pub enum CriError {
    #[error("CRI {op}: {code:?}: {message}")]
    Call {
        op: &'static str,
        code: tonic::Code,
        message: String,
    },
}

impl CriError {
    pub fn call(op: &'static str, status: tonic::Status) -> Self {
        CriError::Call {
            op,
            code: status.code(),
            message: status.message().to_string(),
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            CriError::Call {
                code: tonic::Code::NotFound,
                ..
            }
        )
    }
}

/// A sandbox as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    pub ready: bool,
    /// Only filled by `pod_sandbox_status` (the list call does not carry the network).
    pub ip: Option<String>,
    pub labels: HashMap<String, String>,
}

/// The CRI container states, named like the proto's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl CriState {
    pub fn from_i32(v: i32) -> Self {
        match cri::ContainerState::try_from(v) {
            Ok(cri::ContainerState::ContainerCreated) => CriState::Created,
            Ok(cri::ContainerState::ContainerRunning) => CriState::Running,
            Ok(cri::ContainerState::ContainerExited) => CriState::Exited,
            _ => CriState::Unknown,
        }
    }
}

/// One container's status (ContainerStatus); times are nanoseconds since the epoch, 0 = not yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriContainer {
    pub id: String,
    pub name: String,
    pub attempt: u32,
    pub state: CriState,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    /// "Completed", "Error", "OOMKilled", ... as containerd reports it.
    pub reason: String,
    pub message: String,
    pub image_ref: String,
    pub labels: HashMap<String, String>,
    /// The first process's uid, gid and groups (ContainerStatus `user`; containerd 2.0+). None
    /// from ListContainers and from runtimes that do not report it.
    pub user: Option<LinuxUser>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

#[async_trait]
pub trait CriApi: Send + Sync {
    /// `<runtime name>://<version>`, e.g. `containerd://1.6.20`.
    async fn version(&self) -> Result<String, CriError>;
    /// The runtime's conditions (RuntimeReady, NetworkReady): (type, status, message).
    async fn conditions(&self) -> Result<Vec<(String, bool, String)>, CriError>;
    async fn image_present(&self, image: &str) -> Result<bool, CriError>;
    /// Pulls and returns the image ref.
    async fn pull_image(
        &self,
        image: &str,
        sandbox: &cri::PodSandboxConfig,
    ) -> Result<String, CriError>;
    /// `handler`: the CRI runtime handler of the pod's RuntimeClass ("" = the runtime's default).
    async fn run_pod_sandbox(
        &self,
        config: &cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, CriError>;
    async fn pod_sandbox_status(&self, id: &str) -> Result<Sandbox, CriError>;
    /// Sandboxes carrying all of `labels`.
    async fn list_pod_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Sandbox>, CriError>;
    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError>;
    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError>;
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: &cri::ContainerConfig,
        sandbox: &cri::PodSandboxConfig,
    ) -> Result<String, CriError>;
    async fn start_container(&self, id: &str) -> Result<(), CriError>;
    /// SIGTERM, then SIGKILL after `timeout_secs`.
    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError>;
    async fn remove_container(&self, id: &str) -> Result<(), CriError>;
    async fn container_status(&self, id: &str) -> Result<CriContainer, CriError>;
    /// Containers of one sandbox (all states).
    async fn list_containers(&self, sandbox_id: &str) -> Result<Vec<CriContainer>, CriError>;
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<ExecResult, CriError>;
    /// PullImage with a registry credential (`None`: anonymous); returns the image ref. Runtimes
    /// that take no credentials only pull anonymously.
    async fn pull_image_with_auth(
        &self,
        image: &str,
        auth: Option<&cri::AuthConfig>,
        sandbox: &cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        match auth {
            None => self.pull_image(image, sandbox).await,
            Some(_) => Err(CriError::Call {
                op: "PullImage",
                code: tonic::Code::Unimplemented,
                message: "this runtime takes no registry credentials".into(),
            }),
        }
    }
    /// UpdateContainerResources: a running container's new cgroup settings (an in-place resize).
    async fn update_container_resources(
        &self,
        _id: &str,
        _resources: &cri::LinuxContainerResources,
    ) -> Result<(), CriError> {
        Err(CriError::Call {
            op: "UpdateContainerResources",
            code: tonic::Code::Unimplemented,
            message: "this runtime does not resize containers".into(),
        })
    }
    /// The user `image`'s config names (ImageStatus `uid` / `username`); an image without one, or
    /// one the runtime does not have, reports neither (upstream then assumes root).
    async fn image_user(&self, _image: &str) -> Result<ImageUser, CriError> {
        Ok(ImageUser::default())
    }
    /// Whether the runtime honours `supplementalGroupsPolicy: Strict` and reports the container's
    /// user (RuntimeStatus `features.supplemental_groups_policy`); None: the runtime reports no
    /// features at all (containerd before 2.0), which upstream's node status then leaves out.
    async fn supplemental_groups_policy(&self) -> Result<Option<bool>, CriError> {
        Ok(None)
    }
}
