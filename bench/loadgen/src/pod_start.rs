//! Pod start latency on a real cluster: pods created at once, each measured from the moment its binding
//! is seen (nodeName set) to the moment it is seen Running, on one watch (upstream's pod startup SLI
//! counts from creation with the image present; the binding is where kiln's kubelet takes over).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::stats::{summarize, Summary};

#[derive(Debug, thiserror::Error)]
pub enum PodStartError {
    #[error("kubeconfig {0}: {1}")]
    Kubeconfig(String, String),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("{running} of {count} pods Running within {waited:?}")]
    Timeout {
        running: usize,
        count: usize,
        waited: Duration,
    },
}

pub async fn run(kubeconfig: &str, count: usize, image: &str) -> Result<Summary, PodStartError> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| PodStartError::Kubeconfig(kubeconfig.into(), e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| PodStartError::Kubeconfig(kubeconfig.into(), e.to_string()))?;
    let client = kube::Client::try_from(cfg)?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let lp = ListParams::default().labels("bench=pod-start");
    let _ = pods
        .delete_collection(&DeleteParams::default().grace_period(0), &lp)
        .await;
    let rv = pods
        .list_metadata(&lp)
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = pods
        .watch(
            &WatchParams::default()
                .labels("bench=pod-start")
                .timeout(290),
            &rv,
        )
        .await?
        .boxed();
    let started = Instant::now();
    for i in 0..count {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("start-{i:03}"), "labels": {"bench": "pod-start"}},
            "spec": {"terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": image, "command": ["sleep", "3600"],
                    "imagePullPolicy": "IfNotPresent"}]}
        }))
        .expect("pod JSON");
        pods.create(&PostParams::default(), &pod).await?;
    }
    let mut bound: HashMap<String, Instant> = HashMap::new();
    let mut latencies = Vec::with_capacity(count);
    let limit = Duration::from_secs(240);
    while latencies.len() < count {
        let ev =
            tokio::time::timeout(limit.saturating_sub(started.elapsed()), stream.try_next()).await;
        let p = match ev {
            Ok(Ok(Some(WatchEvent::Added(p) | WatchEvent::Modified(p)))) => p,
            Ok(Ok(Some(_))) => continue,
            _ => {
                return Err(PodStartError::Timeout {
                    running: latencies.len(),
                    count,
                    waited: started.elapsed(),
                })
            }
        };
        let name = p.metadata.name.clone().unwrap_or_default();
        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            bound.entry(name.clone()).or_insert_with(Instant::now);
        }
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if running {
            if let Some(t) = bound.remove(&name) {
                latencies.push(t.elapsed());
            }
        }
    }
    let wall = started.elapsed();
    let _ = pods
        .delete_collection(&DeleteParams::default().grace_period(0), &lp)
        .await;
    Ok(summarize(latencies, 0, wall))
}
