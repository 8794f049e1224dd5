//! The workload pod decisions, on values.

use super::*;

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i:1"}]}
    }))
    .unwrap()
}

fn set(items: &[&str]) -> HashSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn none() -> HashMap<String, Shown> {
    HashMap::new()
}

fn shown(pods: &[Pod]) -> HashMap<String, Shown> {
    pods.iter()
        .map(|p| (uid(p).to_string(), Shown::of(p)))
        .collect()
}

fn deleting(mut p: Pod, grace: i64) -> Pod {
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    p.metadata.deletion_grace_period_seconds = Some(grace);
    p
}

fn names(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Start(p) => format!("start {}", p.metadata.name.as_deref().unwrap()),
            Action::Update(p) => format!("update {}", p.metadata.name.as_deref().unwrap()),
            Action::Stop { uid, grace } => format!("stop {uid} {grace:?}"),
            Action::Finalize { name, uid, .. } => format!("finalize {name} {uid}"),
        })
        .collect()
}

#[test]
fn new_pods_on_this_node_start_others_are_ignored() {
    let mut mirror = pod("mirror", "n1");
    mirror.metadata.annotations = Some([(CONFIG_MIRROR.to_string(), "h".to_string())].into());
    let mut static_file = pod("static", "n1");
    static_file.metadata.annotations =
        Some([(CONFIG_SOURCE.to_string(), "file".to_string())].into());
    let pods = vec![pod("a", "n1"), pod("b", "n2"), mirror, static_file];
    let a = plan("n1", &pods, &set(&[]), &none(), &set(&[]), &set(&[]));
    assert_eq!(names(&a), vec!["start a"]);
    // Already running with the object it was handed: nothing to do.
    assert!(plan(
        "n1",
        &pods,
        &set(&["uid-a"]),
        &shown(&pods),
        &set(&[]),
        &set(&[])
    )
    .is_empty());
}

#[test]
fn a_running_pod_is_handed_its_changed_labels_and_annotations() {
    let before = vec![pod("a", "n1")];
    let handed = shown(&before);
    let running = set(&["uid-a"]);
    let mut labeled = pod("a", "n1");
    labeled.metadata.labels = Some([("key1".to_string(), "value1".to_string())].into());
    let a = plan(
        "n1",
        &[labeled.clone()],
        &running,
        &handed,
        &set(&[]),
        &set(&[]),
    );
    assert_eq!(names(&a), vec!["update a"]);
    let [Action::Update(p)] = a.as_slice() else {
        unreachable!()
    };
    assert_eq!(**p, labeled);
    let mut annotated = pod("a", "n1");
    annotated.metadata.annotations = Some([("builder".to_string(), "foo".to_string())].into());
    let a = plan("n1", &[annotated], &running, &handed, &set(&[]), &set(&[]));
    assert_eq!(names(&a), vec!["update a"]);
    // Other changes (a new resourceVersion) and an empty map for none are not updates.
    let mut same = pod("a", "n1");
    same.metadata.resource_version = Some("7".into());
    same.metadata.labels = Some(Default::default());
    assert!(plan("n1", &[same], &running, &handed, &set(&[]), &set(&[])).is_empty());
    // A running pod the runtime was never handed here (adopted) is handed once; none while stopping.
    let a = plan("n1", &before, &running, &none(), &set(&[]), &set(&[]));
    assert_eq!(names(&a), vec!["update a"]);
    assert!(plan(
        "n1",
        &before,
        &running,
        &none(),
        &set(&["uid-a"]),
        &set(&[])
    )
    .is_empty());
}

#[test]
fn deletion_stops_with_the_grace_then_finalizes() {
    let pods = vec![deleting(pod("a", "n1"), 7)];
    let a = plan("n1", &pods, &set(&["uid-a"]), &none(), &set(&[]), &set(&[]));
    assert_eq!(names(&a), vec!["stop uid-a Some(7s)"]);
    // While stopping: wait.
    assert!(plan("n1", &pods, &set(&[]), &none(), &set(&["uid-a"]), &set(&[])).is_empty());
    // Stopped (no longer in the runtime): remove the object.
    let a = plan("n1", &pods, &set(&[]), &none(), &set(&[]), &set(&[]));
    assert_eq!(names(&a), vec!["finalize a uid-a"]);
}

#[test]
fn pods_gone_from_the_api_are_stopped_with_their_own_grace() {
    let a = plan("n1", &[], &set(&["uid-x"]), &none(), &set(&[]), &set(&[]));
    assert_eq!(names(&a), vec!["stop uid-x None"]);
    assert!(plan(
        "n1",
        &[],
        &set(&["uid-x"]),
        &none(),
        &set(&["uid-x"]),
        &set(&[])
    )
    .is_empty());
}

#[test]
fn terminal_and_refused_pods_are_not_started_again() {
    let mut done = pod("done", "n1");
    done.status = Some(ApiPodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    let pods = vec![done, pod("bad", "n1")];
    assert!(plan(
        "n1",
        &pods,
        &set(&[]),
        &none(),
        &set(&[]),
        &set(&["uid-bad"])
    )
    .is_empty());
}

#[test]
fn refused_status_is_pending_with_the_reason() {
    let s = refused_status("initContainers are not supported yet", "10.0.0.1");
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(s.reason.as_deref(), Some("UnsupportedPodSpec"));
    assert_eq!(s.host_ip.as_deref(), Some("10.0.0.1"));
}

#[test]
fn a_status_written_by_someone_else_is_posted_again() {
    let ready = |v: &str| {
        serde_json::from_value::<ApiPodStatus>(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": v}, {"type": "PodScheduled", "status": "True"}],
        }))
        .unwrap()
    };
    let mut p = pod("a", "node1");
    p.status = Some(ready("True"));
    assert!(!api_disagrees(&p, &ready("True")));
    // A condition only others write (an eviction's DisruptionTarget) is not a disagreement.
    let mut theirs = ready("True");
    theirs.conditions.as_mut().unwrap().push(
        serde_json::from_value(serde_json::json!({"type": "DisruptionTarget", "status": "True"}))
            .unwrap(),
    );
    p.status = Some(theirs);
    assert!(!api_disagrees(&p, &ready("True")));
    // The node lifecycle controller marked it not ready while the node was silent.
    p.status = Some(ready("False"));
    assert!(api_disagrees(&p, &ready("True")));
    // Not yet seen in the API at all.
    p.status = None;
    assert!(api_disagrees(&p, &ready("True")));
}

#[test]
fn a_terminal_phase_in_the_api_is_never_reverted() {
    let running = || -> ApiPodStatus {
        serde_json::from_value(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "PodScheduled", "status": "True"}],
        }))
        .unwrap()
    };
    let mut p = pod("a", "node1");
    // Someone else marked the running pod Failed: the kubelet's Running does not overwrite it.
    p.status = Some(ApiPodStatus {
        phase: Some("Failed".into()),
        ..running()
    });
    let mut status = running();
    keep_terminal_phase(&p, &mut status);
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let conds: Vec<(&str, &str, Option<&str>)> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()))
        .collect();
    assert_eq!(
        conds,
        [
            ("Ready", "False", Some("PodFailed")),
            ("ContainersReady", "False", Some("PodFailed")),
            ("PodScheduled", "True", None)
        ]
    );
    // Once posted, the kubelet's view and the API's agree: nothing flips back.
    p.status = Some(status.clone());
    let mut again = running();
    keep_terminal_phase(&p, &mut again);
    assert!(!api_disagrees(&p, &again));
    // A pod the API shows running is left to the kubelet's own view.
    p.status = Some(running());
    let mut status = running();
    keep_terminal_phase(&p, &mut status);
    assert_eq!(status, running());
}

#[test]
fn conditions_others_wrote_survive_the_kubelets_status() {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": []},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]},
    }))
    .unwrap();
    let mut status: ApiPodStatus = serde_json::from_value(serde_json::json!({
        "phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}]}))
    .unwrap();
    keep_foreign_conditions(&p, &mut status);
    let conds = status.conditions.unwrap();
    let types: Vec<(&str, &str)> = conds
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    // The kubelet's own Ready stays its own; the eviction's condition is carried over.
    assert_eq!(types, [("Ready", "False"), ("DisruptionTarget", "True")]);
}

#[test]
fn a_deleted_pod_ends_failed_with_its_killed_containers_terminated() {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": []},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "DisruptionTarget", "status": "True"}],
            "containerStatuses": [
                {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 0,
                 "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
                {"name": "b", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0}}}]},
    }))
    .unwrap();
    let s = terminal_status(&p, "10.0.0.2");
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let cs = s.container_statuses.unwrap();
    let a = cs[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((a.exit_code, a.reason.as_deref()), (137, Some("Error")));
    assert_eq!(
        cs[1]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );
    let conds = s.conditions.unwrap();
    assert!(conds
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "False"));
    assert!(conds
        .iter()
        .any(|c| c.type_ == "DisruptionTarget" && c.status == "True"));

    let mut done = p.clone();
    done.status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()
        .remove(0);
    assert_eq!(
        terminal_status(&done, "").phase.as_deref(),
        Some("Succeeded")
    );
}

fn with_deadline(
    mut p: Pod,
    deadline: i64,
    started_secs_ago: i64,
) -> (Pod, k8s_openapi::jiff::Timestamp) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let now = k8s_openapi::jiff::Timestamp::from_second(1_000_000).unwrap();
    p.spec.as_mut().unwrap().active_deadline_seconds = Some(deadline);
    p.status = Some(ApiPodStatus {
        phase: Some("Running".into()),
        start_time: Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_000_000 - started_secs_ago).unwrap(),
        )),
        ..Default::default()
    });
    (p, now)
}

#[test]
fn the_active_deadline_counts_from_the_start_time() {
    let (p, now) = with_deadline(pod("a", "n1"), 30, 29);
    assert!(!past_deadline(&p, now));
    let (p, now) = with_deadline(pod("a", "n1"), 30, 30);
    assert!(past_deadline(&p, now));
    // Not started yet, or no deadline: never past it.
    let (mut p, now) = with_deadline(pod("a", "n1"), 1, 100);
    p.status.as_mut().unwrap().start_time = None;
    assert!(!past_deadline(&p, now));
    assert!(!past_deadline(&pod("a", "n1"), now));
}

#[test]
fn a_pod_past_its_deadline_ends_failed_with_upstreams_reason() {
    let (mut p, _) = with_deadline(pod("a", "n1"), 5, 10);
    p.status.as_mut().unwrap().container_statuses = Some(vec![serde_json::from_value(
        serde_json::json!({"name": "c", "image": "i:1", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}),
    )
    .unwrap()]);
    let s = deadline_status(&p, "10.0.0.1");
    // Failed even though its container exited 0: the deadline decides.
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
}

#[test]
fn a_deleted_pod_reports_the_exits_the_runtime_saw_at_the_kill() {
    use crate::container_status::{ContainerState as Rt, ContainerStatus as RtStatus};
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": []},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 0,
             "containerID": "containerd://c1",
             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
    }))
    .unwrap();
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_660);
    let last = [RtStatus {
        name: "a".into(),
        image: String::new(),
        container_id: String::new(),
        restart_count: 0,
        state: Rt::Terminated(crate::container_status::Terminated {
            exit_code: 0,
            signal: None,
            reason: "Completed".into(),
            message: None,
            started_at: None,
            finished_at: at,
        }),
        last_termination: None,
        ready: false,
        restarting: false,
        started: false,
        restartable: false,
        user: None,
    }];
    // Exited 0 on SIGTERM: 0/Completed, and the pod Succeeded, as upstream reports it.
    let s = terminal_status_after(&p, Some(&last), "10.0.0.2");
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    let cs = s.container_statuses.unwrap();
    let a = cs[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((a.exit_code, a.reason.as_deref()), (0, Some("Completed")));
    assert_eq!(a.container_id.as_deref(), Some("containerd://c1"));
    // Without the runtime's word the kill is all that is known: 137.
    let s = terminal_status_after(&p, None, "10.0.0.2");
    assert_eq!(s.phase.as_deref(), Some("Failed"));
}
