//! The anchor for pod start: the container runtime alone. The same sandbox and container requests the
//! kubelet makes (built by the kubelet's own spec code), sent straight to containerd over CRI —
//! RunPodSandbox (with CNI ADD) + CreateContainer + StartContainer — with `parallel` pods in flight.
//! What the kubelet adds on top (watch, API status round trips) is kiln's latency minus this floor.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kiln_kubelet::runtime::cri::{spec, CriApi, GrpcCri};
use serde_json::json;

use crate::stats::{summarize, Summary};

#[derive(Debug, thiserror::Error)]
pub enum CriFloorError {
    #[error("CRI endpoint {0}: {1}")]
    Connect(String, String),
    #[error("pod {pod}: {message}")]
    Pod { pod: String, message: String },
}

pub async fn run(
    endpoint: &str,
    count: usize,
    parallel: usize,
    image: &str,
) -> Result<Summary, CriFloorError> {
    let cri: Arc<dyn CriApi> = Arc::new(
        GrpcCri::new(endpoint)
            .map_err(|e| CriFloorError::Connect(endpoint.into(), e.to_string()))?,
    );
    let started = Instant::now();
    let results: Vec<Result<(Duration, String), CriFloorError>> = futures::stream::iter(0..count)
        .map(|i| start_one(cri.clone(), i, image.to_string()))
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    let wall = started.elapsed();
    let mut latencies = Vec::new();
    let mut first_error = None;
    for r in results {
        match r {
            Ok((d, sandbox)) => {
                latencies.push(d);
                // Clean up: these sandboxes are not the kubelet's (no managed-by label), it leaves them.
                let _ = cri.stop_pod_sandbox(&sandbox).await;
                let _ = cri.remove_pod_sandbox(&sandbox).await;
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(summarize(latencies, 0, wall)),
    }
}

async fn start_one(
    cri: Arc<dyn CriApi>,
    i: usize,
    image: String,
) -> Result<(Duration, String), CriFloorError> {
    let name = format!("cri-floor-{i:03}-{}", std::process::id());
    let err = |message: String| CriFloorError::Pod {
        pod: name.clone(),
        message,
    };
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kiln-bench", "uid": format!("{name}-uid")},
        "spec": {"containers": [{"name": "c", "image": image, "command": ["sleep", "3600"]}]}
    }))
    .expect("pod JSON");
    // the kubelet gives a pod (not hostNetwork) its name as hostname
    let mut sandbox = spec::sandbox_config(&pod, Path::new("/var/log/pods"), 0, &name)
        .map_err(|e| err(e.to_string()))?;
    sandbox.labels.remove(spec::LABEL_MANAGED_BY);
    let c = &pod.spec.as_ref().expect("spec").containers[0];
    let mut config =
        spec::container_config(&pod, c, 0, vec![], vec![]).map_err(|e| err(e.to_string()))?;
    config.labels.remove(spec::LABEL_MANAGED_BY);
    let t0 = Instant::now();
    let id = cri
        .run_pod_sandbox(&sandbox, "")
        .await
        .map_err(|e| err(e.to_string()))?;
    let ctr = cri
        .create_container(&id, &config, &sandbox)
        .await
        .map_err(|e| err(e.to_string()))?;
    cri.start_container(&ctr)
        .await
        .map_err(|e| err(e.to_string()))?;
    Ok((t0.elapsed(), id))
}
