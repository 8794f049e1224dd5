//! Sidecars and startup probes in the pod's sync, against the recording fake CRI and event recorder,
//! with time passed in.

use super::*;
use crate::events::FakeRecorder;
use crate::mirror::api_status;
use crate::runtime::cri::fake::FakeCri;
use k8s_openapi::api::core::v1::PodStatus as ApiPodStatus;
use serde_json::{json, Value};

const IMG: &str = "reg/agnhost:1";
const NODE_IP: &str = "10.250.0.11";

fn cfg() -> Arc<WorkerConfig> {
    Arc::new(WorkerConfig {
        log_root: "/var/log/pods".into(),
        pause_image: "reg/pause:1".into(),
        backoff: crate::runtime::Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: NODE_IP.into(),
        pods_root: super::super::tests::unique_pods_root(),
        secrets_in_memory: false,
        allocatable: NodeAllocatable::default(),
        dns: super::super::tests::test_dns(),
        node_hosts_file: "/etc/hosts".into(),
        cgroups: None,
        pod_pids_limit: None,
    })
}

fn ctr(name: &str, extra: Value) -> Value {
    let mut c = json!({"name": name, "image": IMG});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    c
}

fn sidecar(name: &str, extra: Value) -> Value {
    let mut c = ctr(name, extra);
    c["restartPolicy"] = json!("Always");
    c
}

fn pod(policy: &str, inits: Vec<Value>, main: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
        "spec": {"restartPolicy": policy, "initContainers": inits, "containers": [main]},
    }))
    .unwrap()
}

fn worker(p: &Pod) -> (PodWorker, Arc<FakeCri>, Arc<FakeRecorder>) {
    let fake = Arc::new(FakeCri::default());
    let rec = Arc::new(FakeRecorder::default());
    let w = PodWorker::new(p, cfg(), fake.clone())
        .unwrap()
        .with_recorder(rec.clone());
    (w, fake, rec)
}

/// The containers created so far, as `name/attempt`.
fn created(fake: &FakeCri) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter_map(|c| {
            let rest = c.strip_prefix("CreateContainer ")?;
            let mut words = rest.split(' ');
            let name = words.next()?;
            let attempt = words.next()?.strip_prefix("attempt=")?;
            Some(format!("{name}/{attempt}"))
        })
        .collect()
}

/// The id of the latest container named `name`.
fn id_of(fake: &FakeCri, name: &str) -> String {
    let st = fake.st();
    st.containers
        .values()
        .filter(|c| c.name == name)
        .max_by_key(|c| c.attempt)
        .map(|c| c.id.clone())
        .expect("no such container")
}

fn api(w: &PodWorker) -> ApiPodStatus {
    api_status(&w.status(), NODE_IP, None)
}

fn condition(s: &ApiPodStatus, type_: &str) -> String {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn init_status(s: &ApiPodStatus, name: &str) -> k8s_openapi::api::core::v1::ContainerStatus {
    s.init_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .cloned()
        .expect("no such init container status")
}

#[tokio::test]
async fn a_started_sidecar_lets_the_next_init_container_run_and_keeps_running() {
    let p = pod(
        "Always",
        vec![sidecar("side", json!({})), ctr("init", json!({}))],
        ctr("main", json!({})),
    );
    let (mut w, fake, _) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    // No startup probe: started once running, so the regular init container follows in the same sync.
    assert_eq!(created(&fake), vec!["side/0", "init/0"]);
    let s = api(&w);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(condition(&s, "Initialized"), "False");
    let side = init_status(&s, "side");
    assert_eq!(side.started, Some(true));
    assert!(side.ready, "no readiness probe: ready once started");
    assert!(side.state.unwrap().running.is_some());

    fake.exit("init", 0);
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["side/0", "init/0", "main/0"]);
    let s = api(&w);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(condition(&s, "Initialized"), "True");
    assert_eq!(condition(&s, "Ready"), "True");
    let init = init_status(&s, "init");
    assert!(init.ready, "a completed regular init container is ready");
    assert_eq!(init.started, Some(false));
    assert!(init_status(&s, "side").state.unwrap().running.is_some());
    // Steady state: nothing is created again.
    w.sync(t0).await;
    assert_eq!(created(&fake).len(), 3);
}

#[tokio::test]
async fn a_sidecar_is_restarted_whatever_the_pods_policy_and_does_not_hold_up_the_app() {
    let p = pod(
        "Never",
        vec![sidecar("side", json!({}))],
        ctr("main", json!({})),
    );
    let (mut w, fake, _) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["side/0", "main/0"]);
    fake.exit("side", 0);
    w.sync(t0).await;
    assert_eq!(
        created(&fake),
        vec!["side/0", "main/0", "side/1"],
        "restarted at once (the first restart has no back-off)"
    );
    let s = api(&w);
    let side = init_status(&s, "side");
    assert_eq!(side.restart_count, 1);
    assert!(side.last_state.unwrap().terminated.is_some());
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(condition(&s, "Initialized"), "True");
}

#[tokio::test]
async fn a_startup_probe_holds_up_the_next_container_and_the_other_probes() {
    let probe = json!({"exec": {"command": ["check"]}, "periodSeconds": 10, "failureThreshold": 3});
    let p = pod(
        "Always",
        vec![sidecar(
            "side",
            json!({"startupProbe": probe,
                   "readinessProbe": {"exec": {"command": ["ready"]}}}),
        )],
        ctr("main", json!({})),
    );
    let (mut w, fake, rec) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["side/0"]);
    let s = api(&w);
    let side = init_status(&s, "side");
    assert_eq!(
        side.started,
        Some(false),
        "running, but its startup probe has not passed"
    );
    assert!(!side.ready);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(condition(&s, "Initialized"), "False");

    // The first probe fails: an Unhealthy event, nothing else runs (no readiness probe either).
    fake.st().exec_results.push_back(1);
    fake.take_calls();
    w.sync(t0 + Duration::from_secs(1)).await;
    let side_id = id_of(&fake, "side");
    assert_eq!(fake.take_calls(), vec![format!("ExecSync {side_id} check")]);
    assert!(rec
        .events()
        .iter()
        .any(|e| e.reason == "Unhealthy" && e.message.starts_with("Startup probe failed: ")));
    // Not due again before its period.
    w.sync(t0 + Duration::from_secs(5)).await;
    assert!(fake.take_calls().is_empty());

    // It passes: the sidecar has started, the app container starts in the same sync, and the
    // readiness probe runs from then on.
    w.sync(t0 + Duration::from_secs(11)).await;
    let calls = fake.calls();
    assert_eq!(calls[0], format!("ExecSync {side_id} check"));
    assert_eq!(calls[1], format!("ExecSync {side_id} ready"));
    assert_eq!(created(&fake), vec!["main/0"]);
    let s = api(&w);
    let side = init_status(&s, "side");
    assert_eq!(side.started, Some(true));
    assert!(side.ready);
    assert_eq!(condition(&s, "Initialized"), "True");
    // Once started, the startup probe is not run again.
    fake.take_calls();
    w.sync(t0 + Duration::from_secs(30)).await;
    assert!(!fake
        .calls()
        .iter()
        .any(|c| c == &format!("ExecSync {side_id} check")));
}

#[tokio::test]
async fn a_failed_startup_probe_restarts_the_container_with_upstreams_message() {
    let probe = json!({"exec": {"command": ["check"]}, "failureThreshold": 1});
    let p = pod(
        "Always",
        vec![sidecar("side", json!({"startupProbe": probe}))],
        ctr("main", json!({})),
    );
    let (mut w, fake, rec) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.st().exec_results.push_back(1);
    w.sync(t0).await;
    let killing: Vec<String> = rec
        .events()
        .into_iter()
        .filter(|e| e.reason == "Killing")
        .map(|e| e.message)
        .collect();
    assert_eq!(killing, vec!["Init container side failed startup probe"]);
    let calls = fake.calls();
    assert!(calls.iter().any(|c| c.starts_with("StopContainer ")));
    w.sync(t0).await;
    assert_eq!(
        created(&fake),
        vec!["side/0", "side/1"],
        "restarted; the app still waits"
    );
}

#[tokio::test]
async fn an_app_container_failing_its_startup_probe_is_killed_without_liveness_probes() {
    let p = pod(
        "Always",
        vec![],
        ctr(
            "main",
            json!({"startupProbe": {"exec": {"command": ["check"]}, "failureThreshold": 2},
                   "livenessProbe": {"exec": {"command": ["alive"]}}}),
        ),
    );
    let (mut w, fake, rec) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.st().exec_results.extend([1, 1]);
    w.sync(t0).await;
    w.sync(t0 + Duration::from_secs(10)).await;
    assert!(
        !fake.calls().iter().any(|c| c.ends_with(" alive")),
        "liveness waits for the startup probe"
    );
    let killing: Vec<String> = rec
        .events()
        .into_iter()
        .filter(|e| e.reason == "Killing")
        .map(|e| e.message)
        .collect();
    assert_eq!(
        killing,
        vec!["Container main failed startup probe, will be restarted"]
    );
    let st = w.status();
    assert!(!st.containers[0].started && !st.containers[0].ready);
}

#[tokio::test]
async fn a_sidecars_readiness_counts_in_the_pods() {
    let p = pod(
        "Always",
        vec![sidecar(
            "side",
            json!({"readinessProbe": {"exec": {"command": ["ready"]}}}),
        )],
        ctr("main", json!({})),
    );
    let (mut w, fake, _) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["side/0", "main/0"]);
    fake.st().exec_results.push_back(1);
    w.sync(t0).await;
    let s = api(&w);
    assert!(!init_status(&s, "side").ready);
    assert_eq!(condition(&s, "ContainersReady"), "False");
    assert_eq!(condition(&s, "Ready"), "False");
    w.sync(t0 + Duration::from_secs(10)).await;
    let s = api(&w);
    assert!(init_status(&s, "side").ready);
    assert_eq!(condition(&s, "Ready"), "True");
}

#[tokio::test]
async fn sidecars_stop_last_first_once_the_app_containers_are_done() {
    let p = pod(
        "Never",
        vec![sidecar("side1", json!({})), sidecar("side2", json!({}))],
        ctr("main", json!({})),
    );
    let (mut w, fake, rec) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["side1/0", "side2/0", "main/0"]);
    let (side1, side2) = (id_of(&fake, "side1"), id_of(&fake, "side2"));
    fake.exit("main", 0);
    fake.take_calls();
    w.sync(t0).await;
    let stops: Vec<String> = fake
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("StopContainer "))
        .collect();
    assert_eq!(
        stops,
        vec![
            format!("StopContainer {side2} timeout=30"),
            format!("StopContainer {side1} timeout=30"),
        ]
    );
    assert_eq!(rec.reasons().iter().filter(|r| *r == "Killing").count(), 2);
    let s = api(&w);
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    for name in ["side1", "side2"] {
        assert!(init_status(&s, name).state.unwrap().terminated.is_some());
    }
    // Never restarted.
    w.sync(t0 + Duration::from_secs(60)).await;
    assert!(created(&fake).is_empty());
}

#[tokio::test]
async fn a_failed_init_container_stops_the_sidecars_under_never() {
    let p = pod(
        "Never",
        vec![sidecar("side", json!({})), ctr("init", json!({}))],
        ctr("main", json!({})),
    );
    let (mut w, fake, _) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.exit("init", 3);
    w.sync(t0).await;
    let side = id_of(&fake, "side");
    assert!(fake
        .calls()
        .contains(&format!("StopContainer {side} timeout=30")));
    assert_eq!(api(&w).phase.as_deref(), Some("Failed"));
    assert_eq!(created(&fake), vec!["side/0", "init/0"]);
}

#[tokio::test]
async fn on_termination_sidecars_outlive_the_app_containers_prestop_hooks() {
    let p = pod(
        "Always",
        vec![sidecar("side", json!({}))],
        ctr(
            "main",
            json!({"lifecycle": {"preStop": {"exec": {"command": ["bye"]}}}}),
        ),
    );
    let (mut w, fake, _) = worker(&p);
    w.sync(Instant::now()).await;
    let (side, main) = (id_of(&fake, "side"), id_of(&fake, "main"));
    fake.take_calls();
    w.kill(Duration::from_secs(15)).await.unwrap();
    let calls = fake.calls();
    let at = |call: &str| {
        calls
            .iter()
            .position(|c| c.starts_with(call))
            .unwrap_or_else(|| panic!("no {call:?} in {calls:?}"))
    };
    let pre_stop = at(&format!("ExecSync {main} bye"));
    let stop_main = at(&format!("StopContainer {main} "));
    let stop_side = at(&format!("StopContainer {side} "));
    assert!(
        pre_stop < stop_main && stop_main < stop_side,
        "the sidecar is stopped after the app container: {calls:?}"
    );
}

#[tokio::test]
async fn adopting_a_pod_with_a_sidecar_keeps_it_initialized() {
    let p = pod(
        "Always",
        vec![sidecar("side", json!({})), ctr("init", json!({}))],
        ctr("main", json!({})),
    );
    let (mut w, fake, _) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.exit("init", 0);
    w.sync(t0).await;
    // The regular init container's container is gone (removed), the sidecar has exited.
    let init = id_of(&fake, "init");
    fake.st().containers.remove(&init);
    fake.exit("side", 1);
    let sandbox = fake.st().sandboxes.values().next().cloned().unwrap();
    let found: Vec<_> = fake.st().containers.values().cloned().collect();

    let mut adopted = PodWorker::new(&p, cfg(), fake.clone()).unwrap();
    let surplus = adopted.adopt(&sandbox, &found, t0);
    assert!(surplus.is_empty());
    fake.take_calls();
    adopted.sync(t0).await;
    assert_eq!(
        created(&fake),
        vec!["side/1"],
        "the sidecar restarts; the completed init container does not run again"
    );
    let s = api(&adopted);
    assert_eq!(condition(&s, "Initialized"), "True");
    assert!(init_status(&s, "init").ready);
}
