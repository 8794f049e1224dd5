//! The per-pod sync against the recording fake CRI, with time passed in.

use super::*;
use crate::pod_objects::FakeObjects;
use crate::runtime::cri::fake::FakeCri;

const PAUSE: &str = "reg/pause:1";
const IMG: &str = "reg/busybox:1";

fn cfg() -> Arc<WorkerConfig> {
    Arc::new(WorkerConfig {
        log_root: "/var/log/pods".into(),
        pause_image: PAUSE.into(),
        backoff: Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: "10.250.0.11".into(),
        pods_root: std::env::temp_dir().join("kiln-worker-tests-unused"),
        secrets_in_memory: false,
        allocatable: crate::env_resources::NodeAllocatable {
            cpu: "2".into(),
            memory: "4Gi".into(),
        },
    })
}

fn pod(extra: serde_json::Value) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": IMG}]}
    });
    if let Some(spec) = extra.get("spec") {
        for (k, val) in spec.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
    }
    if let Some(c) = extra.get("container") {
        for (k, val) in c.as_object().unwrap() {
            v["spec"]["containers"][0][k] = val.clone();
        }
    }
    serde_json::from_value(v).unwrap()
}

fn worker(p: &Pod) -> (PodWorker, Arc<FakeCri>) {
    let fake = Arc::new(FakeCri::default());
    (PodWorker::new(p, cfg(), fake.clone()).unwrap(), fake)
}

fn state(w: &PodWorker) -> ContainerState {
    w.status().containers[0].state.clone()
}

fn reason(w: &PodWorker) -> String {
    match state(w) {
        ContainerState::Waiting { reason, .. } => reason,
        ContainerState::Running { .. } => "Running".into(),
        ContainerState::Terminated(t) => format!("Terminated:{}", t.reason),
    }
}

#[tokio::test]
async fn first_sync_pulls_pause_runs_sandbox_pulls_creates_and_starts() {
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    w.sync(Instant::now()).await;
    assert_eq!(
        fake.take_calls(),
        vec![
            format!("PullImage {PAUSE}"),
            "RunPodSandbox web".into(),
            format!("PullImage {IMG}"),
            "CreateContainer main attempt=0 log=main/0.log".into(),
            "StartContainer c2".into(),
        ]
    );
    let st = w.status();
    assert_eq!(st.pod_ip.as_deref(), Some("10.244.1.2"));
    assert_eq!(st.containers[0].container_id, "containerd://c2");
    assert!(
        st.containers[0].ready,
        "no readiness probe: ready when running"
    );
    // Steady state: nothing but status reads.
    w.sync(Instant::now()).await;
    assert_eq!(fake.take_calls(), Vec::<String>::new());
    assert_eq!(reason(&w), "Running");
}

#[tokio::test]
async fn pull_policies() {
    // IfNotPresent with the image present: no pull.
    let (mut w, fake) = worker(&pod(
        serde_json::json!({"container": {"imagePullPolicy": "IfNotPresent"}}),
    ));
    fake.st()
        .images
        .extend([PAUSE.to_string(), IMG.to_string()]);
    w.sync(Instant::now()).await;
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("PullImage")),
        "{:?}",
        fake.calls()
    );
    // Always: pulls even when present.
    let (mut w, fake) = worker(&pod(
        serde_json::json!({"container": {"imagePullPolicy": "Always"}}),
    ));
    fake.st()
        .images
        .extend([PAUSE.to_string(), IMG.to_string()]);
    w.sync(Instant::now()).await;
    assert_eq!(
        fake.calls()
            .iter()
            .filter(|c| c.starts_with("PullImage"))
            .count(),
        1
    );
    // Never with the image absent: ErrImageNeverPull, nothing created.
    let (mut w, fake) = worker(&pod(
        serde_json::json!({"container": {"imagePullPolicy": "Never"}}),
    ));
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "ErrImageNeverPull");
    assert!(!fake
        .calls()
        .iter()
        .any(|c| c.starts_with("CreateContainer")));
}

#[tokio::test]
async fn failed_pull_backs_off_as_image_pull_back_off() {
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    fake.st().failing_pulls.insert(IMG.into());
    let t0 = Instant::now();
    w.sync(t0).await;
    assert_eq!(reason(&w), "ErrImagePull");
    fake.take_calls();
    w.sync(t0 + Duration::from_secs(5)).await;
    assert_eq!(reason(&w), "ImagePullBackOff");
    assert!(fake.take_calls().is_empty(), "no pull during back-off");
    fake.st().failing_pulls.clear();
    w.sync(t0 + Duration::from_secs(11)).await;
    assert_eq!(reason(&w), "Running");
}

#[tokio::test]
async fn crash_loop_restarts_with_growing_backoff_and_keeps_one_dead_container() {
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.take_calls();
    // First exit: restarted at once, lastState has the exit.
    fake.exit("main", 3);
    w.sync(t0).await;
    assert_eq!(
        fake.take_calls(),
        vec![
            // busybox:1 is tagged, so IfNotPresent: pulled once, not again.
            "CreateContainer main attempt=1 log=main/1.log".to_string(),
            "StartContainer c3".into()
        ]
    );
    let st = w.status().containers[0].clone();
    assert_eq!(st.restart_count, 1);
    let last = st.last_termination.unwrap();
    assert_eq!((last.exit_code, last.reason.as_str()), (3, "Error"));
    // Second exit: CrashLoopBackOff for the base back-off (10 s), then restart #2.
    fake.exit("main", 3);
    w.sync(t0 + Duration::from_secs(1)).await;
    assert_eq!(reason(&w), "CrashLoopBackOff");
    let msg = match state(&w) {
        ContainerState::Waiting { message, .. } => message.unwrap(),
        s => panic!("{s:?}"),
    };
    assert!(
        msg.starts_with("back-off 10s restarting failed container=main"),
        "{msg}"
    );
    w.sync(t0 + Duration::from_secs(10)).await;
    assert_eq!(reason(&w), "CrashLoopBackOff");
    fake.take_calls();
    w.sync(t0 + Duration::from_secs(11)).await;
    assert_eq!(reason(&w), "Running");
    assert_eq!(w.status().containers[0].restart_count, 2);
    // The run before the previous one is removed; the previous one stays for its log.
    assert!(fake
        .take_calls()
        .contains(&"RemoveContainer c2".to_string()));
    assert!(fake.st().containers.contains_key("c3"));
    // Third exit: 20 s.
    fake.exit("main", 3);
    w.sync(t0 + Duration::from_secs(12)).await;
    let msg = match state(&w) {
        ContainerState::Waiting { message, .. } => message.unwrap(),
        s => panic!("{s:?}"),
    };
    assert!(msg.starts_with("back-off 20s"), "{msg}");
}

#[tokio::test]
async fn restart_policies_never_and_on_failure() {
    let (mut w, fake) = worker(&pod(
        serde_json::json!({"spec": {"restartPolicy": "Never"}}),
    ));
    w.sync(Instant::now()).await;
    fake.exit("main", 1);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Terminated:Error");
    fake.take_calls();
    w.sync(Instant::now()).await;
    assert!(
        fake.take_calls().is_empty(),
        "a terminated Never container is left alone"
    );
    assert_eq!(crate::mirror::phase(&w.status()), "Failed");

    let (mut w, fake) = worker(&pod(
        serde_json::json!({"spec": {"restartPolicy": "OnFailure"}}),
    ));
    w.sync(Instant::now()).await;
    fake.exit("main", 0);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Terminated:Completed");
    assert_eq!(crate::mirror::phase(&w.status()), "Succeeded");

    let (mut w, fake) = worker(&pod(
        serde_json::json!({"spec": {"restartPolicy": "OnFailure"}}),
    ));
    w.sync(Instant::now()).await;
    fake.exit("main", 2);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    assert_eq!(w.status().containers[0].restart_count, 1);
}

#[tokio::test]
async fn readiness_probe_gates_ready() {
    let p = pod(
        serde_json::json!({"container": {"readinessProbe": {"exec": {"command": ["cat", "/ready"]},
        "periodSeconds": 1, "failureThreshold": 1}}}),
    );
    let (mut w, fake) = worker(&p);
    let t0 = Instant::now();
    fake.st().exec_results.extend([1, 0]);
    w.sync(t0).await;
    assert!(
        !w.status().containers[0].ready,
        "not ready before the first probe"
    );
    w.sync(t0).await; // probe 1: exit 1
    assert!(!w.status().containers[0].ready);
    w.sync(t0 + Duration::from_secs(1)).await; // probe 2: exit 0
    assert!(w.status().containers[0].ready);
    assert!(fake.calls().contains(&"ExecSync c2 cat /ready".to_string()));
}

#[tokio::test]
async fn liveness_failures_restart_the_container() {
    let p = pod(serde_json::json!({
        "spec": {"terminationGracePeriodSeconds": 7},
        "container": {"livenessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 2}}}));
    let (mut w, fake) = worker(&p);
    let t0 = Instant::now();
    fake.st().exec_results.extend([1, 1]);
    w.sync(t0).await;
    w.sync(t0).await; // failure 1 of 2
    assert!(!fake.calls().iter().any(|c| c.starts_with("StopContainer")));
    w.sync(t0 + Duration::from_secs(1)).await; // failure 2: killed with the pod's grace
    assert!(
        fake.calls()
            .contains(&"StopContainer c2 timeout=7".to_string()),
        "{:?}",
        fake.calls()
    );
    w.sync(t0 + Duration::from_secs(2)).await; // exit seen: restarted (first restart is immediate)
    let st = w.status().containers[0].clone();
    assert_eq!(st.restart_count, 1);
    assert_eq!(st.last_termination.unwrap().exit_code, 137);
    assert_eq!(reason(&w), "Running");
}

#[tokio::test]
async fn kill_stops_with_grace_then_removes_everything() {
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    w.sync(Instant::now()).await;
    fake.exit("main", 1);
    w.sync(Instant::now()).await; // c2 dead (kept), c3 running
    fake.take_calls();
    w.kill(Duration::from_secs(4)).await.unwrap();
    let calls = fake.take_calls();
    assert_eq!(
        calls,
        vec![
            "StopContainer c3 timeout=4".to_string(),
            "StopPodSandbox sb1".into(),
            "RemoveContainer c3".into(),
            "RemoveContainer c2".into(),
            "RemovePodSandbox sb1".into(),
        ]
    );
    assert!(fake.st().sandboxes.is_empty() && fake.st().containers.is_empty());
}

#[tokio::test]
async fn env_references_without_an_api_client_are_a_config_error_not_a_crash() {
    let p = pod(
        serde_json::json!({"container": {"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}}),
    );
    let (mut w, fake) = worker(&p);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "CreateContainerConfigError");
    assert!(!fake
        .calls()
        .iter()
        .any(|c| c.starts_with("CreateContainer ")));
}

fn with_objects(
    p: &Pod,
    root: &std::path::Path,
    objects: Arc<FakeObjects>,
) -> (PodWorker, Arc<FakeCri>) {
    let fake = Arc::new(FakeCri::default());
    let mut c = (*cfg()).clone();
    c.pods_root = root.to_path_buf();
    let w = PodWorker::new(p, Arc::new(c), fake.clone())
        .unwrap()
        .with_objects(objects)
        .unwrap();
    (w, fake)
}

fn message(w: &PodWorker) -> String {
    match state(w) {
        ContainerState::Waiting { message, .. } => message.unwrap_or_default(),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn missing_config_map_waits_with_upstreams_message_then_starts_with_env_and_mounts() {
    let tmp = tempfile::tempdir().unwrap();
    let objects = Arc::new(FakeObjects::default());
    let p = pod(serde_json::json!({
        "spec": {"automountServiceAccountToken": false,
                 "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]},
        "container": {
            "env": [{"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]
        }
    }));
    let (mut w, fake) = with_objects(&p, tmp.path(), objects.clone());
    w.sync(Instant::now()).await;
    // The sandbox is made beside the volumes; without the ConfigMap no container is.
    assert_eq!(reason(&w), "ContainerCreating");
    assert!(
        message(&w).contains("configmap \"settings\" not found"),
        "{}",
        message(&w)
    );
    assert_eq!(
        fake.take_calls(),
        vec![format!("PullImage {PAUSE}"), "RunPodSandbox web".into()]
    );
    // The next try sets up only the volumes: the sandbox is kept.
    w.sync(Instant::now()).await;
    assert!(fake.take_calls().is_empty());

    // The volume works once the ConfigMap exists, but a missing key is CreateContainerConfigError.
    objects.put_config_map("default", "settings", &[("size", "L")]);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "CreateContainerConfigError");
    assert_eq!(
        message(&w),
        "couldn't find key color in ConfigMap default/settings"
    );

    objects.put_config_map("default", "settings", &[("color", "blue")]);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    let config = fake.st().configs.values().next().unwrap().clone();
    let env: Vec<(&str, &str)> = config
        .envs
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_str()))
        .collect();
    assert_eq!(env, vec![("COLOR", "blue"), ("IP", "10.244.1.2")]);
    assert_eq!(config.mounts.len(), 1);
    assert_eq!(config.mounts[0].container_path, "/etc/cfg");
    assert!(config.mounts[0].readonly);
    let host = std::path::Path::new(&config.mounts[0].host_path);
    assert!(host.starts_with(tmp.path().join("u1/volumes/kubernetes.io~configmap")));

    // The volume was written while the ConfigMap had only `size`; refreshed on the resync period,
    // not before.
    let t0 = Instant::now();
    w.sync(t0).await;
    assert!(host.join("size").exists() && !host.join("color").exists());
    let t1 = t0 + VOLUME_RESYNC + Duration::from_secs(1);
    w.sync(t1).await;
    assert_eq!(std::fs::read_to_string(host.join("color")).unwrap(), "blue");
    objects.put_config_map("default", "settings", &[("color", "green")]);
    w.sync(t1 + Duration::from_secs(1)).await;
    assert_eq!(std::fs::read_to_string(host.join("color")).unwrap(), "blue");
    w.sync(t1 + VOLUME_RESYNC).await;
    assert_eq!(
        std::fs::read_to_string(host.join("color")).unwrap(),
        "green"
    );

    // Killing the pod removes its volumes.
    w.kill(Duration::from_secs(1)).await.unwrap();
    assert!(!tmp.path().join("u1").exists());
}

fn init_pod(policy: &str) -> Pod {
    pod(
        serde_json::json!({"spec": {"restartPolicy": policy, "initContainers": [
            {"name": "init1", "image": IMG}, {"name": "init2", "image": IMG}
        ]}}),
    )
}

fn created(fake: &FakeCri) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter_map(|c| {
            c.strip_prefix("CreateContainer ")
                .map(|s| s.split(' ').next().unwrap_or_default().to_string())
        })
        .collect()
}

#[tokio::test]
async fn init_containers_run_one_by_one_before_the_app_containers() {
    let (mut w, fake) = worker(&init_pod("Always"));
    let st = w.status();
    assert_eq!(st.init_containers.len(), 2);
    assert_eq!(st.containers.len(), 1);
    assert!(
        matches!(&st.containers[0].state, ContainerState::Waiting { reason, .. } if reason == "PodInitializing")
    );
    let t0 = Instant::now();
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["init1"]);
    w.sync(t0).await;
    assert_eq!(
        created(&fake),
        vec!["init1"],
        "init2 waits for init1 to finish"
    );
    let api = crate::mirror::api_status(&w.status(), "10.250.0.11", None);
    assert_eq!(api.phase.as_deref(), Some("Pending"));
    let initialized = |api: &k8s_openapi::api::core::v1::PodStatus| {
        api.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Initialized")
            .unwrap()
            .status
            .clone()
    };
    assert_eq!(initialized(&api), "False");
    assert_eq!(api.init_container_statuses.as_ref().unwrap().len(), 2);

    // init1 fails: restarted (Always counts as OnFailure for init containers), app still waiting.
    fake.exit("init1", 1);
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["init1", "init1"]);
    assert_eq!(w.status().init_containers[0].restart_count, 1);
    // Succeeds: init2 starts in the same sync; then the app.
    fake.exit("init1", 0);
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["init1", "init1", "init2"]);
    fake.exit("init2", 0);
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["init1", "init1", "init2", "main"]);
    let st = w.status();
    assert!(st.containers[0].is_running());
    assert!(st
        .init_containers
        .iter()
        .all(|c| matches!(&c.state, ContainerState::Terminated(t) if t.reason == "Completed")));
    let api = crate::mirror::api_status(&st, "10.250.0.11", None);
    assert_eq!(api.phase.as_deref(), Some("Running"));
    assert_eq!(initialized(&api), "True");
    // A completed init container is never rerun.
    w.sync(t0).await;
    assert_eq!(created(&fake).len(), 4);
}

#[tokio::test]
async fn a_new_sandbox_runs_the_init_containers_again() {
    let (mut w, fake) = worker(&init_pod("Always"));
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.exit("init1", 0);
    w.sync(t0).await;
    fake.exit("init2", 0);
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["init1", "init2", "main"]);
    {
        let mut st = fake.st();
        st.sandboxes.clear();
        st.containers.clear();
    }
    fake.take_calls();
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["init1"], "init first, the app waits");
    let st = w.status();
    assert!(!st.containers[0].is_running());
    assert_eq!(
        crate::mirror::api_status(&st, "10.250.0.11", None)
            .phase
            .as_deref(),
        Some("Pending")
    );
    fake.exit("init1", 0);
    w.sync(t0).await;
    fake.exit("init2", 0);
    w.sync(t0).await;
    assert_eq!(created(&fake), vec!["init1", "init2", "main"]);
    let st = w.status();
    assert!(st.containers[0].is_running());
    assert_eq!(st.containers[0].restart_count, 1);
}

#[tokio::test]
async fn a_failed_init_container_fails_the_pod_under_never() {
    let (mut w, fake) = worker(&init_pod("Never"));
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.exit("init1", 2);
    w.sync(t0).await;
    w.sync(t0).await;
    assert_eq!(
        created(&fake),
        vec!["init1"],
        "neither retried nor followed"
    );
    let api = crate::mirror::api_status(&w.status(), "10.250.0.11", None);
    assert_eq!(api.phase.as_deref(), Some("Failed"));
}

#[tokio::test]
async fn a_lost_sandbox_is_recreated_and_its_containers_restarted() {
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    let t0 = Instant::now();
    w.sync(t0).await;
    // The sandbox disappears behind the kubelet's back (with its containers).
    {
        let mut st = fake.st();
        st.sandboxes.clear();
        st.containers.clear();
    }
    fake.take_calls();
    w.sync(t0).await;
    let calls = fake.take_calls();
    assert!(
        calls.contains(&"RunPodSandbox web".to_string()),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("CreateContainer main attempt=1")),
        "{calls:?}"
    );
    let st = w.status();
    assert_eq!(st.containers[0].restart_count, 1);
    assert_eq!(
        st.containers[0].last_termination.as_ref().unwrap().reason,
        "ContainerStatusUnknown"
    );
    assert!(st.pod_ip.is_some());
}
