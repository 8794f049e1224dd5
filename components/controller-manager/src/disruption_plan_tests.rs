use serde_json::{json, Value};

use super::*;

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn pdb(spec: Value, status: Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "foo", "namespace": "ns", "generation": 3},
        "spec": spec, "status": status
    }))
    .unwrap()
}

fn min_available(v: Value) -> PodDisruptionBudget {
    pdb(
        json!({"minAvailable": v, "selector": {"matchLabels": {"foo": "bar"}}}),
        json!({}),
    )
}

fn pod(name: &str, ready: bool, owner: Option<&str>) -> Pod {
    let owners = owner.map(|uid| {
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}])
    });
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"foo": "bar"}, "ownerReferences": owners},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
    }))
    .unwrap()
}

fn refs(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter().collect()
}

fn condition_of(status: &PodDisruptionBudgetStatus) -> (String, String, Option<i64>) {
    let c = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONDITION)
        .unwrap();
    (c.status.clone(), c.reason.clone(), c.observed_generation)
}

#[test]
fn absolute_min_available_counts_pods() {
    let pods = vec![
        pod("a", true, None),
        pod("b", true, None),
        pod("c", false, None),
    ];
    let p = plan(
        &min_available(json!(1)),
        &refs(&pods),
        &Owners::new(),
        now(),
    )
    .unwrap();
    let s = &p.status;
    assert_eq!(
        (
            s.expected_pods,
            s.desired_healthy,
            s.current_healthy,
            s.disruptions_allowed
        ),
        (3, 1, 2, 1)
    );
    assert_eq!(s.observed_generation, Some(3));
    assert_eq!(
        condition_of(s),
        ("True".into(), SUFFICIENT_PODS.into(), Some(3))
    );
    assert!(p.write);
    // Unmanaged pods only matter to percentages.
    assert!(p.unmanaged.is_empty());

    let p = plan(
        &min_available(json!(2)),
        &refs(&pods),
        &Owners::new(),
        now(),
    )
    .unwrap();
    assert_eq!(p.status.disruptions_allowed, 0);
    assert_eq!(
        condition_of(&p.status),
        ("False".into(), INSUFFICIENT_PODS.into(), Some(3))
    );
}

#[test]
fn percentages_count_the_controllers_scale() {
    // Four pods exist of a ReplicaSet that wants 10: 90% of 10 rounds up to 9 healthy.
    let pods: Vec<Pod> = (0..4)
        .map(|i| pod(&format!("p{i}"), true, Some("rs-uid")))
        .collect();
    let owners: Owners = [(
        "rs-uid".to_string(),
        Some(ControllerScale {
            uid: "rs-uid".into(),
            replicas: 10,
        }),
    )]
    .into();
    let p = plan(&min_available(json!("90%")), &refs(&pods), &owners, now()).unwrap();
    let s = &p.status;
    assert_eq!(
        (s.expected_pods, s.desired_healthy, s.current_healthy),
        (10, 9, 4)
    );
    assert_eq!(s.disruptions_allowed, 0);

    // maxUnavailable 10% of 10 rounds up to 1: 10 healthy of 10 allow one disruption.
    let pods: Vec<Pod> = (0..10)
        .map(|i| pod(&format!("p{i}"), true, Some("rs-uid")))
        .collect();
    let budget = pdb(
        json!({"maxUnavailable": "10%", "selector": {"matchLabels": {"foo": "bar"}}}),
        json!({}),
    );
    let p = plan(&budget, &refs(&pods), &owners, now()).unwrap();
    assert_eq!(
        (
            p.status.expected_pods,
            p.status.desired_healthy,
            p.status.disruptions_allowed
        ),
        (10, 9, 1)
    );
    // Two ReplicaSets of one Deployment count the Deployment once.
    let mut pods = pods;
    pods.push(pod("other", true, Some("rs2-uid")));
    let deployment = Some(ControllerScale {
        uid: "dep-uid".into(),
        replicas: 11,
    });
    let owners: Owners = [
        ("rs-uid".to_string(), deployment.clone()),
        ("rs2-uid".to_string(), deployment),
    ]
    .into();
    let p = plan(&budget, &refs(&pods), &owners, now()).unwrap();
    assert_eq!(p.status.expected_pods, 11);
}

#[test]
fn percentages_skip_unmanaged_pods_and_fail_on_unknown_controllers() {
    let pods = vec![
        pod("managed", true, Some("rs-uid")),
        pod("loose", true, None),
    ];
    let owners: Owners = [(
        "rs-uid".to_string(),
        Some(ControllerScale {
            uid: "rs-uid".into(),
            replicas: 2,
        }),
    )]
    .into();
    let p = plan(&min_available(json!("50%")), &refs(&pods), &owners, now()).unwrap();
    assert_eq!(p.unmanaged, ["loose"]);
    assert_eq!(p.status.expected_pods, 2);

    let owners: Owners = [("rs-uid".to_string(), None)].into();
    let e = plan(&min_available(json!("50%")), &refs(&pods), &owners, now()).unwrap_err();
    assert_eq!(e.to_string(), "found no controllers for pod \"managed\"");
    assert_eq!(
        controller_refs_to_resolve(&min_available(json!("50%")), &refs(&pods)).len(),
        1
    );
    assert!(controller_refs_to_resolve(&min_available(json!(1)), &refs(&pods)).is_empty());
}

#[test]
fn no_pods_allow_nothing() {
    let budget = pdb(json!({"maxUnavailable": 3, "selector": {}}), json!({}));
    let p = plan(&budget, &[], &Owners::new(), now()).unwrap();
    assert_eq!(
        (
            p.status.expected_pods,
            p.status.desired_healthy,
            p.status.disruptions_allowed
        ),
        (0, 0, 0)
    );
}

#[test]
fn disrupted_pods_are_unhealthy_until_they_expire() {
    let recent = "2024-05-01T09:59:00Z";
    let old = "2024-05-01T09:57:00Z";
    let budget = pdb(
        json!({"minAvailable": 1, "selector": {"matchLabels": {"foo": "bar"}}}),
        json!({"disruptedPods": {"a": recent, "b": old, "gone": recent}}),
    );
    let pods = vec![
        pod("a", true, None),
        pod("b", true, None),
        pod("c", true, None),
    ];
    let p = plan(&budget, &refs(&pods), &Owners::new(), now()).unwrap();
    // a is on its way out; b's eviction expired and it counts again; gone is forgotten.
    assert_eq!(p.status.current_healthy, 2);
    let kept: Vec<&String> = p.status.disrupted_pods.as_ref().unwrap().keys().collect();
    assert_eq!(kept, ["a"]);
    assert_eq!(p.not_deleted, ["b"]);
    assert_eq!(p.recheck_at, Some("2024-05-01T10:01:00Z".parse().unwrap()));
    let mut deleting = pod("c", true, None);
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let pods = vec![deleting];
    let p = plan(&budget, &refs(&pods), &Owners::new(), now()).unwrap();
    assert_eq!(p.status.current_healthy, 0);
    assert!(p.status.disrupted_pods.is_none());
}

#[test]
fn an_up_to_date_status_is_not_written_again() {
    let pods = vec![pod("a", true, None), pod("b", true, None)];
    let first = plan(
        &min_available(json!(1)),
        &refs(&pods),
        &Owners::new(),
        now(),
    )
    .unwrap();
    let mut stored = min_available(json!(1));
    stored.status = Some(first.status.clone());
    let later: Timestamp = "2024-05-01T10:05:00Z".parse().unwrap();
    let again = plan(&stored, &refs(&pods), &Owners::new(), later).unwrap();
    assert!(!again.write);
    assert_eq!(again.status, first.status);
    // A new generation must be observed.
    stored.metadata.generation = Some(4);
    let bumped = plan(&stored, &refs(&pods), &Owners::new(), later).unwrap();
    assert!(bumped.write);
    assert_eq!(bumped.status.observed_generation, Some(4));
    // The condition keeps its transition time while its status holds.
    let c = bumped.status.conditions.as_ref().unwrap();
    assert_eq!(c[0].last_transition_time, Time(now()));
    assert_eq!(c[0].observed_generation, Some(4));
}

#[test]
fn fail_safe_allows_nothing_and_says_why() {
    let mut budget = min_available(json!("50%"));
    budget.status = Some(PodDisruptionBudgetStatus {
        disruptions_allowed: 2,
        observed_generation: Some(2),
        ..Default::default()
    });
    let s = fail_safe(&budget, "found no controllers for pod \"x\"", now());
    assert_eq!(s.disruptions_allowed, 0);
    assert_eq!(s.observed_generation, Some(2));
    let c = &s.conditions.unwrap()[0];
    assert_eq!(
        (
            c.status.as_str(),
            c.reason.as_str(),
            c.message.as_str(),
            c.observed_generation
        ),
        (
            "False",
            SYNC_FAILED,
            "found no controllers for pod \"x\"",
            Some(2)
        )
    );
}

#[test]
fn selection_follows_policy_v1() {
    let p = pod("a", true, None);
    let mut any = min_available(json!(1));
    any.spec.as_mut().unwrap().selector = Some(Default::default());
    assert!(selects(&any, &p));
    let mut none = min_available(json!(1));
    none.spec.as_mut().unwrap().selector = None;
    assert!(!selects(&none, &p));
    let mut elsewhere = min_available(json!(1));
    elsewhere.metadata.namespace = Some("other".into());
    assert!(!selects(&elsewhere, &p));
    assert!(selects(&min_available(json!(1)), &p));
}

#[test]
fn stale_disruption_targets() {
    let with = |reason: &str, since: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Running", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": reason, "lastTransitionTime": since}]}
        }))
        .unwrap()
    };
    let fresh = with("EvictionByEvictionAPI", "2024-05-01T09:59:30Z");
    assert_eq!(
        stale_disruption_target(&fresh, now()),
        Some(SignedDuration::from_secs(90))
    );
    let stale = with("EvictionByEvictionAPI", "2024-05-01T09:50:00Z");
    assert_eq!(
        stale_disruption_target(&stale, now()),
        Some(SignedDuration::ZERO)
    );
    assert_eq!(
        stale_disruption_target(&with("TerminationByKubelet", "2024-05-01T09:50:00Z"), now()),
        None
    );
    let cleared = cleared_disruption_target(&stale, now());
    assert_eq!(cleared[0].status, "False");
    assert_eq!(cleared[0].reason, None);
    assert_eq!(cleared[0].last_transition_time, Some(Time(now())));
}
