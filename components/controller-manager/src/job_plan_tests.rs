use super::*;
use serde_json::{json, Value};

fn job(spec: Value) -> Job {
    let mut spec = spec;
    if spec.get("template").is_none() {
        spec["template"] = json!({"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}});
    }
    serde_json::from_value(json!({
        "metadata": {"name": "pi", "namespace": "ns", "uid": "u1"},
        "spec": spec,
    }))
    .unwrap()
}

fn pod(name: &str, phase: &str, extra: Value) -> Arc<Pod> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "finalizers": [TRACKING_FINALIZER]},
        "spec": {"containers": []},
        "status": {"phase": phase},
    });
    merge(&mut p, extra);
    Arc::new(serde_json::from_value(p).unwrap())
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn exited(container: &str, code: i32, at: &str) -> Value {
    json!({"status": {"containerStatuses": [{"name": container, "ready": false, "restartCount": 0,
        "image": "", "imageID": "",
        "state": {"terminated": {"exitCode": code, "finishedAt": at}}}]}})
}

fn indexed(name: &str, phase: &str, index: i32) -> Arc<Pod> {
    pod(
        name,
        phase,
        json!({"metadata": {"annotations": {COMPLETION_INDEX: index.to_string()}}}),
    )
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn deleted_pods_count_as_failed_unless_only_failed_pods_are_replaced() {
    let deleting = pod(
        "d",
        "Running",
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    );
    let default = job(json!({}));
    assert!(is_pod_failed(&deleting, &default));
    assert!(is_terminating(&deleting) && !is_active(&deleting));
    let failed_only = job(json!({"podReplacementPolicy": "Failed"}));
    assert!(!is_pod_failed(&deleting, &failed_only));
    assert!(is_pod_failed(&pod("f", "Failed", json!({})), &failed_only));
    assert!(!is_pod_failed(&pod("s", "Succeeded", json!({})), &default));
}

#[test]
fn pod_failure_policy_matches_exit_codes_and_conditions_in_rule_order() {
    let j = job(json!({"podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
    ]}}));
    let policy = j.spec.as_ref().unwrap().pod_failure_policy.clone().unwrap();
    let fail42 = pod("a", "Failed", exited("main", 42, "2026-01-01T00:00:00Z"));
    assert_eq!(
        match_pod_failure_policy(&policy, &fail42),
        Some(PolicyAction::FailJob(
            "Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 1"
                .into()
        ))
    );
    assert_eq!(
        fail_job_message(&j, std::slice::from_ref(&fail42)).as_deref(),
        Some(
            "Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 1"
        )
    );
    let other_container = pod("b", "Failed", exited("side", 42, "2026-01-01T00:00:00Z"));
    assert_eq!(
        match_pod_failure_policy(&policy, &other_container),
        Some(PolicyAction::Count)
    );
    let one = pod("c", "Failed", exited("main", 1, "2026-01-01T00:00:00Z"));
    assert_eq!(match_pod_failure_policy(&policy, &one), None);
    let disrupted = pod(
        "d",
        "Failed",
        json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}}),
    );
    assert_eq!(
        match_pod_failure_policy(&policy, &disrupted),
        Some(PolicyAction::Ignore)
    );
    assert!(!counts_as_failure(&j, &disrupted));
    assert!(counts_as_failure(&j, &one));
}

#[test]
fn want_active_respects_completions_and_parallelism() {
    let j = job(json!({"completions": 5, "parallelism": 2}));
    assert_eq!(want_active(&j, 0, 0), 2);
    assert_eq!(want_active(&j, 4, 1), 1);
    assert_eq!(want_active(&j, 6, 0), 0);
    let queue = job(json!({"parallelism": 3}));
    assert_eq!(want_active(&queue, 0, 1), 3);
    // Once one worker succeeded, no more are started.
    assert_eq!(want_active(&queue, 1, 2), 2);
}

#[test]
fn backoff_doubles_per_failure_since_the_last_success() {
    let j = job(json!({}));
    let f1 = pod("f1", "Failed", exited("c", 1, "2026-01-01T00:00:00Z"));
    let f2 = pod("f2", "Failed", exited("c", 1, "2026-01-01T00:00:30Z"));
    let now = ts("2026-01-01T00:00:35Z");
    assert_eq!(
        backoff_remaining(&j, std::slice::from_ref(&f1), ts("2026-01-01T00:00:04Z")),
        Duration::from_secs(6)
    );
    // Two failures: 20 s after the newer one.
    assert_eq!(
        backoff_remaining(&j, &[f1.clone(), f2.clone()], now),
        Duration::from_secs(15)
    );
    let s = pod("s", "Succeeded", exited("c", 0, "2026-01-01T00:00:20Z"));
    assert_eq!(
        backoff_remaining(&j, &[f1.clone(), s, f2.clone()], now),
        Duration::from_secs(5)
    );
    assert_eq!(backoff_remaining(&j, &[], now), Duration::ZERO);
    let many: Vec<Arc<Pod>> = (0..12)
        .map(|i| {
            pod(
                &format!("m{i}"),
                "Failed",
                exited("c", 1, "2026-01-01T00:00:30Z"),
            )
        })
        .collect();
    assert_eq!(
        backoff_remaining(&j, &many, now),
        MAX_BACKOFF - Duration::from_secs(5)
    );
}

#[test]
fn restarts_count_against_the_limit_with_restart_on_failure() {
    let mut j = job(json!({"backoffLimit": 2}));
    j.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .restart_policy = Some("OnFailure".into());
    let restarted = |n: i32| {
        pod(
            "r",
            "Running",
            json!({"status": {"containerStatuses": [{"name": "c", "ready": true, "restartCount": n,
                "image": "", "imageID": ""}]}}),
        )
    };
    assert!(!past_backoff_limit_on_failure(&j, &[restarted(1)]));
    assert!(past_backoff_limit_on_failure(&j, &[restarted(2)]));
    let never = job(json!({"backoffLimit": 2}));
    assert!(!past_backoff_limit_on_failure(&never, &[restarted(5)]));
}

#[test]
fn indexed_pods_carry_their_index_hostname_and_env() {
    let j = job(json!({"completionMode": "Indexed", "completions": 3}));
    let p = new_pod(&j, Some(2));
    assert_eq!(p.metadata.generate_name.as_deref(), Some("pi-2-"));
    assert_eq!(
        p.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX],
        "2"
    );
    assert_eq!(p.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX], "2");
    let spec = p.spec.unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("pi-2"));
    let env = &spec.containers[0].env.as_ref().unwrap()[0];
    assert_eq!(env.name, COMPLETION_INDEX_ENV);
    assert_eq!(
        env.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    assert_eq!(p.metadata.finalizers.unwrap(), [TRACKING_FINALIZER]);
    let owner = &p.metadata.owner_references.unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Job", Some(true)));
    let plain = new_pod(&job(json!({})), None);
    assert_eq!(plain.metadata.generate_name.as_deref(), Some("pi-"));
    assert!(plain.spec.unwrap().hostname.is_none());
}

#[test]
fn pending_indexes_skip_succeeded_and_busy_ones() {
    let j = job(json!({"completionMode": "Indexed", "completions": 5}));
    let pods = vec![
        indexed("a", "Succeeded", 0),
        indexed("b", "Running", 1),
        indexed("c", "Failed", 2),
    ];
    let succeeded = succeeded_indexes(&j, &pods);
    assert_eq!(succeeded.to_string(), "0");
    assert_eq!(
        first_pending_indexes(&j, &succeeded, &Indexes::default(), &pods, 10),
        [2, 3, 4]
    );
    assert_eq!(
        first_pending_indexes(&j, &succeeded, &Indexes::default(), &pods, 1),
        [2]
    );
}

#[test]
fn removal_takes_duplicate_and_finished_indexes_first() {
    let j = job(json!({"completionMode": "Indexed", "completions": 3}));
    let mut done = Indexes::default();
    done.insert(0);
    let active = vec![
        indexed("a", "Running", 0),
        indexed("b", "Running", 1),
        indexed("c", "Running", 1),
        indexed("d", "Running", 7),
        indexed("e", "Running", 2),
    ];
    let names: Vec<String> = pods_for_removal(&j, &active, &done, 0)
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names.len(), 3);
    assert!(names.contains(&"a".to_string()) && names.contains(&"d".to_string()));
    let plain = job(json!({"completions": 3}));
    let extra = vec![
        pod("x", "Running", json!({})),
        pod("y", "Pending", json!({})),
    ];
    let first = pods_for_removal(&plain, &extra, &Indexes::default(), 1);
    assert_eq!(first[0].metadata.name.as_deref(), Some("y"));
}

#[test]
fn success_policy_rules() {
    let j = job(json!({"completionMode": "Indexed", "completions": 5,
        "successPolicy": {"rules": [{"succeededIndexes": "0-1"}, {"succeededCount": 3}]}}));
    let mut ix = Indexes::default();
    ix.insert(0);
    assert_eq!(success_policy_met(&j, &ix), None);
    ix.insert(1);
    assert_eq!(
        success_policy_met(&j, &ix).as_deref(),
        Some("Matched rules at index 0")
    );
    let mut other = Indexes::default();
    for i in [2, 3, 4] {
        other.insert(i);
    }
    assert_eq!(
        success_policy_met(&j, &other).as_deref(),
        Some("Matched rules at index 1")
    );
}

#[test]
fn conditions_are_set_once_and_false_is_never_added_fresh() {
    let now = ts("2026-01-01T00:00:00Z");
    let mut conds = Vec::new();
    assert!(!ensure_condition(
        &mut conds,
        SUSPENDED,
        "False",
        "JobResumed",
        "Job resumed",
        now
    ));
    assert!(conds.is_empty());
    assert!(ensure_condition(
        &mut conds,
        SUSPENDED,
        "True",
        "JobSuspended",
        "Job suspended",
        now
    ));
    assert!(!ensure_condition(
        &mut conds,
        SUSPENDED,
        "True",
        "JobSuspended",
        "Job suspended",
        now
    ));
    let later = ts("2026-01-01T00:01:00Z");
    assert!(ensure_condition(
        &mut conds,
        SUSPENDED,
        "False",
        "JobResumed",
        "Job resumed",
        later
    ));
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0].status, "False");
    assert_eq!(conds[0].last_transition_time.as_ref().unwrap().0, later);
}

#[test]
fn deadlines_run_from_start_and_stop_while_suspended() {
    let mut j = job(json!({"activeDeadlineSeconds": 30}));
    assert!(active_deadline(&j).is_none());
    j.status = Some(serde_json::from_value(json!({"startTime": "2026-01-01T00:00:00Z"})).unwrap());
    assert_eq!(active_deadline(&j), Some(ts("2026-01-01T00:00:30Z")));
    j.spec.as_mut().unwrap().suspend = Some(true);
    assert!(active_deadline(&j).is_none());
}

#[test]
fn per_index_failures_travel_with_the_newest_pod() {
    let j = job(
        json!({"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1,
        "podFailurePolicy": {"rules": [{"action": "FailIndex",
            "onExitCodes": {"operator": "In", "values": [7]}}]}}),
    );
    let at = |name: &str, ix: i32, failures: i32, created: &str, phase: &str, code: i32| {
        pod(
            name,
            phase,
            json!({"metadata": {"creationTimestamp": created, "annotations": {
                COMPLETION_INDEX: ix.to_string(), INDEX_FAILURE_COUNT: failures.to_string()}},
                "status": exited("c", code, "2026-01-01T00:01:00Z")["status"].clone()}),
        )
    };
    let pods = vec![
        // Index 0: failed twice (1 before the newest) — over the limit of 1.
        at("a0", 0, 0, "2026-01-01T00:00:00Z", "Failed", 1),
        at("b0", 0, 1, "2026-01-01T00:00:10Z", "Failed", 1),
        // Index 1: failed once — one retry left.
        at("a1", 1, 0, "2026-01-01T00:00:00Z", "Failed", 1),
        // Index 2: a FailIndex exit code fails it at once.
        at("a2", 2, 0, "2026-01-01T00:00:00Z", "Failed", 7),
    ];
    let h = index_histories(&j, &pods);
    assert_eq!(h[&0].failures, 2);
    assert_eq!(h[&1].failures, 1);
    assert!(h[&2].fail_index);
    assert_eq!(failed_indexes(&j, &h).to_string(), "0,2");
    // The retry of index 1 waits 10 s after its failure, and carries the count.
    assert_eq!(
        index_backoff_remaining(&h[&1], ts("2026-01-01T00:01:04Z")),
        Duration::from_secs(6)
    );
    let retry = new_pod_with_failures(&j, Some(1), Some(h[&1].failures));
    assert_eq!(
        retry.metadata.annotations.unwrap()[INDEX_FAILURE_COUNT],
        "1"
    );
}
