//! The horizontal-pod-autoscaler's replica calculator, pure (upstream's `replica_calculator.go`
//! and the resource metrics client): pods grouped as ready, unready, missing or ignored, requests,
//! utilization, and the replica count a Utilization or AverageValue target asks for. Times are
//! milliseconds since the epoch, so tests pick the clock.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// `--horizontal-pod-autoscaler-tolerance`.
pub const TOLERANCE: f64 = 0.1;
/// `--horizontal-pod-autoscaler-cpu-initialization-period`.
pub const CPU_INITIALIZATION_PERIOD_MS: i64 = 5 * 60 * 1000;
/// `--horizontal-pod-autoscaler-initial-readiness-delay`.
pub const INITIAL_READINESS_DELAY_MS: i64 = 30 * 1000;

/// One pod's usage of the resource in milli-units, with when and over what window it was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodMetric {
    pub value: i64,
    pub timestamp: i64,
    pub window: i64,
}

pub type PodMetrics = BTreeMap<String, PodMetric>;

fn ms(t: &Time) -> i64 {
    t.0.as_millisecond()
}

fn parse_ms(text: &str) -> Option<i64> {
    text.parse::<Timestamp>().ok().map(|t| t.as_millisecond())
}

/// A quantity in milli-units (`MilliValue()`).
pub fn milli(q: &Quantity) -> Option<i64> {
    kiln_common::quantity::parse(&q.0)
        .ok()
        .and_then(|m| i64::try_from(m.0).ok())
}

/// PodMetrics items to each pod's usage of `resource` (all containers, or the one named); a pod
/// missing the resource in a counted container is left out, as upstream's metrics client does.
pub fn pod_metrics(items: &[Value], resource: &str, container: Option<&str>) -> PodMetrics {
    let mut out = PodMetrics::new();
    for item in items {
        let Some(name) = item["metadata"]["name"].as_str() else {
            continue;
        };
        let mut total = 0i64;
        let mut found = false;
        let mut missing = false;
        for c in item["containers"].as_array().into_iter().flatten() {
            if container.is_some_and(|want| c["name"] != want) {
                continue;
            }
            match c["usage"][resource]
                .as_str()
                .and_then(|q| milli(&Quantity(q.to_string())))
            {
                Some(v) => {
                    total += v;
                    found = true;
                }
                None => {
                    missing = true;
                    break;
                }
            }
        }
        if missing || !found {
            continue;
        }
        let window = item["window"]
            .as_str()
            .and_then(|w| kiln_common::duration::parse_duration(w).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        out.insert(
            name.to_string(),
            PodMetric {
                value: total,
                timestamp: item["timestamp"].as_str().and_then(parse_ms).unwrap_or(0),
                window,
            },
        );
    }
    out
}

/// Pods sorted by how the calculator treats them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Grouped {
    pub ready: usize,
    pub unready: BTreeSet<String>,
    pub missing: BTreeSet<String>,
    pub ignored: BTreeSet<String>,
}

/// Upstream's groupPods: deleted and failed pods are ignored, pending ones unready, pods without
/// a metric missing; for CPU a pod is unready while it is not Ready, or within the CPU
/// initialization period until one metric window has passed since it turned Ready, or after it
/// when it has never been Ready within the initial readiness delay.
pub fn group_pods(pods: &[Pod], metrics: &PodMetrics, cpu: bool, now: i64) -> Grouped {
    let mut g = Grouped::default();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
        if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
            g.ignored.insert(name);
            continue;
        }
        if phase == "Pending" {
            g.unready.insert(name);
            continue;
        }
        let Some(metric) = metrics.get(&name) else {
            g.missing.insert(name);
            continue;
        };
        if cpu {
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
            let start = status.and_then(|s| s.start_time.as_ref()).map(ms);
            let unready = match (ready, start) {
                (Some(c), Some(start)) => {
                    let transition = c.last_transition_time.as_ref().map(ms).unwrap_or(0);
                    if start + CPU_INITIALIZATION_PERIOD_MS > now {
                        c.status == "False" || metric.timestamp < transition + metric.window
                    } else {
                        c.status == "False" && start + INITIAL_READINESS_DELAY_MS > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(name);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// Each pod's request of `resource` in milli-units: its containers and restartable init
/// containers (or only `container`); a counted container without a request is an error.
pub fn pod_requests(
    pods: &[Pod],
    container: Option<&str>,
    resource: &str,
) -> Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(spec) = &pod.spec else {
            out.insert(name, 0);
            continue;
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut sum = 0i64;
        for c in spec.containers.iter().chain(sidecars) {
            if container.is_some_and(|want| want != c.name) {
                continue;
            }
            let request = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .and_then(milli);
            match request {
                Some(v) => sum += v,
                None => {
                    return Err(format!(
                        "missing request for {resource} in container {} of Pod {name}",
                        c.name
                    ))
                }
            }
        }
        out.insert(name, sum);
    }
    Ok(out)
}

/// (usage ÷ target ratio, utilization in percent of requests, average usage in milli-units).
pub fn utilization_ratio(
    metrics: &PodMetrics,
    requests: &BTreeMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut used, mut requested, mut n) = (0i64, 0i64, 0i64);
    for (name, m) in metrics {
        // Metrics of pods without a request are extraneous.
        if let Some(r) = requests.get(name) {
            used += m.value;
            requested += r;
            n += 1;
        }
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = (used * 100 / requested) as i32;
    Ok((
        utilization as f64 / target as f64,
        utilization,
        used / n.max(1),
    ))
}

/// (usage ÷ target ratio, average usage) for an AverageValue target.
pub fn usage_ratio(metrics: &PodMetrics, target: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let average = total / (metrics.len().max(1) as i64);
    (average as f64 / target as f64, average)
}

/// The replica count an average-utilization target asks for (upstream's GetResourceReplicas):
/// (replicas, utilization %, average usage).
pub fn resource_replicas(
    current: i32,
    target: i32,
    pods: &[Pod],
    mut metrics: PodMetrics,
    resource: &str,
    container: Option<&str>,
    now: i64,
) -> Result<(i32, i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let g = group_pods(pods, &metrics, resource == "cpu", now);
    for name in g.ignored.iter().chain(g.unready.iter()) {
        metrics.remove(name);
    }
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let requests = pod_requests(pods, container, resource)?;
    let (ratio, utilization, raw) = utilization_ratio(&metrics, &requests, target)?;
    let up_with_unready = !g.unready.is_empty() && ratio > 1.0;
    if !up_with_unready && g.missing.is_empty() {
        if (1.0 - ratio).abs() <= TOLERANCE {
            return Ok((current, utilization, raw));
        }
        return Ok(((ratio * g.ready as f64).ceil() as i32, utilization, raw));
    }
    if !g.missing.is_empty() {
        // Scaling down, a pod without a metric counts as using all it asked for (or the target,
        // above 100 %); scaling up, as using nothing.
        let fallback = i64::from(target.max(100));
        for name in &g.missing {
            if ratio < 1.0 {
                let request = requests.get(name).copied().unwrap_or(0);
                metrics.insert(name.clone(), zero_metric(request * fallback / 100));
            } else if ratio > 1.0 {
                metrics.insert(name.clone(), zero_metric(0));
            }
        }
    }
    if up_with_unready {
        for name in &g.unready {
            metrics.insert(name.clone(), zero_metric(0));
        }
    }
    let (new_ratio, _, _) = utilization_ratio(&metrics, &requests, target)?;
    Ok((
        settle(current, ratio, new_ratio, metrics.len()),
        utilization,
        raw,
    ))
}

fn zero_metric(value: i64) -> PodMetric {
    PodMetric {
        value,
        timestamp: 0,
        window: 0,
    }
}

/// The second pass of both calculators: keep the current count when the change is within the
/// tolerance or the missing/unready pods turn the direction around.
fn settle(current: i32, ratio: f64, new_ratio: f64, counted: usize) -> i32 {
    if (1.0 - new_ratio).abs() <= TOLERANCE
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return current;
    }
    let proposed = (new_ratio * counted as f64).ceil() as i32;
    if (new_ratio < 1.0 && proposed > current) || (new_ratio > 1.0 && proposed < current) {
        return current;
    }
    proposed
}

/// The replica count an AverageValue target asks for (upstream's GetRawResourceReplicas):
/// (replicas, average usage).
pub fn raw_resource_replicas(
    current: i32,
    target: i64,
    pods: &[Pod],
    mut metrics: PodMetrics,
    resource: &str,
    now: i64,
) -> Result<(i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let g = group_pods(pods, &metrics, resource == "cpu", now);
    for name in g.ignored.iter().chain(g.unready.iter()) {
        metrics.remove(name);
    }
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let (ratio, usage) = usage_ratio(&metrics, target);
    let up_with_unready = !g.unready.is_empty() && ratio > 1.0;
    if !up_with_unready && g.missing.is_empty() {
        if (1.0 - ratio).abs() <= TOLERANCE {
            return Ok((current, usage));
        }
        return Ok(((ratio * g.ready as f64).ceil() as i32, usage));
    }
    for name in &g.missing {
        let value = if ratio < 1.0 { target } else { 0 };
        metrics.insert(name.clone(), zero_metric(value));
    }
    if up_with_unready {
        for name in &g.unready {
            metrics.insert(name.clone(), zero_metric(0));
        }
    }
    let (new_ratio, _) = usage_ratio(&metrics, target);
    Ok((settle(current, ratio, new_ratio, metrics.len()), usage))
}
