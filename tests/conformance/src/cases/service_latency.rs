//! sig-network "Service endpoints latency" (test/e2e/network/service_latency.go): how long from
//! creating a Service until its Endpoints name an address, seen the way kube-proxy sees them —
//! through one watch of the namespace's Endpoints.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, ReplicationController, Service};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{case, Case};
use crate::ctx::{from_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};

pub const CASES: &[Case] = &[case!(
    "[sig-network] Service endpoints latency should not be very high [Conformance]",
    "svc-latency",
    endpoints_latency
)];

/// upstream's thresholds and sample sizes ("very generous criteria").
const LIMIT_MEDIAN: Duration = Duration::from_secs(20);
const LIMIT_TAIL: Duration = Duration::from_secs(50);
const TOTAL_TRIALS: usize = 200;
const PARALLEL_TRIALS: usize = 15;
const MIN_SAMPLE: usize = 100;
const ACCEPTABLE_FAILURE_RATIO: f64 = 0.05;
/// How long one trial waits for its endpoints before it counts as an error (upstream waits until
/// the whole test times out; a bound keeps a lost event from hanging the case).
const TRIAL_WAIT: Duration = Duration::from_secs(120);
const RC: &str = "svc-latency-rc";

/// Service endpoint latency, thresholds: with one pause pod running, 200 Services (15 at a time)
/// selecting it are created and the time until each one's Endpoints show an address is measured;
/// at most 5% of the trials MAY fail, at least 100 MUST succeed, the median MUST NOT exceed 20 s
/// and the 99th percentile MUST NOT exceed 50 s.
async fn endpoints_latency(ctx: &Ctx) -> CaseResult {
    run_rc(ctx).await?;
    let seen = EndpointsSeen::start(ctx);
    // upstream throws the first trial away: it makes sure the pod's readiness has propagated.
    single_latency(ctx, &seen).await?;

    let results: Vec<CaseResult<Duration>> = stream::iter(0..TOTAL_TRIALS)
        .map(|_| single_latency(ctx, &seen))
        .buffer_unordered(PARALLEL_TRIALS)
        .collect()
        .await;
    seen.stop();
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    let mut durations: Vec<Duration> = results.into_iter().filter_map(Result::ok).collect();
    durations.sort();
    judge(&durations, &errors)
}

/// The verdict on the measured durations (sorted) and the trials' errors, as upstream words it.
fn judge(sorted: &[Duration], errors: &[String]) -> CaseResult {
    let mut failing = Vec::new();
    let ratio = errors.len() as f64 / TOTAL_TRIALS as f64;
    if ratio > ACCEPTABLE_FAILURE_RATIO {
        failing.push(format!(
            "Not all RC/pod/service trials succeeded: error ratio {ratio} is higher than the acceptable ratio {ACCEPTABLE_FAILURE_RATIO} (first: {})",
            errors.first().map_or("", String::as_str)
        ));
    }
    let n = sorted.len();
    if n < MIN_SAMPLE {
        failing.push(format!("Did not get a good sample size: {n}"));
    }
    if n < 2 {
        failing.push("Less than two runs succeeded; aborting.".into());
        return Err(CaseError::Failed(failing.join("; ")));
    }
    let percentile = |p: usize| sorted[(n * p / 100).min(n - 1)];
    let (p50, p90, p99) = (percentile(50), percentile(90), percentile(99));
    if p50 > LIMIT_MEDIAN {
        failing.push(format!(
            "Median latency should be less than {LIMIT_MEDIAN:?}"
        ));
    }
    if p99 > LIMIT_TAIL {
        failing.push(format!(
            "Tail (99 percentile) latency should be less than {LIMIT_TAIL:?}"
        ));
    }
    if failing.is_empty() {
        tracing::info!(?p50, ?p90, ?p99, samples = n, "service endpoints latency");
        return Ok(());
    }
    Err(CaseError::Failed(format!(
        "{}; 50, 90, 99 percentiles: {p50:?} {p90:?} {p99:?}",
        failing.join("; ")
    )))
}

/// e2erc.RunRC: one pause replica labelled `name=svc-latency-rc`, running.
async fn run_rc(ctx: &Ctx) -> CaseResult {
    let rc: ReplicationController = from_json(json!({
        "metadata": {"name": RC},
        "spec": {
            "replicas": 1,
            "selector": {"name": RC},
            "template": {
                "metadata": {"labels": {"name": RC}},
                "spec": {"containers": [{"name": RC, "image": ctx.images().pause()}]}
            }
        }
    }))?;
    let rcs: Api<ReplicationController> = ctx.api();
    rcs.create(&PostParams::default(), &rc).await?;
    ctx.wait(&format!("{RC} ready"), POD_START, || async {
        let rc = rcs.get(RC).await?;
        let ready = rc.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        Ok(if ready >= 1 {
            Ok(())
        } else {
            Err(format!("{ready} ready"))
        })
    })
    .await
}

/// singleServiceLatency: create a Service selecting the pod; the time until the watch has seen
/// its Endpoints with an address.
async fn single_latency(ctx: &Ctx, seen: &EndpointsSeen) -> CaseResult<Duration> {
    let svc: Service = from_json(json!({
        "metadata": {"generateName": "latency-svc-"},
        "spec": {
            "ports": [{"protocol": "TCP", "port": 80}],
            "selector": {"name": RC},
            "type": "ClusterIP",
            "sessionAffinity": "None"
        }
    }))?;
    let start = Instant::now();
    let created = ctx
        .api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    let name = created.metadata.name.unwrap_or_default();
    match tokio::time::timeout(TRIAL_WAIT, seen.first_seen(&name)).await {
        Ok(at) => Ok(at.saturating_duration_since(start)),
        Err(_) => Err(CaseError::Failed(format!(
            "never got a result for endpoint {name}"
        ))),
    }
}

/// The single endpoint watcher: when each Endpoints object was first seen with an address (kept
/// even when it arrives before anyone asks for it, as upstream's querier does).
struct EndpointsSeen {
    first: Arc<Mutex<HashMap<String, Instant>>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl EndpointsSeen {
    fn start(ctx: &Ctx) -> EndpointsSeen {
        let first = Arc::new(Mutex::new(HashMap::new()));
        let changed = Arc::new(Notify::new());
        let api: Api<Endpoints> = ctx.api();
        let (f, c) = (first.clone(), changed.clone());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(ev) = events.next().await {
                let ep = match ev {
                    Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => e,
                    _ => continue,
                };
                if !has_address(&ep) {
                    continue;
                }
                if let Some(name) = ep.metadata.name {
                    f.lock()
                        .expect("seen endpoints")
                        .entry(name)
                        .or_insert_with(Instant::now);
                    c.notify_waiters();
                }
            }
        });
        EndpointsSeen {
            first,
            changed,
            task,
        }
    }

    async fn first_seen(&self, name: &str) -> Instant {
        loop {
            // Registered before the check, so a notification between the two is not lost.
            let notified = self.changed.notified();
            if let Some(at) = self.first.lock().expect("seen endpoints").get(name) {
                return *at;
            }
            notified.await;
        }
    }

    fn stop(&self) {
        self.task.abort();
    }
}

/// upstream counts an Endpoints object once its first subset has an address.
fn has_address(ep: &Endpoints) -> bool {
    ep.subsets
        .as_ref()
        .and_then(|s| s.first())
        .and_then(|s| s.addresses.as_ref())
        .is_some_and(|a| !a.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|s| Duration::from_secs(*s)).collect()
    }

    #[test]
    fn the_verdict_follows_upstreams_limits() {
        assert!(judge(&secs(&[1; 150]), &[]).is_ok());
        // A slow median fails.
        let mut slow = secs(&[1; 50]);
        slow.extend(secs(&[30; 100]));
        let err = judge(&slow, &[]).unwrap_err().to_string();
        assert!(err.contains("Median latency"), "{err}");
        // Too few samples fail even when fast.
        let err = judge(&secs(&[1; 50]), &[]).unwrap_err().to_string();
        assert!(err.contains("sample size"), "{err}");
        // More than 5% errors fail.
        let errors = vec!["boom".to_string(); 11];
        let err = judge(&secs(&[1; 189]), &errors).unwrap_err().to_string();
        assert!(err.contains("error ratio"), "{err}");
        assert!(judge(&secs(&[1; 190]), &errors[..10]).is_ok());
    }
}
