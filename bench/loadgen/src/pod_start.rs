//! Pod start latency on a real cluster. Each pod is measured on one watch from the moment its binding is
//! seen (nodeName set: where the kubelet takes over) to the moment it is seen Running, and also from its
//! creation (upstream's pod startup SLI, image present). Pods are created either all at once (`rate` 0:
//! a burst, bound by the nodes' container-runtime throughput), at a steady rate (upstream's density
//! test creates pods at a fixed QPS), or one after another — the next created once the previous is seen
//! Running, the pods before it still running (upstream's node-e2e pod startup latency test,
//! `runDensitySeqTest`); creation runs beside the watch so no timestamp waits for the burst.

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

#[derive(Debug, Clone, serde::Serialize)]
pub struct PodStartReport {
    /// Pods created per second (0: all at once).
    pub rate: f64,
    /// Each pod created once the one before it ran.
    pub sequential: bool,
    /// Binding seen → Running seen (the kubelet's and the runtime's share).
    pub bound_to_running: Summary,
    /// Created → Running seen (scheduler included).
    pub created_to_running: Summary,
}

/// One pod's milestones as the watch saw them (unix ms), for `--trace`: joined with the kubelets' logs
/// they tell where a slow start spent its time.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PodTrace {
    pub name: String,
    pub node: String,
    pub created_ms: u128,
    pub bound_ms: u128,
    /// The kubelet's first status (hostIP set) seen.
    pub reported_ms: u128,
    pub running_ms: u128,
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

pub async fn run(
    kubeconfig: &str,
    count: usize,
    image: &str,
    rate: f64,
    sequential: bool,
    trace: Option<&std::path::Path>,
    restricted: bool,
) -> Result<PodStartReport, PodStartError> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| PodStartError::Kubeconfig(kubeconfig.into(), e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| PodStartError::Kubeconfig(kubeconfig.into(), e.to_string()))?;
    let client = kube::Client::try_from(cfg)?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let lp = ListParams::default().labels("bench=pod-start");
    clean(&pods, &lp).await?;
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
    let (created_tx, mut created_rx) = tokio::sync::mpsc::unbounded_channel();
    let (running_tx, running_rx) = tokio::sync::mpsc::unbounded_channel();
    let creator = tokio::spawn(create_pods(
        pods.clone(),
        count,
        image.to_string(),
        rate,
        sequential.then_some(running_rx),
        created_tx,
        restricted,
    ));
    let mut created: HashMap<String, Instant> = HashMap::new();
    let mut bound: HashMap<String, Instant> = HashMap::new();
    let mut done: HashMap<String, bool> = HashMap::new();
    let mut traces: HashMap<String, PodTrace> = HashMap::new();
    let (mut from_bound, mut from_created) = (Vec::new(), Vec::new());
    let limit = Duration::from_secs(240);
    while from_bound.len() < count {
        let ev = tokio::select! {
            Some((name, at)) = created_rx.recv() => {
                traces.entry(name.clone()).or_default().created_ms = unix_ms();
                created.insert(name, at);
                continue;
            }
            ev = tokio::time::timeout(limit.saturating_sub(started.elapsed()), stream.try_next()) => ev,
        };
        let p = match ev {
            Ok(Ok(Some(WatchEvent::Added(p) | WatchEvent::Modified(p)))) => p,
            Ok(Ok(Some(_))) => continue,
            _ => {
                creator.abort();
                return Err(PodStartError::Timeout {
                    running: from_bound.len(),
                    count,
                    waited: started.elapsed(),
                });
            }
        };
        let seen = Instant::now();
        let name = p.metadata.name.clone().unwrap_or_default();
        if done.contains_key(&name) {
            continue;
        }
        let tr = traces.entry(name.clone()).or_default();
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
            bound.entry(name.clone()).or_insert(seen);
            if tr.bound_ms == 0 {
                tr.bound_ms = unix_ms();
                tr.node = node.clone();
            }
        }
        if tr.reported_ms == 0 && p.status.as_ref().and_then(|s| s.host_ip.as_ref()).is_some() {
            tr.reported_ms = unix_ms();
        }
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            if let Some(t) = bound.get(&name) {
                tr.running_ms = unix_ms();
                let _ = running_tx.send(());
                from_bound.push(seen - *t);
                done.insert(name.clone(), true);
                // The creation time comes from the creator; a Running pod was surely created.
                while !created.contains_key(&name) {
                    match created_rx.recv().await {
                        Some((n, at)) => {
                            created.insert(n, at);
                        }
                        None => break,
                    }
                }
                if let Some(c) = created.get(&name) {
                    from_created.push(seen.saturating_duration_since(*c));
                }
            }
        }
    }
    let wall = started.elapsed();
    let errors = match creator.await {
        Ok(Ok(())) => 0,
        _ => 1,
    };
    clean(&pods, &lp).await?;
    if let Some(path) = trace {
        let mut lines = String::new();
        let mut all: Vec<_> = traces.into_iter().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, mut t) in all {
            t.name = name;
            lines.push_str(&serde_json::to_string(&t).unwrap_or_default());
            lines.push('\n');
        }
        if let Err(e) = std::fs::write(path, lines) {
            eprintln!("kiln-bench: writing {}: {e}", path.display());
        }
    }
    Ok(PodStartReport {
        rate,
        sequential,
        bound_to_running: summarize(from_bound, errors, wall),
        created_to_running: summarize(from_created, errors, wall),
    })
}

/// Creates the pods, each reported with the instant just before its create call was sent.
async fn create_pods(
    pods: Api<Pod>,
    count: usize,
    image: String,
    rate: f64,
    mut sequential: Option<tokio::sync::mpsc::UnboundedReceiver<()>>,
    created: tokio::sync::mpsc::UnboundedSender<(String, Instant)>,
    restricted: bool,
) -> Result<(), kube::Error> {
    let t0 = Instant::now();
    for i in 0..count {
        if let (Some(running), true) = (sequential.as_mut(), i > 0) {
            // The pod before this one is Running.
            if running.recv().await.is_none() {
                return Ok(());
            }
        } else if rate > 0.0 {
            let due = t0 + Duration::from_secs_f64(i as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let name = format!("start-{i:03}");
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench": "pod-start"}},
            "spec": {"terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": image, "command": ["sleep", "3600"],
                    "imagePullPolicy": "IfNotPresent"}]}
        });
        if restricted {
            restrict(&mut pod);
        }
        let pod: Pod = serde_json::from_value(pod).expect("pod JSON");
        let _ = created.send((name, Instant::now()));
        pods.create(&PostParams::default(), &pod).await?;
    }
    Ok(())
}

/// What PodSecurity's `restricted` level asks of a pod (non-root, no privilege escalation, every
/// capability dropped, RuntimeDefault seccomp), plus a read-only root and limits equal to requests
/// (Guaranteed): the kubelet then writes a pod cgroup with CPU quota and memory limit, and the runtime a
/// seccomp filter and an empty capability set.
fn restrict(pod: &mut serde_json::Value) {
    pod["spec"]["securityContext"] = json!({
        "runAsNonRoot": true, "runAsUser": 65534, "runAsGroup": 65534,
        "seccompProfile": {"type": "RuntimeDefault"}
    });
    // 10m: 100 of them fit the 2 CPUs of a lab worker.
    let limits = json!({"cpu": "10m", "memory": "32Mi"});
    pod["spec"]["containers"][0]["resources"] = json!({"requests": limits, "limits": limits});
    pod["spec"]["containers"][0]["securityContext"] = json!({
        "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]}
    });
}

/// Deletes the benchmark's pods and waits until they are gone, so that one run's teardown does not
/// load the nodes during the next run: a graceful delete (1 s), so that each object stays until its
/// kubelet has stopped the pod and removed it (grace 0 would drop the objects at once, with the
/// nodes still tearing the sandboxes down).
async fn clean(pods: &Api<Pod>, lp: &ListParams) -> Result<(), PodStartError> {
    let _ = pods
        .delete_collection(&DeleteParams::default().grace_period(1), lp)
        .await;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(120) {
        if pods.list_metadata(lp).await?.items.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}
