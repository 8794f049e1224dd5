use super::*;
use crate::hpa_behavior::*;
use crate::hpa_calculator::*;
use k8s_openapi::api::autoscaling::v2::HPAScalingRules;
use serde_json::json;

const NOW: i64 = 1_800_000_000_000;
const MIN: i64 = 60_000;

/// A Running, Ready pod started `age_ms` ago (Ready since start), requesting `cpu` milli-cores.
fn pod(name: &str, cpu: &str, age_ms: i64) -> Pod {
    let t = |ms: i64| Timestamp::from_millisecond(ms).unwrap().to_string();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "app", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]},
        "status": {"phase": "Running", "startTime": t(NOW - age_ms),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": t(NOW - age_ms)}]},
    }))
    .unwrap()
}

fn with_phase(mut p: Pod, phase: &str) -> Pod {
    p.status.as_mut().unwrap().phase = Some(phase.into());
    p
}

fn unready(mut p: Pod) -> Pod {
    p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    p
}

fn item(name: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns"},
        "timestamp": Timestamp::from_millisecond(NOW - 5_000).unwrap().to_string(), "window": "10s",
        "containers": [{"name": "app", "usage": {"cpu": cpu, "memory": "10Mi"}}]})
}

fn metrics(v: &[(&str, i64)]) -> PodMetrics {
    v.iter()
        .map(|(n, m)| {
            (
                n.to_string(),
                PodMetric {
                    value: *m,
                    timestamp: NOW - 5_000,
                    window: 10_000,
                },
            )
        })
        .collect()
}

#[test]
fn pod_metrics_sum_containers_and_skip_incomplete_pods() {
    let items = vec![
        json!({"metadata": {"name": "a"}, "timestamp": "2027-01-15T08:00:00Z", "window": "10s",
            "containers": [{"name": "app", "usage": {"cpu": "100m"}}, {"name": "side", "usage": {"cpu": "250u"}}]}),
        json!({"metadata": {"name": "b"}, "containers": [{"name": "app", "usage": {"memory": "1Ki"}}]}),
    ];
    let m = pod_metrics(&items, "cpu", None);
    assert_eq!(m.len(), 1, "b has no cpu");
    assert_eq!(m["a"].value, 101, "100m + 250u, rounded up like MilliValue");
    assert_eq!(m["a"].window, 10_000);
    assert_eq!(pod_metrics(&items, "cpu", Some("side"))["a"].value, 1);
    assert!(pod_metrics(&items, "cpu", Some("none")).is_empty());
}

#[test]
fn replica_calculator_table() {
    struct Case {
        name: &'static str,
        current: i32,
        target: i32,
        pods: Vec<Pod>,
        metrics: PodMetrics,
        want: Result<(i32, i32), &'static str>,
    }
    let cases = vec![
        Case {
            name: "scale up by the ratio of the ready pods",
            current: 3,
            target: 50,
            pods: vec![pod("a", "100m", 10 * MIN), pod("b", "100m", 10 * MIN), pod("c", "100m", 10 * MIN)],
            metrics: metrics(&[("a", 100), ("b", 100), ("c", 100)]),
            want: Ok((6, 100)),
        },
        Case {
            name: "within the tolerance nothing changes",
            current: 2,
            target: 50,
            pods: vec![pod("a", "100m", 10 * MIN), pod("b", "100m", 10 * MIN)],
            metrics: metrics(&[("a", 54), ("b", 54)]),
            want: Ok((2, 54)),
        },
        Case {
            name: "scale down",
            current: 4,
            target: 50,
            pods: (0..4).map(|i| pod(["a", "b", "c", "d"][i], "100m", 10 * MIN)).collect(),
            metrics: metrics(&[("a", 10), ("b", 10), ("c", 10), ("d", 10)]),
            want: Ok((1, 10)),
        },
        Case {
            name: "a missing pod counts as using its request on a scale down",
            current: 3,
            target: 50,
            pods: vec![pod("a", "100m", 10 * MIN), pod("b", "100m", 10 * MIN), pod("c", "100m", 10 * MIN)],
            metrics: metrics(&[("a", 10), ("b", 10)]),
            // (10+10+100)/300 = 40 % → ratio 0.8 → ceil(0.8*3) = 3.
            want: Ok((3, 10)),
        },
        Case {
            name: "a missing pod counts as idle on a scale up",
            current: 3,
            target: 50,
            pods: vec![pod("a", "100m", 10 * MIN), pod("b", "100m", 10 * MIN), pod("c", "100m", 10 * MIN)],
            metrics: metrics(&[("a", 200), ("b", 200)]),
            // (200+200+0)/300 = 133 % → ratio 2.66 → ceil(2.66*3) = 8.
            want: Ok((8, 200)),
        },
        Case {
            name: "unready pods count as idle on a scale up",
            current: 2,
            target: 50,
            pods: vec![pod("a", "100m", 10 * MIN), unready(pod("b", "100m", MIN))],
            metrics: metrics(&[("a", 100), ("b", 300)]),
            // b is left out (unready): a alone → 200 %; with b at 0: 100/200 = 50 % → within tolerance.
            want: Ok((2, 100)),
        },
        Case {
            name: "a pod started within the cpu initialization period whose metric predates a window after Ready is unready",
            current: 2,
            target: 50,
            pods: vec![pod("a", "100m", 10 * MIN), pod("b", "100m", 6_000)],
            metrics: metrics(&[("a", 100), ("b", 500)]),
            want: Ok((2, 100)),
        },
        Case {
            name: "pending and failed pods do not count",
            current: 2,
            target: 50,
            pods: vec![pod("a", "100m", 10 * MIN), with_phase(pod("b", "100m", 10 * MIN), "Failed"), with_phase(pod("c", "100m", 0), "Pending")],
            metrics: metrics(&[("a", 300), ("b", 900)]),
            // a at 300 %; c (pending, unready) at 0 → 150 % → ratio 3 → ceil(3*2) = 6.
            want: Ok((6, 300)),
        },
        Case {
            name: "no pods",
            current: 1,
            target: 50,
            pods: vec![],
            metrics: metrics(&[]),
            want: Err("no pods returned by selector while calculating replica count"),
        },
        Case {
            name: "no metrics of ready pods",
            current: 1,
            target: 50,
            pods: vec![unready(pod("a", "100m", MIN))],
            metrics: metrics(&[("a", 100)]),
            want: Err("did not receive metrics for targeted pods (pods might be unready)"),
        },
    ];
    for c in cases {
        let got = resource_replicas(c.current, c.target, &c.pods, c.metrics, "cpu", None, NOW)
            .map(|(r, u, _)| (r, u));
        assert_eq!(got, c.want.map_err(String::from), "{}", c.name);
    }
}

#[test]
fn missing_requests_are_an_error() {
    let mut p = pod("a", "100m", 10 * MIN);
    p.spec.as_mut().unwrap().containers[0].resources = None;
    let err = resource_replicas(1, 50, &[p], metrics(&[("a", 10)]), "cpu", None, NOW).unwrap_err();
    assert_eq!(err, "missing request for cpu in container app of Pod a");
}

#[test]
fn average_value_targets() {
    let pods = vec![pod("a", "100m", 10 * MIN), pod("b", "100m", 10 * MIN)];
    // 300m average against 100m → 3× → 6 pods.
    assert_eq!(
        raw_resource_replicas(
            2,
            100,
            &pods,
            metrics(&[("a", 300), ("b", 300)]),
            "cpu",
            NOW
        ),
        Ok((6, 300))
    );
    assert_eq!(
        raw_resource_replicas(
            2,
            100,
            &pods,
            metrics(&[("a", 105), ("b", 100)]),
            "cpu",
            NOW
        ),
        Ok((2, 102))
    );
}

fn rules(window: i32, select: Select, policies: Vec<(bool, i32, i32)>) -> Rules {
    Rules {
        window_s: window,
        select,
        policies: policies
            .into_iter()
            .map(|(pods, value, period_s)| Policy {
                pods,
                value,
                period_s,
            })
            .collect(),
    }
}

#[test]
fn default_rules_are_upstreams() {
    let up = Rules::from_api(None, true);
    assert_eq!(
        up,
        rules(0, Select::Max, vec![(true, 4, 15), (false, 100, 15)])
    );
    let down = Rules::from_api(None, false);
    assert_eq!(down, rules(300, Select::Max, vec![(false, 100, 15)]));
    let given: HPAScalingRules = serde_json::from_value(
        json!({"stabilizationWindowSeconds": 5, "selectPolicy": "Disabled"}),
    )
    .unwrap();
    assert_eq!(
        Rules::from_api(Some(&given), false),
        rules(5, Select::Disabled, vec![(false, 100, 15)])
    );
}

#[test]
fn stabilization_keeps_the_highest_recent_recommendation_down() {
    let up = Rules::from_api(None, true);
    let down = rules(60, Select::Max, vec![(false, 100, 15)]);
    let mut h = History::default();
    h.record_initial(5, NOW);
    assert_eq!(h.stabilize(5, 2, &up, &down, NOW + 10_000).0, 5);
    // After the window the low recommendation wins.
    assert_eq!(h.stabilize(5, 2, &up, &down, NOW + 61_000).0, 2);
    // Scaling up is immediate with a zero up window.
    let (r, reason, _) = h.stabilize(2, 9, &up, &down, NOW + 62_000);
    assert_eq!((r, reason), (9, "ScaleUpStabilized"));
    // Legacy: five minutes.
    let mut legacy = History::default();
    legacy.record_initial(4, NOW);
    assert_eq!(legacy.stabilize_legacy(1, NOW + 60_000), 4);
    assert_eq!(legacy.stabilize_legacy(1, NOW + 301_000 + 60_000), 1);
}

#[test]
fn policies_limit_the_rate() {
    let up = rules(0, Select::Max, vec![(true, 4, 15), (false, 100, 15)]);
    let down = rules(0, Select::Max, vec![(true, 1, 60)]);
    let mut h = History::default();
    // 2 → 20 wanted: Max of +4 pods and +100 % → 6.
    assert_eq!(
        h.limit_rate(2, 20, 1, 50, &up, &down, NOW),
        (
            6,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate"
        )
    );
    assert_eq!(h.limit_rate(2, 20, 1, 5, &up, &down, NOW).0, 5);
    assert_eq!(
        h.limit_rate(2, 20, 1, 5, &up, &down, NOW).1,
        "TooManyReplicas"
    );
    let min_up = Rules {
        select: Select::Min,
        ..up.clone()
    };
    assert_eq!(h.limit_rate(10, 100, 1, 500, &min_up, &down, NOW).0, 14);
    // One pod per minute down, counting what was already removed in the period.
    assert_eq!(
        h.limit_rate(6, 1, 1, 10, &up, &down, NOW),
        (
            5,
            "ScaleDownLimit",
            "the desired replica count is decreasing faster than the maximum scale rate"
        )
    );
    h.store_scale_event(Some((&up, &down)), 6, 5, NOW);
    assert_eq!(
        h.limit_rate(5, 1, 1, 10, &up, &down, NOW + 30_000).0,
        5,
        "the minute's pod is used"
    );
    assert_eq!(h.limit_rate(5, 1, 1, 10, &up, &down, NOW + 61_000).0, 4);
    let disabled = rules(0, Select::Disabled, vec![(true, 1, 60)]);
    assert_eq!(h.limit_rate(5, 1, 1, 10, &up, &disabled, NOW).0, 5);
    assert_eq!(
        h.limit_rate(5, 5, 1, 10, &up, &down, NOW).1,
        "DesiredWithinRange"
    );
}

#[test]
fn legacy_limits() {
    assert_eq!(limit_legacy(1, 10, 1, 10).0, 4);
    assert_eq!(limit_legacy(3, 10, 1, 10).0, 6);
    assert_eq!(
        limit_legacy(3, 10, 1, 5),
        (
            5,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count"
        )
    );
    assert_eq!(
        limit_legacy(3, 0, 2, 5),
        (
            2,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count"
        )
    );
}

fn hpa(behavior: Value) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "generation": 3},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
            "behavior": behavior},
    }))
    .unwrap()
}

fn scale(replicas: i32) -> ScaleView {
    ScaleView {
        spec_replicas: replicas,
        status_replicas: replicas,
        selector: "app=web".into(),
    }
}

fn condition<'a>(o: &'a Outcome, t: &str) -> (&'a str, &'a str, &'a str) {
    let c = o
        .status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == t)
        .unwrap();
    (
        c.status.as_str(),
        c.reason.as_deref().unwrap(),
        c.message.as_deref().unwrap(),
    )
}

#[test]
fn plan_scales_up_with_upstreams_reason_status_and_conditions() {
    let pods = vec![pod("a", "50m", 10 * MIN)];
    let items = vec![item("a", "100m")];
    let observed = Observed {
        pods: Ok(&pods),
        metrics: Ok(&items),
    };
    let mut h = History::default();
    let o = plan(&hpa(Value::Null), &scale(1), &observed, &mut h, NOW);
    // 200 % of request against 50 % → 4 (legacy limit: max(2×1, 4)).
    assert_eq!(o.rescale, Some(4));
    assert_eq!(
        o.reason,
        "cpu resource utilization (percentage of request) above target"
    );
    assert_eq!(o.status.desired_replicas, 4);
    assert_eq!(o.status.current_replicas, Some(1));
    assert_eq!(o.status.observed_generation, Some(3));
    assert!(o.status.last_scale_time.is_some());
    let m = &o.status.current_metrics.as_ref().unwrap()[0];
    let current = &m.resource.as_ref().unwrap().current;
    assert_eq!(current.average_utilization, Some(200));
    assert_eq!(current.average_value, Some(Quantity("100m".into())));
    assert_eq!(
        condition(&o, "AbleToScale"),
        (
            "True",
            "ReadyForNewScale",
            "recommended size matches current size"
        )
    );
    assert_eq!(condition(&o, "ScalingActive"), ("True", "ValidMetricFound",
        "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"));
    assert_eq!(
        condition(&o, "ScalingLimited"),
        (
            "False",
            "DesiredWithinRange",
            "the desired count is within the acceptable range"
        )
    );
    assert!(o.events.is_empty());
}

#[test]
fn plan_scales_down_after_the_window_of_its_behavior() {
    let pods: Vec<Pod> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| pod(n, "50m", 10 * MIN))
        .collect();
    let items: Vec<Value> = ["a", "b", "c", "d"].iter().map(|n| item(n, "1m")).collect();
    let observed = Observed {
        pods: Ok(&pods),
        metrics: Ok(&items),
    };
    let behavior = json!({"scaleDown": {"stabilizationWindowSeconds": 30}});
    let mut h = History::default();
    let first = plan(&hpa(behavior.clone()), &scale(4), &observed, &mut h, NOW);
    assert_eq!(
        first.rescale, None,
        "the initial recommendation of 4 holds for the window"
    );
    assert_eq!(first.status.desired_replicas, 4);
    assert_eq!(condition(&first, "AbleToScale").1, "ScaleDownStabilized");
    let later = plan(&hpa(behavior), &scale(4), &observed, &mut h, NOW + 31_000);
    assert_eq!(later.rescale, Some(1));
    assert_eq!(later.reason, "All metrics below target");
}

#[test]
fn plan_reports_missing_metrics() {
    let pods = vec![pod("a", "50m", 10 * MIN)];
    let items: Vec<Value> = vec![];
    let observed = Observed {
        pods: Ok(&pods),
        metrics: Ok(&items),
    };
    let o = plan(
        &hpa(Value::Null),
        &scale(2),
        &observed,
        &mut History::default(),
        NOW,
    );
    assert_eq!(o.rescale, None);
    let msg = "failed to get cpu resource metric value: failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API";
    assert_eq!(
        condition(&o, "ScalingActive"),
        (
            "False",
            "FailedGetResourceMetric",
            format!("the HPA was unable to compute the replica count: {msg}").as_str()
        )
    );
    assert_eq!(
        o.events[0],
        Event {
            warning: true,
            reason: "FailedGetResourceMetric".into(),
            message: msg.into()
        }
    );
    assert_eq!(o.events[1].reason, "FailedComputeMetricsReplicas");
    assert_eq!(
        o.events[1].message,
        format!("invalid metrics (1 invalid out of 1), first error is: {msg}")
    );
    assert!(o.error.is_some());
    assert_eq!(o.status.current_replicas, Some(2));
}

#[test]
fn plan_bounds_and_disabled_scaling() {
    let pods = vec![pod("a", "50m", 10 * MIN)];
    let items = vec![item("a", "25m")];
    let observed = Observed {
        pods: Ok(&pods),
        metrics: Ok(&items),
    };
    let o = plan(
        &hpa(Value::Null),
        &scale(9),
        &observed,
        &mut History::default(),
        NOW,
    );
    assert_eq!(
        (o.rescale, o.reason.as_str()),
        (Some(5), "Current number of replicas above Spec.MaxReplicas")
    );
    let o = plan(
        &hpa(Value::Null),
        &scale(0),
        &observed,
        &mut History::default(),
        NOW,
    );
    assert_eq!(o.rescale, None);
    assert_eq!(
        condition(&o, "ScalingActive"),
        (
            "False",
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero"
        )
    );
    let mut no_selector = scale(1);
    no_selector.selector.clear();
    let o = plan(
        &hpa(Value::Null),
        &no_selector,
        &observed,
        &mut History::default(),
        NOW,
    );
    assert_eq!(
        condition(&o, "ScalingActive"),
        (
            "False",
            "InvalidSelector",
            "the HPA target's scale is missing a selector"
        )
    );
    assert_eq!(o.events[0].reason, "SelectorRequired");
}

#[test]
fn conditions_keep_their_transition_time_while_the_status_holds() {
    let t0 = Time(Timestamp::from_millisecond(NOW).unwrap());
    let t1 = Time(Timestamp::from_millisecond(NOW + 1000).unwrap());
    let mut cs = Vec::new();
    set_condition(&mut cs, "AbleToScale", true, "A", "a", &t0);
    set_condition(&mut cs, "AbleToScale", true, "B", "b", &t1);
    assert_eq!(cs[0].last_transition_time, Some(t0.clone()));
    assert_eq!(cs[0].reason.as_deref(), Some("B"));
    set_condition(&mut cs, "AbleToScale", false, "C", "c", &t1);
    assert_eq!(cs[0].last_transition_time, Some(t1));
}
