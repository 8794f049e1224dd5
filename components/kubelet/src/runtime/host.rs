//! The `kiln-host` runtime: a pod's containers are supervised host processes sharing the host's network,
//! mount and PID namespaces. The image is ignored; the container's command + args are run as given.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::supervisor::{self, Backoff, ProcessSpec, SharedStatus};
use super::{PodStatus, Runtime, RuntimeError, DEFAULT_GRACE};
use crate::container_status::{ContainerState, ContainerStatus, RestartPolicy};
use crate::logs::pod_log_dir;

pub const HANDLER: &str = "kiln-host";
pub const VERSION: &str = "0.1.0";
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct HostPod {
    started_at: SystemTime,
    grace: Duration,
    stop: watch::Sender<Option<Duration>>,
    containers: Vec<SharedStatus>,
    tasks: Vec<JoinHandle<()>>,
}

pub struct HostRuntime {
    log_root: PathBuf,
    backoff: Backoff,
    node_name: String,
    node_ip: IpAddr,
    pods: Mutex<HashMap<String, HostPod>>,
}

impl HostRuntime {
    pub fn new(
        log_root: impl Into<PathBuf>,
        backoff_base: Duration,
        backoff_max: Duration,
        node_name: &str,
        node_ip: IpAddr,
    ) -> Self {
        HostRuntime {
            log_root: log_root.into(),
            backoff: Backoff {
                base: backoff_base,
                max: backoff_max,
            },
            node_name: node_name.to_string(),
            node_ip,
            pods: Mutex::new(HashMap::new()),
        }
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<String, HostPod>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn env_for(
        &self,
        pod: &Pod,
        c: &Container,
        key: &str,
    ) -> Result<Vec<(String, String)>, RuntimeError> {
        let meta = &pod.metadata;
        let mut env = vec![
            ("PATH".to_string(), DEFAULT_PATH.to_string()),
            ("HOSTNAME".to_string(), self.node_name.clone()),
        ];
        for e in c.env.iter().flatten() {
            let value = match (&e.value, &e.value_from) {
                (_, Some(from)) => {
                    let path = from.field_ref.as_ref().map(|f| f.field_path.as_str());
                    let ip = self.node_ip.to_string();
                    match path {
                        Some("metadata.name") => meta.name.clone().unwrap_or_default(),
                        Some("metadata.namespace") => meta.namespace.clone().unwrap_or_default(),
                        Some("metadata.uid") => meta.uid.clone().unwrap_or_default(),
                        Some("spec.nodeName") => self.node_name.clone(),
                        // hostNetwork: the pod's IP is the node's.
                        Some("status.podIP") | Some("status.hostIP") => ip,
                        _ => {
                            return Err(RuntimeError::InvalidSpec {
                                pod: key.into(),
                                message: format!(
                                    "env {}: only fieldRef valueFrom is supported by {HANDLER}",
                                    e.name
                                ),
                            })
                        }
                    }
                }
                (Some(v), None) => v.clone(),
                (None, None) => String::new(),
            };
            env.retain(|(k, _)| k != &e.name);
            env.push((e.name.clone(), value));
        }
        Ok(env)
    }
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

#[async_trait]
impl Runtime for HostRuntime {
    fn handler(&self) -> &'static str {
        HANDLER
    }

    fn version(&self) -> String {
        format!("{HANDLER}://{VERSION}")
    }

    async fn ready(&self) -> Result<(), RuntimeError> {
        std::fs::create_dir_all(&self.log_root).map_err(|e| RuntimeError::NotReady {
            handler: HANDLER,
            message: format!("log directory {}: {e}", self.log_root.display()),
        })
    }

    async fn run_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        let key = pod_key(pod);
        let invalid = |message: String| RuntimeError::InvalidSpec {
            pod: key.clone(),
            message,
        };
        let uid = pod
            .metadata
            .uid
            .clone()
            .ok_or_else(|| invalid("no metadata.uid".into()))?;
        let spec = pod.spec.as_ref().ok_or_else(|| invalid("no spec".into()))?;
        if spec.init_containers.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(invalid(format!(
                "initContainers are not supported by {HANDLER} yet"
            )));
        }
        if self.pods().contains_key(&uid) {
            return Err(RuntimeError::AlreadyRunning(key));
        }
        let log_dir = pod_log_dir(
            &self.log_root,
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or(""),
            &uid,
        );
        let policy = RestartPolicy::parse(spec.restart_policy.as_deref());
        // Validate every container before starting any, so a bad spec starts nothing.
        let mut procs = Vec::new();
        for c in &spec.containers {
            let argv: Vec<String> = c
                .command
                .iter()
                .flatten()
                .chain(c.args.iter().flatten())
                .cloned()
                .collect();
            if argv.is_empty() {
                return Err(invalid(format!(
                    "container {}: {HANDLER} needs a command (images are not used)",
                    c.name
                )));
            }
            procs.push(ProcessSpec {
                pod_key: key.clone(),
                container: c.name.clone(),
                argv,
                env: self.env_for(pod, c, &key)?,
                working_dir: c.working_dir.as_ref().map(PathBuf::from),
                log_dir: log_dir.join(&c.name),
                restart_policy: policy,
                backoff: self.backoff,
            });
        }
        let (stop, stop_rx) = watch::channel(None);
        let mut containers = Vec::new();
        let mut tasks = Vec::new();
        for (p, c) in procs.into_iter().zip(&spec.containers) {
            let status: SharedStatus = Arc::new(Mutex::new(ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                container_id: String::new(),
                restart_count: 0,
                state: ContainerState::Waiting {
                    reason: "ContainerCreating".into(),
                    message: None,
                },
                last_termination: None,
                ready: false,
                restarting: false,
                // No startup probes here: started whenever running.
                started: true,
                restartable: false,
                user: None,
            }));
            tasks.push(tokio::spawn(supervisor::supervise(
                p,
                status.clone(),
                stop_rx.clone(),
            )));
            containers.push(status);
        }
        let grace = spec
            .termination_grace_period_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(DEFAULT_GRACE);
        self.pods().insert(
            uid,
            HostPod {
                started_at: SystemTime::now(),
                grace,
                stop,
                containers,
                tasks,
            },
        );
        tracing::info!(pod = %key, "pod started");
        Ok(())
    }

    async fn stop_pod(&self, uid: &str, grace: Option<Duration>) -> Result<(), RuntimeError> {
        let pod = self
            .pods()
            .remove(uid)
            .ok_or_else(|| RuntimeError::NotFound(uid.into()))?;
        let grace = grace.unwrap_or(pod.grace);
        let _ = pod.stop.send(Some(grace));
        // Supervisors finish within grace + their final SIGKILL wait; bound it anyway.
        let bound = grace + Duration::from_secs(10);
        for mut t in pod.tasks {
            if tokio::time::timeout(bound, &mut t).await.is_err() {
                t.abort();
            }
        }
        Ok(())
    }

    fn pod_status(&self, uid: &str) -> Option<PodStatus> {
        let pods = self.pods();
        let pod = pods.get(uid)?;
        Some(PodStatus {
            uid: uid.to_string(),
            started_at: pod.started_at,
            containers: pod
                .containers
                .iter()
                .map(|c| {
                    let mut c = c.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    // No probes in kiln-host yet: a running process is ready.
                    c.ready = c.is_running();
                    c
                })
                .collect(),
            init_containers: Vec::new(),
            ephemeral_containers: Vec::new(),
            pod_ip: None,
            resize: Default::default(),
        })
    }

    fn pod_uids(&self) -> Vec<String> {
        self.pods().keys().cloned().collect()
    }
}

impl Drop for HostRuntime {
    // Processes are not left behind by a dropped runtime (tests, or a kubelet shutting down).
    fn drop(&mut self) {
        for (_, pod) in self.pods().drain() {
            for c in &pod.containers {
                supervisor::kill_now(c);
            }
            for t in pod.tasks {
                t.abort();
            }
        }
    }
}
