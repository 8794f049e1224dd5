//! [`CriApi`] over CRI v1 gRPC (tonic) on containerd's unix socket. The channel connects lazily, so the
//! kubelet starts before containerd does and recovers when containerd restarts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::api::{CriApi, CriContainer, CriError, CriState, ExecResult, LinuxUser, Sandbox};

/// Ordinary calls; pulls and stops get their own, longer bounds.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
const PULL_TIMEOUT: Duration = Duration::from_secs(600);

pub struct GrpcCri {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("CRI endpoint {endpoint}: {message}")]
    Endpoint { endpoint: String, message: String },
}

fn request<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(timeout);
    r
}

impl GrpcCri {
    /// The image as the runtime has it (None: not pulled): what ImagePresent and the image's user read.
    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, CriError> {
        let r = self
            .image
            .clone()
            .image_status(request(
                cri::ImageStatusRequest {
                    image: Some(image_spec(image)),
                    verbose: false,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("ImageStatus", e))?
            .into_inner();
        Ok(r.image)
    }

    /// `endpoint` is a socket path, with or without the `unix://` prefix.
    pub fn new(endpoint: &str) -> Result<Self, GrpcError> {
        let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        if !path.is_absolute() {
            return Err(GrpcError::Endpoint {
                endpoint: endpoint.into(),
                message:
                    "expected an absolute unix socket path (unix:///run/containerd/containerd.sock)"
                        .into(),
            });
        }
        // The URI is required by tonic but unused: every connection goes to the socket.
        let channel =
            Endpoint::from_static("http://cri.invalid")
                .connect_timeout(Duration::from_secs(5))
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?))
                    }
                }));
        Ok(GrpcCri {
            runtime: RuntimeServiceClient::new(channel.clone()),
            image: ImageServiceClient::new(channel),
        })
    }

    /// CRI Exec: the runtime's streaming URL for one exec session, to which the kubelet server proxies the
    /// client's upgraded (SPDY/WebSocket) connection. Not in [`CriApi`]: only the server streams.
    pub async fn exec_url(&self, req: cri::ExecRequest) -> Result<String, CriError> {
        Ok(self
            .rt()
            .exec(request(req, CALL_TIMEOUT))
            .await
            .map_err(|e| CriError::call("Exec", e))?
            .into_inner()
            .url)
    }

    /// CRI Attach: like [`Self::exec_url`], for the container's own stdio (`kubectl attach`).
    pub async fn attach_url(&self, req: cri::AttachRequest) -> Result<String, CriError> {
        Ok(self
            .rt()
            .attach(request(req, CALL_TIMEOUT))
            .await
            .map_err(|e| CriError::call("Attach", e))?
            .into_inner()
            .url)
    }

    /// CRI PortForward: like [`Self::exec_url`], for the pod sandbox's network namespace
    /// (`kubectl port-forward`; the ports come in the SPDY streams' headers).
    pub async fn port_forward_url(&self, req: cri::PortForwardRequest) -> Result<String, CriError> {
        Ok(self
            .rt()
            .port_forward(request(req, CALL_TIMEOUT))
            .await
            .map_err(|e| CriError::call("PortForward", e))?
            .into_inner()
            .url)
    }

    /// CRI ListContainerStats: cumulative CPU and memory of every container (the kubelet server's
    /// `/stats/summary` and `/metrics/resource`). Not in [`CriApi`]: only the server reads stats.
    pub async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>, CriError> {
        Ok(self
            .rt()
            .list_container_stats(request(
                cri::ListContainerStatsRequest::default(),
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("ListContainerStats", e))?
            .into_inner()
            .stats)
    }

    fn rt(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }
}

fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

fn container_from_status(s: cri::ContainerStatus) -> CriContainer {
    let meta = s.metadata.unwrap_or_default();
    CriContainer {
        id: s.id,
        name: meta.name,
        attempt: meta.attempt,
        state: CriState::from_i32(s.state),
        started_at: s.started_at,
        finished_at: s.finished_at,
        exit_code: s.exit_code,
        reason: s.reason,
        message: s.message,
        image_ref: s.image_ref,
        labels: s.labels,
        user: s.user.and_then(|u| u.linux).map(|l| LinuxUser {
            uid: l.uid,
            gid: l.gid,
            supplemental_groups: l.supplemental_groups,
        }),
    }
}

impl GrpcCri {
    /// CRI Status: the runtime's conditions and the features it reports.
    async fn runtime_status(&self) -> Result<cri::StatusResponse, CriError> {
        Ok(self
            .rt()
            .status(request(cri::StatusRequest::default(), CALL_TIMEOUT))
            .await
            .map_err(|e| CriError::call("Status", e))?
            .into_inner())
    }
}

#[async_trait]
impl CriApi for GrpcCri {
    async fn version(&self) -> Result<String, CriError> {
        let v = self
            .rt()
            .version(request(cri::VersionRequest::default(), CALL_TIMEOUT))
            .await
            .map_err(|e| CriError::call("Version", e))?
            .into_inner();
        Ok(format!("{}://{}", v.runtime_name, v.runtime_version))
    }

    async fn conditions(&self) -> Result<Vec<(String, bool, String)>, CriError> {
        let s = self.runtime_status().await?;
        Ok(s.status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .map(|c| (c.r#type, c.status, c.message))
            .collect())
    }

    async fn supplemental_groups_policy(&self) -> Result<Option<bool>, CriError> {
        let s = self.runtime_status().await?;
        Ok(s.features.map(|f| f.supplemental_groups_policy))
    }

    async fn image_present(&self, image: &str) -> Result<bool, CriError> {
        Ok(self.image_status(image).await?.is_some())
    }

    async fn pull_image(
        &self,
        image: &str,
        sandbox: &cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        self.pull_image_with_auth(image, None, sandbox).await
    }

    async fn pull_image_with_auth(
        &self,
        image: &str,
        auth: Option<&cri::AuthConfig>,
        sandbox: &cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let r = self
            .image
            .clone()
            .pull_image(request(
                cri::PullImageRequest {
                    image: Some(image_spec(image)),
                    auth: auth.cloned(),
                    sandbox_config: Some(sandbox.clone()),
                },
                PULL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("PullImage", e))?
            .into_inner();
        Ok(r.image_ref)
    }

    async fn image_user(&self, image: &str) -> Result<super::api::ImageUser, CriError> {
        Ok(self
            .image_status(image)
            .await?
            .map(|i| super::api::ImageUser {
                uid: i.uid.map(|u| u.value),
                username: i.username,
            })
            .unwrap_or_default())
    }

    async fn run_pod_sandbox(
        &self,
        config: &cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, CriError> {
        let r = self
            .rt()
            .run_pod_sandbox(request(
                cri::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: handler.to_string(),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("RunPodSandbox", e))?
            .into_inner();
        Ok(r.pod_sandbox_id)
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<Sandbox, CriError> {
        let r = self
            .rt()
            .pod_sandbox_status(request(
                cri::PodSandboxStatusRequest {
                    pod_sandbox_id: id.to_string(),
                    verbose: false,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("PodSandboxStatus", e))?
            .into_inner();
        let s = r.status.unwrap_or_default();
        let ip = s.network.map(|n| n.ip).filter(|ip| !ip.is_empty());
        Ok(Sandbox {
            id: s.id,
            ready: s.state == cri::PodSandboxState::SandboxReady as i32,
            ip,
            labels: s.labels,
        })
    }

    async fn list_pod_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Sandbox>, CriError> {
        let r = self
            .rt()
            .list_pod_sandbox(request(
                cri::ListPodSandboxRequest {
                    filter: Some(cri::PodSandboxFilter {
                        label_selector: labels,
                        ..Default::default()
                    }),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("ListPodSandbox", e))?
            .into_inner();
        Ok(r.items
            .into_iter()
            .map(|s| Sandbox {
                id: s.id,
                ready: s.state == cri::PodSandboxState::SandboxReady as i32,
                ip: None,
                labels: s.labels,
            })
            .collect())
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        self.rt()
            .stop_pod_sandbox(request(
                cri::StopPodSandboxRequest {
                    pod_sandbox_id: id.to_string(),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("StopPodSandbox", e))?;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        self.rt()
            .remove_pod_sandbox(request(
                cri::RemovePodSandboxRequest {
                    pod_sandbox_id: id.to_string(),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("RemovePodSandbox", e))?;
        Ok(())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: &cri::ContainerConfig,
        sandbox: &cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let r = self
            .rt()
            .create_container(request(
                cri::CreateContainerRequest {
                    pod_sandbox_id: sandbox_id.to_string(),
                    config: Some(config.clone()),
                    sandbox_config: Some(sandbox.clone()),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("CreateContainer", e))?
            .into_inner();
        Ok(r.container_id)
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        self.rt()
            .start_container(request(
                cri::StartContainerRequest {
                    container_id: id.to_string(),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("StartContainer", e))?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError> {
        let bound = CALL_TIMEOUT + Duration::from_secs(timeout_secs.max(0) as u64);
        self.rt()
            .stop_container(request(
                cri::StopContainerRequest {
                    container_id: id.to_string(),
                    timeout: timeout_secs,
                },
                bound,
            ))
            .await
            .map_err(|e| CriError::call("StopContainer", e))?;
        Ok(())
    }

    async fn update_container_resources(
        &self,
        id: &str,
        resources: &cri::LinuxContainerResources,
    ) -> Result<(), CriError> {
        self.rt()
            .update_container_resources(request(
                cri::UpdateContainerResourcesRequest {
                    container_id: id.to_string(),
                    linux: Some(resources.clone()),
                    ..Default::default()
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("UpdateContainerResources", e))?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        self.rt()
            .remove_container(request(
                cri::RemoveContainerRequest {
                    container_id: id.to_string(),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("RemoveContainer", e))?;
        Ok(())
    }

    async fn container_status(&self, id: &str) -> Result<CriContainer, CriError> {
        let r = self
            .rt()
            .container_status(request(
                cri::ContainerStatusRequest {
                    container_id: id.to_string(),
                    verbose: false,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("ContainerStatus", e))?
            .into_inner();
        Ok(container_from_status(r.status.unwrap_or_default()))
    }

    async fn list_containers(&self, sandbox_id: &str) -> Result<Vec<CriContainer>, CriError> {
        let r = self
            .rt()
            .list_containers(request(
                cri::ListContainersRequest {
                    filter: Some(cri::ContainerFilter {
                        pod_sandbox_id: sandbox_id.to_string(),
                        ..Default::default()
                    }),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| CriError::call("ListContainers", e))?
            .into_inner();
        Ok(r.containers
            .into_iter()
            .map(|c| {
                let meta = c.metadata.unwrap_or_default();
                CriContainer {
                    id: c.id,
                    name: meta.name,
                    attempt: meta.attempt,
                    state: CriState::from_i32(c.state),
                    started_at: 0,
                    finished_at: 0,
                    exit_code: 0,
                    reason: String::new(),
                    message: String::new(),
                    image_ref: c.image_ref,
                    labels: c.labels,
                    user: None,
                }
            })
            .collect())
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<ExecResult, CriError> {
        let bound = CALL_TIMEOUT + Duration::from_secs(timeout_secs.max(0) as u64);
        let r = self
            .rt()
            .exec_sync(request(
                cri::ExecSyncRequest {
                    container_id: id.to_string(),
                    cmd,
                    timeout: timeout_secs,
                },
                bound,
            ))
            .await
            .map_err(|e| CriError::call("ExecSync", e))?
            .into_inner();
        Ok(ExecResult {
            exit_code: r.exit_code,
            stdout: r.stdout,
            stderr: r.stderr,
        })
    }
}
