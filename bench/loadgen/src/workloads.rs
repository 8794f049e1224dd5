//! Workload controllers against their floor, on a running cluster, in one run:
//! - `jobs`: COUNT Jobs of one short pod each, against the floor of the same COUNT pods created directly
//!   (what the job controller adds on top of scheduling and starting pods). Each object is timed from the
//!   moment just before its create call to the watch seeing it finished (pod Succeeded / Job Complete);
//!   throughput is finished objects per second of wall time from the first create to the last finish.
//!   Creates are sent `inflight` at a time for both sides.
//! - `statefulset`: one OrderedReady StatefulSet of REPLICAS pods scaled up from nothing until
//!   readyReplicas = REPLICAS, against REPLICAS single pods created one after another, each once the one
//!   before it is Running (the floor of an ordered start).
//!
//! Objects carry the label `bench=workloads` and are deleted before and after each side.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, ListParams, PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::stats::{summarize, Summary};

const LABEL: &str = "bench=workloads";

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("kubeconfig {0}: {1}")]
    Kubeconfig(String, String),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("{what}: {done} of {count} finished within {waited:?}")]
    Timeout {
        what: &'static str,
        done: usize,
        count: usize,
        waited: Duration,
    },
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct JobsReport {
    /// Pods created directly: created → Succeeded.
    pub floor: Summary,
    /// Jobs: created → Complete.
    pub jobs: Summary,
    /// jobs/s over pods/s (the goal: ≥ 0.8).
    pub throughput_ratio: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct StatefulSetReport {
    pub replicas: usize,
    /// Replicas sequential single pods, first create → last Running.
    pub floor_seconds: f64,
    /// The StatefulSet, create → readyReplicas = replicas.
    pub statefulset_seconds: f64,
    /// StatefulSet time over floor time (the goal: ≤ 1.2).
    pub ratio: f64,
}

async fn client(kubeconfig: &str) -> Result<kube::Client, WorkloadError> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| WorkloadError::Kubeconfig(kubeconfig.into(), e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| WorkloadError::Kubeconfig(kubeconfig.into(), e.to_string()))?;
    Ok(kube::Client::try_from(cfg)?)
}

fn pod_spec(image: &str, command: &[&str], restart: &str) -> Value {
    json!({"terminationGracePeriodSeconds": 0, "restartPolicy": restart,
        "containers": [{"name": "c", "image": image, "command": command,
            "imagePullPolicy": "IfNotPresent"}]})
}

fn pod_succeeded(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
}

fn pod_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn job_complete(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

pub async fn jobs(
    kubeconfig: &str,
    count: usize,
    image: &str,
    inflight: usize,
) -> Result<JobsReport, WorkloadError> {
    let client = client(kubeconfig).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client, "default");
    clean(&pods, &jobs).await?;
    let floor = finish_all(
        &pods,
        count,
        inflight,
        "pods Succeeded",
        pod_succeeded,
        |i| {
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("floor-{i:04}"), "labels": {"bench": "workloads"}},
            "spec": pod_spec(image, &["true"], "Never")})
        },
    )
    .await?;
    clean(&pods, &jobs).await?;
    let done = finish_all(&jobs, count, inflight, "Jobs Complete", job_complete, |i| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("job-{i:04}"), "labels": {"bench": "workloads"}},
            "spec": {"template": {"metadata": {"labels": {"bench": "workloads"}},
                "spec": pod_spec(image, &["true"], "Never")}}})
    })
    .await?;
    clean(&pods, &jobs).await?;
    let throughput_ratio = if floor.per_second > 0.0 {
        done.per_second / floor.per_second
    } else {
        0.0
    };
    Ok(JobsReport {
        floor,
        jobs: done,
        throughput_ratio,
    })
}

/// How long `count` objects may take: 280 s, or 1 s each for more than that (a busy 2-core machine
/// starts 1 000 pods at well under 4 per second).
fn limit_secs(count: usize) -> u64 {
    (count as u64).max(280)
}

/// Creates `count` objects (`inflight` create calls at a time) while one watch times each from just
/// before its create to `finished`.
async fn finish_all<K>(
    api: &Api<K>,
    count: usize,
    inflight: usize,
    what: &'static str,
    finished: fn(&K) -> bool,
    object: impl Fn(usize) -> Value,
) -> Result<Summary, WorkloadError>
where
    K: Resource
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let lp = ListParams::default().labels(LABEL);
    let rv = api
        .list_metadata(&lp)
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = api
        .watch(
            &WatchParams::default()
                .labels(LABEL)
                .timeout(limit_secs(count) as u32 + 10),
            &rv,
        )
        .await?
        .boxed();
    let started = Instant::now();
    let (created_tx, mut created_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let objects: Vec<K> = (0..count)
        .map(|i| serde_json::from_value(object(i)).expect("benchmark object JSON"))
        .collect();
    let creator = {
        let api = api.clone();
        tokio::spawn(async move {
            let gate = Arc::new(Semaphore::new(inflight.max(1)));
            let mut calls = tokio::task::JoinSet::new();
            for obj in objects {
                let permit = gate.clone().acquire_owned().await.expect("semaphore open");
                let (api, tx) = (api.clone(), created_tx.clone());
                calls.spawn(async move {
                    let name = obj.meta().name.clone().unwrap_or_default();
                    let _ = tx.send((name, Instant::now()));
                    let r = api.create(&PostParams::default(), &obj).await;
                    drop(permit);
                    r.map(|_| ())
                });
            }
            let mut errors = 0;
            while let Some(r) = calls.join_next().await {
                errors += usize::from(!matches!(r, Ok(Ok(()))));
            }
            errors
        })
    };
    let mut created: HashMap<String, Instant> = HashMap::new();
    let mut done: HashMap<String, Instant> = HashMap::new();
    let limit = Duration::from_secs(limit_secs(count));
    while done.len() < count {
        let ev = tokio::select! {
            Some((name, at)) = created_rx.recv() => { created.insert(name, at); continue; }
            ev = tokio::time::timeout(limit.saturating_sub(started.elapsed()), stream.try_next()) => ev,
        };
        let obj = match ev {
            Ok(Ok(Some(WatchEvent::Added(o) | WatchEvent::Modified(o)))) => o,
            Ok(Ok(Some(_))) => continue,
            _ => {
                creator.abort();
                return Err(WorkloadError::Timeout {
                    what,
                    done: done.len(),
                    count,
                    waited: started.elapsed(),
                });
            }
        };
        let name = obj.meta().name.clone().unwrap_or_default();
        if finished(&obj) {
            done.entry(name).or_insert_with(Instant::now);
        }
    }
    let wall = started.elapsed();
    let errors = creator.await.unwrap_or(1);
    // Every finished object was created; its create instant may still sit in the channel.
    while let Ok((name, at)) = created_rx.try_recv() {
        created.insert(name, at);
    }
    let latencies = done
        .iter()
        .filter_map(|(n, at)| created.get(n).map(|c| at.saturating_duration_since(*c)))
        .collect();
    Ok(summarize(latencies, errors, wall))
}

pub async fn statefulset(
    kubeconfig: &str,
    replicas: usize,
    image: &str,
) -> Result<StatefulSetReport, WorkloadError> {
    let client = client(kubeconfig).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let sets: Api<StatefulSet> = Api::namespaced(client, "default");
    let sleep = ["sleep", "3600"];
    clean(&pods, &jobs).await?;

    // Floor: one pod after another, each once the one before it is Running.
    let t0 = Instant::now();
    for i in 0..replicas {
        let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("seq-{i:02}"), "labels": {"bench": "workloads"}},
            "spec": pod_spec(image, &sleep, "Always")}))
        .expect("pod JSON");
        let name = pod.metadata.name.clone().unwrap_or_default();
        let rv = pods.create(&PostParams::default(), &pod).await?;
        wait_for(
            &pods,
            &name,
            rv.metadata.resource_version,
            pod_running,
            "a sequential pod Running",
        )
        .await?;
    }
    let floor_seconds = t0.elapsed().as_secs_f64();
    clean(&pods, &jobs).await?;

    let _ = sets.delete("bench-sts", &DeleteParams::foreground()).await;
    let set: StatefulSet = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "bench-sts", "labels": {"bench": "workloads"}},
        "spec": {"replicas": replicas, "serviceName": "bench-sts", "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"bench": "workloads"}},
            "template": {"metadata": {"labels": {"bench": "workloads"}},
                "spec": pod_spec(image, &sleep, "Always")}}}))
    .expect("statefulset JSON");
    let t0 = Instant::now();
    let rv = sets.create(&PostParams::default(), &set).await?;
    let want = replicas as i32;
    let ready =
        move |s: &StatefulSet| s.status.as_ref().and_then(|st| st.ready_replicas) == Some(want);
    wait_for(
        &sets,
        "bench-sts",
        rv.metadata.resource_version,
        ready,
        "the StatefulSet ready",
    )
    .await?;
    let statefulset_seconds = t0.elapsed().as_secs_f64();
    sets.delete("bench-sts", &DeleteParams::background())
        .await?;
    clean(&pods, &jobs).await?;
    Ok(StatefulSetReport {
        replicas,
        floor_seconds,
        statefulset_seconds,
        ratio: statefulset_seconds / floor_seconds,
    })
}

/// Watches one object from `rv` until `done` holds.
async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    rv: Option<String>,
    done: impl Fn(&K) -> bool,
    what: &'static str,
) -> Result<(), WorkloadError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let t0 = Instant::now();
    let limit = Duration::from_secs(240);
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(250);
    let mut stream = api.watch(&wp, &rv.unwrap_or_default()).await?.boxed();
    loop {
        match tokio::time::timeout(limit.saturating_sub(t0.elapsed()), stream.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(o) | WatchEvent::Modified(o)))) if done(&o) => {
                return Ok(())
            }
            Ok(Ok(Some(_))) => {}
            _ => {
                return Err(WorkloadError::Timeout {
                    what,
                    done: 0,
                    count: 1,
                    waited: t0.elapsed(),
                })
            }
        }
    }
}

/// Deletes the benchmark's Jobs (with their pods) and pods, and waits until no pod is left, so one
/// side's teardown does not load the nodes while the other side runs.
async fn clean(pods: &Api<Pod>, jobs: &Api<Job>) -> Result<(), WorkloadError> {
    let lp = ListParams::default().labels(LABEL);
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    let _ = jobs.delete_collection(&background, &lp).await;
    let _ = pods
        .delete_collection(&DeleteParams::default().grace_period(1), &lp)
        .await;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(300) {
        if pods.list_metadata(&lp).await?.items.is_empty()
            && jobs.list_metadata(&lp).await?.items.is_empty()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
