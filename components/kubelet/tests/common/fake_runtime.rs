//! A runtime for tests of the API side: every pod it is asked to run has one running, ready container
//! per container of its spec and the IP [`POD_IP`]; it records the runs and stops it was asked for.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kiln_kubelet::container_status::{ContainerState, ContainerStatus};
use kiln_kubelet::runtime::{PodStatus, Runtime, RuntimeError};

/// The IP of every pod [`RunningRuntime`] runs.
pub const POD_IP: &str = "10.244.9.2";

#[derive(Default)]
pub struct RunningRuntime {
    /// `run <pod name>` and `stop <uid> <grace>`, in order.
    calls: Mutex<Vec<String>>,
    pods: Mutex<HashMap<String, PodStatus>>,
}

impl RunningRuntime {
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Runtime for RunningRuntime {
    fn handler(&self) -> &'static str {
        "fake"
    }
    fn version(&self) -> String {
        "fake://1".into()
    }
    async fn ready(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn run_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.calls.lock().unwrap().push(format!(
            "run {}",
            pod.metadata.name.as_deref().unwrap_or_default()
        ));
        let now = SystemTime::now();
        let containers = pod
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| ContainerStatus {
                name: c.name,
                image: c.image.unwrap_or_default(),
                container_id: "fake://c1".into(),
                restart_count: 0,
                state: ContainerState::Running {
                    pid: 0,
                    started_at: now,
                },
                last_termination: None,
                ready: true,
                restarting: false,
                started: true,
                restartable: false,
                user: None,
            })
            .collect();
        self.pods.lock().unwrap().insert(
            uid.clone(),
            PodStatus {
                uid,
                started_at: now,
                pod_ip: Some(POD_IP.into()),
                resize: Default::default(),
                init_containers: Vec::new(),
                ephemeral_containers: Vec::new(),
                containers,
            },
        );
        Ok(())
    }
    async fn stop_pod(&self, uid: &str, grace: Option<Duration>) -> Result<(), RuntimeError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("stop {uid} {grace:?}"));
        self.pods
            .lock()
            .unwrap()
            .remove(uid)
            .map(|_| ())
            .ok_or_else(|| RuntimeError::NotFound(uid.into()))
    }
    fn pod_status(&self, uid: &str) -> Option<PodStatus> {
        self.pods.lock().unwrap().get(uid).cloned()
    }
    fn pod_uids(&self) -> Vec<String> {
        self.pods.lock().unwrap().keys().cloned().collect()
    }
}
