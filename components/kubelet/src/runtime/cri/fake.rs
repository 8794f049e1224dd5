//! A recording, in-memory CRI for unit tests: every call is logged as one line, containers change state
//! only when the test says so (`exit`), and pulls / execs follow scripted answers.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_cri::v1 as cri;

use super::api::{CriApi, CriContainer, CriError, CriState, ExecResult, Sandbox};

#[derive(Default)]
pub struct FakeState {
    pub calls: Vec<String>,
    pub images: HashSet<String>,
    pub failing_pulls: HashSet<String>,
    pub sandboxes: HashMap<String, Sandbox>,
    pub containers: HashMap<String, CriContainer>,
    /// Exit codes returned by successive ExecSync calls (0 when empty).
    pub exec_results: VecDeque<i32>,
    /// The config each container was created with, by id.
    pub configs: HashMap<String, cri::ContainerConfig>,
    /// The config each sandbox was run with, by id.
    pub sandbox_configs: HashMap<String, cri::PodSandboxConfig>,
    /// Every call fails with Unavailable, as while containerd restarts.
    pub unavailable: bool,
    /// Images whose registry wants this (username, password); other pulls are refused as 401.
    pub registry_auth: HashMap<String, (String, String)>,
    /// What ImageStatus reports as each image's user (none: the image has no user).
    pub image_users: HashMap<String, super::api::ImageUser>,
    /// How a running container named so exits when stopped (its SIGTERM handler's code); others are
    /// killed, 137/Error.
    pub stop_exit_codes: HashMap<String, i32>,
    /// What ContainerStatus reports as the user of each container, by container name (as
    /// containerd 2.0 does); none: the runtime reports no user (containerd 1.x).
    pub container_users: HashMap<String, super::api::LinuxUser>,
    next_id: u32,
}

#[derive(Default)]
pub struct FakeCri {
    pub state: Mutex<FakeState>,
}

fn not_found(op: &'static str, id: &str) -> CriError {
    CriError::Call {
        op,
        code: tonic::Code::NotFound,
        message: format!("{id} not found"),
    }
}

impl FakeCri {
    pub fn st(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }

    pub fn calls(&self) -> Vec<String> {
        self.st().calls.clone()
    }

    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.st().calls)
    }

    /// The latest container named `name` exits with `code`.
    pub fn exit(&self, name: &str, code: i32) {
        let mut st = self.st();
        let c = st
            .containers
            .values_mut()
            .filter(|c| c.name == name)
            .max_by_key(|c| c.attempt)
            .expect("no such container");
        c.state = CriState::Exited;
        c.exit_code = code;
        c.reason = if code == 0 { "Completed" } else { "Error" }.into();
        c.finished_at = 2_000_000_000_000_000_000;
    }

    fn log(&self, line: String) {
        self.st().calls.push(line);
    }

    /// Unavailable while [`FakeState::unavailable`].
    fn up(&self, op: &'static str) -> Result<(), CriError> {
        if self.st().unavailable {
            return Err(CriError::Call {
                op,
                code: tonic::Code::Unavailable,
                message: "connection refused".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl CriApi for FakeCri {
    async fn version(&self) -> Result<String, CriError> {
        self.up("Version")?;
        Ok("fake://1".into())
    }

    async fn conditions(&self) -> Result<Vec<(String, bool, String)>, CriError> {
        self.up("Status")?;
        Ok(vec![
            ("RuntimeReady".into(), true, String::new()),
            ("NetworkReady".into(), true, String::new()),
        ])
    }

    async fn image_present(&self, image: &str) -> Result<bool, CriError> {
        self.up("ImageStatus")?;
        Ok(self.st().images.contains(image))
    }

    async fn pull_image(
        &self,
        image: &str,
        sb: &cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        self.pull_image_with_auth(image, None, sb).await
    }

    async fn pull_image_with_auth(
        &self,
        image: &str,
        auth: Option<&cri::AuthConfig>,
        _: &cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        self.up("PullImage")?;
        match auth {
            // The user only: the log must never carry a password.
            Some(a) => self.log(format!("PullImage {image} auth={}", a.username)),
            None => self.log(format!("PullImage {image}")),
        }
        let mut st = self.st();
        if let Some((user, password)) = st.registry_auth.get(image) {
            let given = auth.map(|a| (a.username.as_str(), a.password.as_str()));
            if given != Some((user.as_str(), password.as_str())) {
                return Err(CriError::Call {
                    op: "PullImage",
                    code: tonic::Code::Unknown,
                    message: format!("pull {image}: unexpected status: 401 Unauthorized"),
                });
            }
        }
        if st.failing_pulls.contains(image) {
            return Err(CriError::Call {
                op: "PullImage",
                code: tonic::Code::Unknown,
                message: format!("pull {image}: not found"),
            });
        }
        st.images.insert(image.to_string());
        Ok(format!("sha256:{image}"))
    }

    async fn image_user(&self, image: &str) -> Result<super::api::ImageUser, CriError> {
        self.up("ImageStatus")?;
        Ok(self
            .st()
            .image_users
            .get(image)
            .cloned()
            .unwrap_or_default())
    }

    async fn run_pod_sandbox(
        &self,
        config: &cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, CriError> {
        self.up("RunPodSandbox")?;
        let name = config.metadata.clone().unwrap_or_default().name;
        if handler.is_empty() {
            self.log(format!("RunPodSandbox {name}"));
        } else {
            self.log(format!("RunPodSandbox {name} handler={handler}"));
        }
        let mut st = self.st();
        st.next_id += 1;
        let id = format!("sb{}", st.next_id);
        let ip = format!("10.244.1.{}", st.next_id + 1);
        st.sandbox_configs.insert(id.clone(), config.clone());
        st.sandboxes.insert(
            id.clone(),
            Sandbox {
                id: id.clone(),
                ready: true,
                ip: Some(ip),
                labels: config.labels.clone(),
            },
        );
        Ok(id)
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<Sandbox, CriError> {
        self.up("PodSandboxStatus")?;
        self.st()
            .sandboxes
            .get(id)
            .cloned()
            .ok_or_else(|| not_found("PodSandboxStatus", id))
    }

    async fn list_pod_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Sandbox>, CriError> {
        self.up("ListPodSandbox")?;
        Ok(self
            .st()
            .sandboxes
            .values()
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            // As ListPodSandbox: no network status.
            .map(|s| Sandbox {
                ip: None,
                ..s.clone()
            })
            .collect())
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        self.up("StopPodSandbox")?;
        self.log(format!("StopPodSandbox {id}"));
        let mut st = self.st();
        let sb = st
            .sandboxes
            .get_mut(id)
            .ok_or_else(|| not_found("StopPodSandbox", id))?;
        sb.ready = false;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        self.up("RemovePodSandbox")?;
        self.log(format!("RemovePodSandbox {id}"));
        let mut st = self.st();
        st.sandboxes
            .remove(id)
            .ok_or_else(|| not_found("RemovePodSandbox", id))?;
        st.containers
            .retain(|_, c| c.labels.get("sandbox").map(String::as_str) != Some(id));
        Ok(())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: &cri::ContainerConfig,
        _: &cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        self.up("CreateContainer")?;
        let meta = config.metadata.clone().unwrap_or_default();
        self.log(format!(
            "CreateContainer {} attempt={} log={}",
            meta.name, meta.attempt, config.log_path
        ));
        let mut st = self.st();
        st.next_id += 1;
        let id = format!("c{}", st.next_id);
        st.configs.insert(id.clone(), config.clone());
        let mut labels = config.labels.clone();
        labels.insert("sandbox".into(), sandbox_id.into());
        st.containers.insert(
            id.clone(),
            CriContainer {
                id: id.clone(),
                name: meta.name,
                attempt: meta.attempt,
                state: CriState::Created,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                message: String::new(),
                image_ref: String::new(),
                labels,
                user: None,
            },
        );
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        self.up("StartContainer")?;
        self.log(format!("StartContainer {id}"));
        let mut st = self.st();
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StartContainer", id))?;
        c.state = CriState::Running;
        c.started_at = 1_000_000_000_000_000_000;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError> {
        self.up("StopContainer")?;
        self.log(format!("StopContainer {id} timeout={timeout_secs}"));
        let mut st = self.st();
        let st = &mut *st;
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StopContainer", id))?;
        if c.state == CriState::Running {
            c.state = CriState::Exited;
            c.exit_code = st.stop_exit_codes.get(&c.name).copied().unwrap_or(137);
            c.reason = if c.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .into();
        }
        Ok(())
    }

    async fn update_container_resources(
        &self,
        id: &str,
        r: &cri::LinuxContainerResources,
    ) -> Result<(), CriError> {
        self.up("UpdateContainerResources")?;
        self.log(format!(
            "UpdateContainerResources {id} shares={} quota={} memory={}",
            r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes
        ));
        if !self.st().containers.contains_key(id) {
            return Err(not_found("UpdateContainerResources", id));
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        self.up("RemoveContainer")?;
        self.log(format!("RemoveContainer {id}"));
        self.st()
            .containers
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| not_found("RemoveContainer", id))
    }

    async fn container_status(&self, id: &str) -> Result<CriContainer, CriError> {
        self.up("ContainerStatus")?;
        let st = self.st();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| not_found("ContainerStatus", id))?;
        Ok(CriContainer {
            user: st.container_users.get(&c.name).cloned(),
            ..c.clone()
        })
    }

    async fn list_containers(&self, sandbox_id: &str) -> Result<Vec<CriContainer>, CriError> {
        self.up("ListContainers")?;
        Ok(self
            .st()
            .containers
            .values()
            .filter(|c| c.labels.get("sandbox").map(String::as_str) == Some(sandbox_id))
            .cloned()
            .collect())
    }

    async fn exec_sync(&self, id: &str, cmd: Vec<String>, _: i64) -> Result<ExecResult, CriError> {
        self.up("ExecSync")?;
        self.log(format!("ExecSync {id} {}", cmd.join(" ")));
        let code = self.st().exec_results.pop_front().unwrap_or(0);
        Ok(ExecResult {
            exit_code: code,
            stdout: Vec::new(),
            stderr: Vec::new(),
        })
    }
}
