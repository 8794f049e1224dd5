//! The horizontal-pod-autoscaler's decisions, pure (upstream's `podautoscaler` package): given
//! the HPA, the target's Scale, the pods its selector picks and their PodMetrics, [`plan`] says
//! what to scale to, why, what to report (status and conditions) and which events to send. The
//! replica calculator is `hpa_calculator.rs`, stabilization and policies `hpa_behavior.rs`;
//! `hpa.rs` does the I/O. Times are milliseconds since the epoch, so tests pick the clock.

use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
    MetricSpec, MetricStatus, MetricTarget, MetricValueStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::hpa_behavior::{limit_legacy, History, Rules};
use crate::hpa_calculator::{milli, pod_metrics, raw_resource_replicas, resource_replicas};
use k8s_openapi::api::core::v1::Pod;

/// setCondition: the transition time changes only with the status.
pub fn set_condition(
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
) {
    let status = if status { "True" } else { "False" };
    let i = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(HorizontalPodAutoscalerCondition {
                type_: type_.into(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[i];
    if c.status != status {
        c.last_transition_time = Some(now.clone());
    }
    c.status = status.into();
    c.reason = Some(reason.into());
    c.message = Some(message.into());
}

/// The target's Scale as the plan needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleView {
    pub spec_replicas: i32,
    pub status_replicas: i32,
    pub selector: String,
}

/// What the sync found about the target's pods and their metrics (already filtered by the
/// scale's selector); an Err is the failed call's message.
pub struct Observed<'a> {
    pub pods: Result<&'a [Pod], String>,
    pub metrics: Result<&'a [Value], String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// The outcome of one sync.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Some(n): write n to the target's scale.
    pub rescale: Option<i32>,
    /// Why, for the SuccessfulRescale/FailedRescale event.
    pub reason: String,
    pub status: HorizontalPodAutoscalerStatus,
    pub events: Vec<Event>,
    /// The error the sync ends with (metrics could not be computed), after status is written.
    pub error: Option<String>,
}

fn warning(events: &mut Vec<Event>, reason: &str, message: String) {
    events.push(Event {
        warning: true,
        reason: reason.into(),
        message,
    });
}

/// One metric's proposal: (replicas, metric name, its status) or (condition reason, error).
fn compute_metric(
    spec: &MetricSpec,
    scale: &ScaleView,
    observed: &Observed,
    now: i64,
) -> Result<(i32, String, MetricStatus), (String, String)> {
    let (name, container, target, kind) = match spec.type_.as_str() {
        "Resource" => match &spec.resource {
            Some(r) => (r.name.clone(), None, &r.target, "Resource"),
            None => return Err(invalid_source(spec)),
        },
        "ContainerResource" => match &spec.container_resource {
            Some(r) => (
                r.name.clone(),
                Some(r.container.clone()),
                &r.target,
                "ContainerResource",
            ),
            None => return Err(invalid_source(spec)),
        },
        "Pods" | "Object" | "External" => {
            let (reason, what, api) = match spec.type_.as_str() {
                "Pods" => ("FailedGetPodsMetric", "pods", "custom"),
                "Object" => ("FailedGetObjectMetric", "object", "custom"),
                _ => ("FailedGetExternalMetric", "external", "external"),
            };
            return Err((
                reason.into(),
                format!("failed to get {what} metric value: unable to fetch metrics from {api} metrics API: the server could not find the requested resource"),
            ));
        }
        other => {
            return Err((
                "InvalidMetricSourceType".into(),
                format!("unknown metric source type \"{other}\""),
            ))
        }
    };
    let (reason, what) = if kind == "Resource" {
        ("FailedGetResourceMetric", "resource")
    } else {
        ("FailedGetContainerResourceMetric", "container")
    };
    let fail = |e: String| {
        (
            reason.to_string(),
            format!("failed to get {name} {what} metric value: {e}"),
        )
    };
    let (value, status) = resource_value(
        &name,
        container.as_deref(),
        target,
        kind,
        scale,
        observed,
        now,
    )
    .map_err(fail)?;
    let mut ms = MetricStatus {
        type_: kind.into(),
        ..Default::default()
    };
    if kind == "Resource" {
        ms.resource = Some(k8s_openapi::api::autoscaling::v2::ResourceMetricStatus {
            name: name.clone(),
            current: status,
        });
    } else {
        ms.container_resource = Some(
            k8s_openapi::api::autoscaling::v2::ContainerResourceMetricStatus {
                name: name.clone(),
                container: container.clone().unwrap_or_default(),
                current: status,
            },
        );
    }
    let metric_name = match (target.average_value.is_some(), kind) {
        (true, _) => format!("{name} resource"),
        (false, "Resource") => format!("{name} resource utilization (percentage of request)"),
        (false, _) => {
            format!("{name} container resource utilization (percentage of request)")
        }
    };
    Ok((value, metric_name, ms))
}

fn invalid_source(spec: &MetricSpec) -> (String, String) {
    (
        "InvalidMetricSourceType".into(),
        format!(
            "unknown metric source type \"{}\": the source is not set",
            spec.type_
        ),
    )
}

fn resource_value(
    name: &str,
    container: Option<&str>,
    target: &MetricTarget,
    _kind: &str,
    scale: &ScaleView,
    observed: &Observed,
    now: i64,
) -> Result<(i32, MetricValueStatus), String> {
    let items = observed.metrics.as_ref().map_err(|e| {
        format!("failed to get {name} utilization: unable to get metrics for resource {name}: unable to fetch metrics from resource metrics API: {e}")
    })?;
    let metrics = pod_metrics(items, name, container);
    if items.is_empty() {
        return Err(format!("failed to get {name} utilization: unable to get metrics for resource {name}: no metrics returned from resource metrics API"));
    }
    let pods = observed
        .pods
        .as_ref()
        .map_err(|e| format!("failed to get {name} utilization: unable to get pods while calculating replica count: {e}"))?;
    let current = scale.spec_replicas;
    if let Some(avg) = &target.average_value {
        let target = milli(avg).unwrap_or(0).max(1);
        let (replicas, usage) = raw_resource_replicas(current, target, pods, metrics, name, now)
            .map_err(|e| format!("failed to get {name} utilization: {e}"))?;
        return Ok((
            replicas,
            MetricValueStatus {
                average_value: Some(milli_quantity(usage)),
                ..Default::default()
            },
        ));
    }
    let Some(utilization) = target.average_utilization else {
        return Err("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into());
    };
    let (replicas, percent, raw) =
        resource_replicas(current, utilization, pods, metrics, name, container, now)
            .map_err(|e| format!("failed to get {name} utilization: {e}"))?;
    Ok((
        replicas,
        MetricValueStatus {
            average_utilization: Some(percent),
            average_value: Some(milli_quantity(raw)),
            ..Default::default()
        },
    ))
}

/// `resource.NewMilliQuantity(v, DecimalSI)` as it serializes.
pub fn milli_quantity(v: i64) -> Quantity {
    Quantity(kiln_common::quantity::format(
        kiln_common::quantity::Milli(i128::from(v)),
        false,
    ))
}

/// The whole decision of one sync, after the target's scale was read.
pub fn plan(
    hpa: &HorizontalPodAutoscaler,
    scale: &ScaleView,
    observed: &Observed,
    history: &mut History,
    now: i64,
) -> Outcome {
    let now_time = Time(Timestamp::from_millisecond(now).unwrap_or(Timestamp::UNIX_EPOCH));
    let spec = hpa.spec.clone().unwrap_or_default();
    let mut status = hpa.status.clone().unwrap_or_default();
    status.observed_generation = hpa.metadata.generation;
    let mut conditions = status.conditions.take().unwrap_or_default();
    let mut events = Vec::new();
    set_condition(
        &mut conditions,
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
        &now_time,
    );
    let current = scale.spec_replicas;
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    history.record_initial(current, now);
    let mut desired = 0;
    let mut reason = String::new();
    let mut rescale = true;
    let mut metric_statuses: Option<Vec<MetricStatus>> = None;
    let mut error = None;
    if current == 0 && min != 0 {
        set_condition(
            &mut conditions,
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero",
            &now_time,
        );
        rescale = false;
    } else if current > max {
        reason = "Current number of replicas above Spec.MaxReplicas".into();
        desired = max;
    } else if current < min {
        reason = "Current number of replicas below Spec.MinReplicas".into();
        desired = min;
    } else {
        let metrics = spec.metrics.clone().unwrap_or_default();
        match compute_for_metrics(
            &metrics,
            scale,
            observed,
            now,
            &mut conditions,
            &mut events,
            &now_time,
        ) {
            Err((statuses, e)) => {
                status.current_replicas = Some(current);
                status.current_metrics = statuses;
                warning(&mut events, "FailedComputeMetricsReplicas", e.clone());
                status.conditions = Some(conditions);
                return Outcome {
                    rescale: None,
                    reason: String::new(),
                    status,
                    events,
                    error: Some(format!(
                        "failed to compute desired number of replicas based on listed metrics: {e}"
                    )),
                };
            }
            Ok((proposal, metric, statuses, partial)) => {
                error = partial;
                metric_statuses = statuses;
                let mut metric_name = String::new();
                if proposal > desired {
                    desired = proposal;
                    metric_name = metric;
                }
                if desired > current {
                    reason = format!("{metric_name} above target");
                }
                if desired < current {
                    reason = "All metrics below target".into();
                }
                desired = match &spec.behavior {
                    None => {
                        let stabilized = history.stabilize_legacy(desired, now);
                        if stabilized != desired {
                            set_condition(&mut conditions, "AbleToScale", true, "ScaleDownStabilized",
                                "recent recommendations were higher than current one, applying the highest recent recommendation", &now_time);
                        } else {
                            set_condition(
                                &mut conditions,
                                "AbleToScale",
                                true,
                                "ReadyForNewScale",
                                "recommended size matches current size",
                                &now_time,
                            );
                        }
                        let (limited, r, m) = limit_legacy(current, stabilized, min, max);
                        set_condition(
                            &mut conditions,
                            "ScalingLimited",
                            limited != stabilized,
                            r,
                            m,
                            &now_time,
                        );
                        limited
                    }
                    Some(b) => {
                        let up = Rules::from_api(b.scale_up.as_ref(), true);
                        let down = Rules::from_api(b.scale_down.as_ref(), false);
                        let (stabilized, r, m) =
                            history.stabilize(current, desired, &up, &down, now);
                        if stabilized != desired {
                            set_condition(&mut conditions, "AbleToScale", true, r, m, &now_time);
                        } else {
                            set_condition(
                                &mut conditions,
                                "AbleToScale",
                                true,
                                "ReadyForNewScale",
                                "recommended size matches current size",
                                &now_time,
                            );
                        }
                        let (limited, r, m) =
                            history.limit_rate(current, stabilized, min, max, &up, &down, now);
                        set_condition(
                            &mut conditions,
                            "ScalingLimited",
                            limited != stabilized,
                            r,
                            m,
                            &now_time,
                        );
                        limited
                    }
                };
                rescale = desired != current;
            }
        }
    }
    if rescale {
        let rules = spec.behavior.as_ref().map(|b| {
            (
                Rules::from_api(b.scale_up.as_ref(), true),
                Rules::from_api(b.scale_down.as_ref(), false),
            )
        });
        history.store_scale_event(rules.as_ref().map(|(u, d)| (u, d)), current, desired, now);
        status.last_scale_time = Some(now_time.clone());
    } else {
        desired = current;
    }
    status.current_replicas = Some(current);
    status.desired_replicas = desired;
    status.current_metrics = metric_statuses;
    status.conditions = Some(conditions);
    Outcome {
        rescale: rescale.then_some(desired),
        reason,
        status,
        events,
        error,
    }
}

type MetricsResult = Result<
    (i32, String, Option<Vec<MetricStatus>>, Option<String>),
    (Option<Vec<MetricStatus>>, String),
>;

/// computeReplicasForMetrics: the largest proposal of the valid metrics; an error when all fail,
/// or some fail and the rest would scale down.
fn compute_for_metrics(
    metrics: &[MetricSpec],
    scale: &ScaleView,
    observed: &Observed,
    now: i64,
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    events: &mut Vec<Event>,
    now_time: &Time,
) -> MetricsResult {
    if scale.selector.is_empty() {
        let msg = "selector is required".to_string();
        warning(events, "SelectorRequired", msg.clone());
        set_condition(
            conditions,
            "ScalingActive",
            false,
            "InvalidSelector",
            "the HPA target's scale is missing a selector",
            now_time,
        );
        return Err((None, msg));
    }
    let mut statuses = vec![MetricStatus::default(); metrics.len()];
    let (mut replicas, mut name) = (0, String::new());
    let mut invalid = 0;
    let mut first: Option<(String, String)> = None;
    for (i, spec) in metrics.iter().enumerate() {
        match compute_metric(spec, scale, observed, now) {
            Ok((proposal, metric, st)) => {
                statuses[i] = st;
                if replicas == 0 || proposal > replicas {
                    replicas = proposal;
                    name = metric;
                }
            }
            Err((reason, message)) => {
                warning(events, &reason, message.clone());
                if first.is_none() {
                    first = Some((reason, message));
                }
                invalid += 1;
            }
        }
    }
    let statuses = (!statuses.is_empty()).then_some(statuses);
    let err = first.as_ref().map(|(_, m)| {
        format!(
            "invalid metrics ({invalid} invalid out of {}), first error is: {m}",
            metrics.len()
        )
    });
    if invalid >= metrics.len() || (invalid > 0 && replicas < scale.spec_replicas) {
        if let Some((reason, message)) = &first {
            set_condition(
                conditions,
                "ScalingActive",
                false,
                reason,
                &format!("the HPA was unable to compute the replica count: {message}"),
                now_time,
            );
        }
        return Err((statuses, err.unwrap_or_else(|| "no metrics".into())));
    }
    set_condition(
        conditions,
        "ScalingActive",
        true,
        "ValidMetricFound",
        &format!("the HPA was able to successfully calculate a replica count from {name}"),
        now_time,
    );
    Ok((replicas, name, statuses, err))
}

#[cfg(test)]
#[path = "hpa_plan_tests.rs"]
mod tests;
