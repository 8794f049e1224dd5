use super::*;
use serde_json::json;

fn set(replicas: i32, extra: serde_json::Value) -> StatefulSet {
    let mut v = json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "set-uid", "generation": 3},
        "spec": {"replicas": replicas, "serviceName": "nginx", "selector": {"matchLabels": {"app": "w"}},
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": {"metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "c", "image": "app:1"}]}}}
    });
    if let Some(spec) = extra.as_object() {
        for (k, val) in spec {
            v["spec"][k] = val.clone();
        }
    }
    serde_json::from_value(v).unwrap()
}

fn revs() -> Revisions {
    let t: PodTemplateSpec = serde_json::from_value(json!({"metadata": {"labels": {"app": "w"}},
        "spec": {"containers": [{"name": "c", "image": "app:1"}]}}))
    .unwrap();
    let mut u = t.clone();
    u.spec.as_mut().unwrap().containers[0].image = Some("app:2".into());
    Revisions {
        current: "web-old".into(),
        current_template: t,
        update: "web-new".into(),
        update_template: u,
    }
}

fn pod(name: &str, rev: &str, phase: &str, ready: bool) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default",
                "labels": {"app": "w", POD_NAME_LABEL: name, REVISION_LABEL: rev,
                    POD_INDEX_LABEL: name.rsplit('-').next().unwrap()}},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap(),
    )
}

fn creates(p: &Plan) -> Vec<String> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Create(p) => p.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

fn deletes(p: &Plan) -> Vec<(String, DeleteWhy)> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Delete { pod, why } => Some((pod.clone(), *why)),
            _ => None,
        })
        .collect()
}

#[test]
fn ordinals_parse_from_the_last_dash() {
    assert_eq!(parent_and_ordinal("web-0"), Some(("web", 0)));
    assert_eq!(parent_and_ordinal("my-web-12"), Some(("my-web", 12)));
    assert_eq!(parent_and_ordinal("web-x"), None);
    assert_eq!(parent_and_ordinal("web"), None);
}

#[test]
fn new_pods_have_stable_identity_and_revision() {
    let s = set(3, json!({"ordinals": {"start": 5}}));
    let p = plan(&s, &[], &revs(), 0, Timestamp::now());
    // OrderedReady: only the first ordinal, then wait for it.
    assert_eq!(creates(&p), ["web-5"]);
    let Step::Create(pod) = &p.steps[0] else {
        panic!()
    };
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels[POD_NAME_LABEL], "web-5");
    assert_eq!(labels[POD_INDEX_LABEL], "5");
    assert_eq!(labels[REVISION_LABEL], "web-new");
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("web-5"));
    assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
    assert_eq!(spec.containers[0].image.as_deref(), Some("app:2"));
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("StatefulSet", Some(true))
    );
    assert_eq!(p.status.replicas, 0);
    assert_eq!(p.status.observed_generation, Some(3));
    assert_eq!(p.status.collision_count, Some(0));
}

#[test]
fn ordered_ready_waits_for_each_pod_and_parallel_does_not() {
    let now = Timestamp::now();
    let s = set(3, json!({}));
    let pending = [pod("web-0", "web-new", "Pending", false)];
    assert!(plan(&s, &pending, &revs(), 0, now).steps.is_empty());
    let ready = [pod("web-0", "web-new", "Running", true)];
    assert_eq!(creates(&plan(&s, &ready, &revs(), 0, now)), ["web-1"]);
    let burst = set(3, json!({"podManagementPolicy": "Parallel"}));
    assert_eq!(
        creates(&plan(&burst, &pending, &revs(), 0, now)),
        ["web-1", "web-2"]
    );
}

#[test]
fn scale_down_removes_the_highest_ordinal_first_one_at_a_time() {
    let now = Timestamp::now();
    let s = set(1, json!({}));
    let pods = [
        pod("web-0", "web-new", "Running", true),
        pod("web-1", "web-new", "Running", true),
        pod("web-2", "web-new", "Running", true),
    ];
    let p = plan(&s, &pods, &revs(), 0, now);
    assert_eq!(deletes(&p), [("web-2".to_string(), DeleteWhy::ScaleDown)]);
    // An unhealthy pod other than the first unhealthy one halts scale-down.
    let halted = [
        pod("web-0", "web-new", "Running", false),
        pod("web-1", "web-new", "Running", true),
        pod("web-2", "web-new", "Running", true),
    ];
    assert!(deletes(&plan(&s, &halted, &revs(), 0, now)).is_empty());
    let burst = set(1, json!({"podManagementPolicy": "Parallel"}));
    assert_eq!(deletes(&plan(&burst, &pods, &revs(), 0, now)).len(), 2);
}

#[test]
fn failed_pods_are_recreated() {
    let s = set(1, json!({}));
    let p = plan(
        &s,
        &[pod("web-0", "web-new", "Failed", false)],
        &revs(),
        0,
        Timestamp::now(),
    );
    assert_eq!(deletes(&p), [("web-0".to_string(), DeleteWhy::Failed)]);
    assert_eq!(creates(&p), ["web-0"]);
}

#[test]
fn rolling_update_goes_in_reverse_ordinal_order_above_the_partition() {
    let now = Timestamp::now();
    let pods = [
        pod("web-0", "web-old", "Running", true),
        pod("web-1", "web-old", "Running", true),
        pod("web-2", "web-old", "Running", true),
    ];
    let s = set(3, json!({}));
    let p = plan(&s, &pods, &revs(), 0, now);
    assert_eq!(deletes(&p), [("web-2".to_string(), DeleteWhy::Update)]);
    assert_eq!(p.status.current_replicas, Some(2));
    assert_eq!(p.status.updated_replicas, Some(0));
    // web-2 updated and ready: web-1 next.
    let mut next = pods.clone();
    next[2] = pod("web-2", "web-new", "Running", true);
    assert_eq!(
        deletes(&plan(&s, &next, &revs(), 0, now)),
        [("web-1".to_string(), DeleteWhy::Update)]
    );
    // Updated but not ready yet: wait.
    next[2] = pod("web-2", "web-new", "Running", false);
    assert!(deletes(&plan(&s, &next, &revs(), 0, now)).is_empty());
    // Partition 2: only ordinal 2 is updated.
    let part = set(
        3,
        json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
    );
    next[2] = pod("web-2", "web-new", "Running", true);
    assert!(deletes(&plan(&part, &next, &revs(), 0, now)).is_empty());
    // Pods recreated below the partition keep the current revision.
    let missing = [pod("web-1", "web-old", "Running", true)];
    let p = plan(&part, &missing, &revs(), 0, now);
    let Step::Create(created) = &p.steps[0] else {
        panic!()
    };
    assert_eq!(pod_revision(created), "web-old");
    assert_eq!(
        created.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref(),
        Some("app:1")
    );
    // OnDelete never deletes for an update.
    let od = set(3, json!({"updateStrategy": {"type": "OnDelete"}}));
    assert!(deletes(&plan(&od, &pods, &revs(), 0, now)).is_empty());
}

#[test]
fn rolling_update_completes_when_all_pods_are_updated_and_ready() {
    let s = set(2, json!({}));
    let pods = [
        pod("web-0", "web-new", "Running", true),
        pod("web-1", "web-new", "Running", true),
    ];
    let mut p = plan(&s, &pods, &revs(), 0, Timestamp::now());
    assert_eq!(p.status.current_revision.as_deref(), Some("web-old"));
    complete_rolling_update(&s, &mut p.status);
    assert_eq!(p.status.current_revision.as_deref(), Some("web-new"));
    assert_eq!(p.status.current_replicas, Some(2));
    assert_eq!(p.status.ready_replicas, Some(2));
}

#[test]
fn revision_data_is_a_replace_patch_of_the_template() {
    let s = set(1, json!({}));
    let data = revision_data(&s);
    let text = serde_json::to_string(&data).unwrap();
    assert!(text.starts_with(r#"{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"app":"w"}}"#), "{text}");
    let r = new_revision(&s, 1, 0);
    let hash = revision_hash(&data, 0);
    assert_eq!(
        r.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert_eq!(r.metadata.labels.as_ref().unwrap()[REVISION_LABEL], hash);
    assert_eq!(r.metadata.labels.as_ref().unwrap()["app"], "w");
    assert_ne!(hash, revision_hash(&data, 1));
    assert!(hash.bytes().all(|b| SAFE.contains(&b)));
    let t = template_of(&r).unwrap();
    assert_eq!(Some(t), Some(s.spec.unwrap().template));
}

#[test]
fn update_revision_reuses_renumbers_or_creates() {
    let s1 = set(1, json!({}));
    let r1 = Arc::new(new_revision(&s1, 1, 0));
    let mut s2 = s1.clone();
    s2.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("app:2".into());
    let r2 = Arc::new(new_revision(&s2, 2, 0));
    let history = [r1.clone(), r2.clone()];
    assert!(
        matches!(resolve_update_revision(&s2, &history, 0), UpdateRevision::Latest(r) if r.revision == 2)
    );
    assert!(
        matches!(resolve_update_revision(&s1, &history, 0), UpdateRevision::Renumber(r, 3) if r.revision == 1)
    );
    let mut s3 = s1.clone();
    s3.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("app:3".into());
    assert!(
        matches!(resolve_update_revision(&s3, &history, 0), UpdateRevision::Create(r) if r.revision == 3)
    );
}

#[test]
fn history_keeps_live_revisions_and_the_limit() {
    let s = set(1, json!({"revisionHistoryLimit": 1}));
    let mk = |n: i64| {
        let mut r = new_revision(&s, n, 0);
        r.metadata.name = Some(format!("web-r{n}"));
        Arc::new(r)
    };
    let history = [mk(1), mk(2), mk(3), mk(4)];
    let pods = [pod("web-0", "web-r2", "Running", true)];
    // r2 is live (a pod), r4 is current and update: of r1 and r3 one may stay.
    assert_eq!(
        revisions_to_prune(&s, &history, &pods, "web-r4", "web-r4"),
        ["web-r1"]
    );
}

#[test]
fn claim_templates_become_named_claims_and_volumes() {
    let s = set(
        1,
        json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}),
    );
    let claims = claims_for(&s, 0);
    assert_eq!(claims[0].metadata.name.as_deref(), Some("data-web-0"));
    assert_eq!(claims[0].metadata.labels.as_ref().unwrap()["app"], "w");
    let p = plan(&s, &[], &revs(), 0, Timestamp::now());
    let Step::Create(pod) = &p.steps[0] else {
        panic!()
    };
    let vols = pod.spec.as_ref().unwrap().volumes.clone().unwrap();
    assert_eq!(vols[0].name, "data");
    assert_eq!(
        vols[0].persistent_volume_claim.as_ref().unwrap().claim_name,
        "data-web-0"
    );
}

#[test]
fn lost_identity_labels_are_restored() {
    let s = set(1, json!({}));
    let mut p = (*pod("web-0", "web-new", "Running", true)).clone();
    p.metadata.labels.as_mut().unwrap().remove(POD_NAME_LABEL);
    let steps = plan(&s, &[Arc::new(p)], &revs(), 0, Timestamp::now()).steps;
    assert!(
        matches!(&steps[0], Step::Relabel { pod, labels } if pod == "web-0" && labels[POD_NAME_LABEL] == "web-0")
    );
}

fn terminating(p: &Arc<Pod>) -> Arc<Pod> {
    let mut p = (**p).clone();
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::now(),
    ));
    Arc::new(p)
}

fn rolling(max_unavailable: serde_json::Value, partition: i32, policy: &str) -> StatefulSet {
    set(
        5,
        json!({"podManagementPolicy": policy, "updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"partition": partition, "maxUnavailable": max_unavailable}}}),
    )
}

#[test]
fn max_unavailable_scales_rounds_down_and_is_at_least_one() {
    assert_eq!(max_unavailable(&set(5, json!({}))), 1);
    assert_eq!(max_unavailable(&rolling(json!(2), 0, "Parallel")), 2);
    assert_eq!(max_unavailable(&rolling(json!("50%"), 0, "Parallel")), 2);
    assert_eq!(max_unavailable(&rolling(json!("100%"), 0, "Parallel")), 5);
    assert_eq!(max_unavailable(&rolling(json!("10%"), 0, "Parallel")), 1);
}

#[test]
fn max_unavailable_replaces_that_many_pods_at_a_time_from_the_highest_ordinal() {
    let now = Timestamp::now();
    let old: Vec<Arc<Pod>> = (0..5)
        .map(|i| pod(&format!("web-{i}"), "web-old", "Running", true))
        .collect();
    let new = |i: i32| pod(&format!("web-{i}"), "web-new", "Running", true);
    let names = |p: &Plan| -> Vec<String> { deletes(p).into_iter().map(|(n, _)| n).collect() };

    // OrderedReady, maxUnavailable 2, partition 1: the two highest ordinals go together.
    let ordered = rolling(json!(2), 1, "OrderedReady");
    let p = plan(&ordered, &old, &revs(), 0, now);
    assert_eq!(names(&p), ["web-4", "web-3"]);
    assert!(deletes(&p).iter().all(|(_, why)| *why == DeleteWhy::Update));
    assert_eq!(p.status.current_replicas, Some(3));

    let s = rolling(json!(2), 1, "Parallel");
    assert_eq!(names(&plan(&s, &old, &revs(), 0, now)), ["web-4", "web-3"]);
    // Both still terminating: the budget is spent, nothing more goes.
    let mut pods = old.clone();
    pods[4] = terminating(&old[4]);
    pods[3] = terminating(&old[3]);
    assert!(deletes(&plan(&s, &pods, &revs(), 0, now)).is_empty());
    // web-4 back at the new revision and ready, web-3 still going: one more may go.
    pods[4] = new(4);
    assert_eq!(names(&plan(&s, &pods, &revs(), 0, now)), ["web-2"]);
    // web-3 back but not ready yet, web-2 terminating: two unavailable, wait.
    pods[3] = pod("web-3", "web-new", "Running", false);
    pods[2] = terminating(&old[2]);
    assert!(deletes(&plan(&s, &pods, &revs(), 0, now)).is_empty());
    // Both updated: only web-1 is left above the partition; web-0 is never touched.
    pods[3] = new(3);
    pods[2] = new(2);
    assert_eq!(names(&plan(&s, &pods, &revs(), 0, now)), ["web-1"]);
    pods[1] = new(1);
    assert!(deletes(&plan(&s, &pods, &revs(), 0, now)).is_empty());

    // An unavailable pod below the partition also uses the budget.
    let mut pods = old.clone();
    pods[0] = pod("web-0", "web-old", "Running", false);
    assert_eq!(names(&plan(&s, &pods, &revs(), 0, now)), ["web-4"]);
    // A percentage: 40% of 5 is 2.
    let pct = rolling(json!("40%"), 0, "Parallel");
    assert_eq!(
        names(&plan(&pct, &old, &revs(), 0, now)),
        ["web-4", "web-3"]
    );
}
