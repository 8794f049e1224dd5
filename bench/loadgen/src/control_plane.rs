//! Control-plane benchmarks on the real components in-process (store + kiln-apiserver from the shared
//! harness, kiln-scheduler, kiln-controller-manager), with fake nodes (no kubelets):
//! - scheduler throughput: N pending pods over M nodes, measured from the scheduler's start to the last
//!   binding seen on a watch;
//! - controller reaction: a ReplicaSet's pod deleted → the replacement pod's creation seen on a watch.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kiln_testkit::{create_node, Cluster};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::stats::{summarize, Summary};

#[derive(Debug, serde::Serialize)]
pub struct SchedulerResult {
    pub nodes: usize,
    pub pods: usize,
    pub seconds: f64,
    pub pods_per_second: f64,
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "sched"}},
        "spec": {"containers": [{"name": "c", "image": "kiln/pause:1",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))
    .expect("pod JSON")
}

/// Runs `f` over `items` with at most `width` in flight.
async fn fan_out<T, F, Fut>(items: Vec<T>, width: usize, f: F)
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(items)
        .for_each_concurrent(width, f)
        .await;
}

pub async fn scheduler(nodes: usize, pods: usize) -> SchedulerResult {
    let c = Cluster::start().await;
    let client = c.admin().await;
    fan_out((0..nodes).collect(), 32, |i| {
        let client = client.clone();
        async move { create_node(&client, &format!("node-{i:04}"), "64", json!([])).await }
    })
    .await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    fan_out((0..pods).collect(), 32, |i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &pod(&format!("p-{i:05}")))
                .await
                .expect("creating a pod");
        }
    })
    .await;
    let rv = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .expect("listing pods")
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = api
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .expect("watching pods")
        .boxed();
    let options = kiln_scheduler::Options::parse_from([
        "kiln-scheduler".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        "--leader-elect=false".into(),
    ]);
    let start = Instant::now();
    let _scheduler = kiln_scheduler::start(options)
        .await
        .expect("starting the scheduler");
    let mut bound = HashSet::new();
    while bound.len() < pods {
        match stream.try_next().await {
            Ok(Some(WatchEvent::Modified(p))) => {
                if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    bound.insert(p.metadata.name.unwrap_or_default());
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("the pod watch ended with {} of {pods} bound", bound.len()),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    SchedulerResult {
        nodes,
        pods,
        seconds: secs,
        pods_per_second: pods as f64 / secs,
    }
}

fn replica_set(replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "react"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "react"}},
            "template": {"metadata": {"labels": {"app": "react"}},
                "spec": {"containers": [{"name": "c", "image": "kiln/pause:1"}]}}}
    }))
    .expect("replicaset JSON")
}

/// Pod deleted → replacement created, `rounds` times: latency summary.
pub async fn controller_reaction(rounds: usize) -> Summary {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=replicaset".into(),
    ]))
    .await
    .expect("starting the controller-manager");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    sets.create(&PostParams::default(), &replica_set(5))
        .await
        .expect("creating the replicaset");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().labels("app=react");
    loop {
        let n = pods.list(&lp).await.expect("listing").items.len();
        if n == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut latencies = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let list = pods.list(&lp).await.expect("listing");
        let rv = list.metadata.resource_version.clone().unwrap_or_default();
        let victim = list
            .items
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.metadata.name.clone())
            .expect("a pod to delete");
        let mut stream = pods
            .watch(&WatchParams::default().labels("app=react").timeout(60), &rv)
            .await
            .expect("watching")
            .boxed();
        let t = Instant::now();
        pods.delete(&victim, &DeleteParams::default().grace_period(0))
            .await
            .expect("deleting");
        loop {
            match stream.try_next().await {
                Ok(Some(WatchEvent::Added(p))) if p.metadata.name.as_deref() != Some(&victim) => {
                    latencies.push(t.elapsed());
                    break;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => panic!("the watch ended before a replacement appeared"),
            }
        }
        // Let the controller settle (status update) before the next round.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    summarize(latencies, 0, Duration::ZERO)
}
