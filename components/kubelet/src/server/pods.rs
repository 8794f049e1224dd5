//! The pods this kubelet runs, as the server sees them: static pods (`kiln-host`) and workload pods
//! (`cri`), each with its runtime status. `/pods` lists them; logs and exec look a pod up by name.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use crate::cri_log::LogFormat;
use crate::mirror::api_status;
use crate::runtime::{CriRuntime, PodStatus};
use crate::static_pods::StaticPods;

/// Which runtime runs a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodRuntime {
    Cri,
    Host,
}

impl PodRuntime {
    pub fn log_format(self) -> LogFormat {
        match self {
            PodRuntime::Cri => LogFormat::Cri,
            PodRuntime::Host => LogFormat::Raw,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodePod {
    pub pod: Pod,
    pub status: Option<PodStatus>,
    pub runtime: PodRuntime,
}

impl NodePod {
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// Where the server finds pods; a trait so the server is tested without runtimes.
pub trait PodSource: Send + Sync {
    fn pods(&self) -> Vec<NodePod>;
}

/// The kubelet's own runtimes.
pub struct KubeletPods {
    pub static_pods: Arc<StaticPods>,
    pub cri: Option<Arc<CriRuntime>>,
}

impl PodSource for KubeletPods {
    fn pods(&self) -> Vec<NodePod> {
        let mut out: Vec<NodePod> = self
            .static_pods
            .pods()
            .into_iter()
            .map(|(pod, status)| NodePod {
                pod,
                status,
                runtime: PodRuntime::Host,
            })
            .collect();
        if let Some(cri) = &self.cri {
            out.extend(
                cri.pods_with_status()
                    .into_iter()
                    .map(|(pod, status)| NodePod {
                        pod,
                        status: Some(status),
                        runtime: PodRuntime::Cri,
                    }),
            );
        }
        out
    }
}

pub fn find(source: &dyn PodSource, namespace: &str, name: &str) -> Option<NodePod> {
    source
        .pods()
        .into_iter()
        .find(|p| p.namespace() == namespace && p.name() == name)
}

/// `/pods`: a v1 PodList of the pods with the status this kubelet would report.
pub fn pod_list(pods: &[NodePod], node_ip: &str) -> Value {
    let items: Vec<Value> = pods
        .iter()
        .map(|p| {
            let mut pod = p.pod.clone();
            if let Some(st) = &p.status {
                let pod_ip = match p.runtime {
                    PodRuntime::Host => Some(node_ip),
                    PodRuntime::Cri => st.pod_ip.as_deref(),
                };
                pod.status = Some(api_status(st, node_ip, pod_ip));
            }
            let mut v = serde_json::to_value(&pod).unwrap_or(Value::Null);
            v["apiVersion"] = json!("v1");
            v["kind"] = json!("Pod");
            v
        })
        .collect();
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}
