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
        pods_root: unique_pods_root(),
        secrets_in_memory: false,
        allocatable: crate::env_resources::NodeAllocatable {
            cpu: "2".into(),
            memory: "4Gi".into(),
        },
        dns: test_dns(),
        node_hosts_file: "/etc/hosts".into(),
        cgroups: None,
        pod_pids_limit: None,
    })
}

/// Cluster DNS on, no host resolv.conf: the sandbox's DNS config does not depend on the test machine.
pub fn test_dns() -> crate::dns_config::DnsSettings {
    crate::dns_config::DnsSettings {
        cluster_dns: vec!["10.96.0.10".parse().unwrap()],
        cluster_domain: "cluster.local".into(),
        resolv_conf: None,
    }
}

/// A pods root of its own per worker config: the workers write each pod's etc-hosts there, and tests
/// running side by side reuse pod uids (and remove their pod directories on kill). Under one fixed
/// parent, so repeated runs reuse the same directories.
pub fn unique_pods_root() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("kiln-worker-tests/{n}"))
}

pub fn pod(extra: serde_json::Value) -> Pod {
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

pub fn worker(p: &Pod) -> (PodWorker, Arc<FakeCri>) {
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
    // Second exit: first shown as the exit itself (upstream's kubelet reports the back-off a sync
    // later), the pod still Running; then CrashLoopBackOff for the base back-off (10 s), then
    // restart #2.
    fake.exit("main", 3);
    w.sync(t0 + Duration::from_secs(1)).await;
    assert_eq!(reason(&w), "Terminated:Error");
    let st = w.status();
    assert!(st.containers[0].restarting);
    assert_eq!(crate::mirror::phase(&st), "Running");
    assert_eq!(
        st.containers[0]
            .last_termination
            .as_ref()
            .map(|t| t.exit_code),
        Some(3),
        "lastState is still the first exit"
    );
    w.sync(t0 + Duration::from_secs(7)).await;
    assert_eq!(reason(&w), "CrashLoopBackOff");
    assert!(!w.status().containers[0].restarting);
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
    assert_eq!(reason(&w), "Terminated:Error");
    w.sync(t0 + Duration::from_secs(18)).await;
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
    assert_eq!(
        config.mounts.len(),
        2,
        "the volume, then the kubelet's /etc/hosts"
    );
    assert_eq!(config.mounts[1].container_path, "/etc/hosts");
    assert_eq!(
        std::path::Path::new(&config.mounts[1].host_path),
        tmp.path().join("u1/etc-hosts")
    );
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

fn sandbox_config(fake: &FakeCri) -> cri::PodSandboxConfig {
    let st = fake.st();
    assert_eq!(st.sandbox_configs.len(), 1, "one sandbox");
    st.sandbox_configs.values().next().unwrap().clone()
}

fn container_config(fake: &FakeCri, name: &str) -> cri::ContainerConfig {
    fake.st()
        .configs
        .values()
        .find(|c| c.metadata.as_ref().unwrap().name == name)
        .unwrap()
        .clone()
}

fn env_of(c: &cri::ContainerConfig) -> Vec<(String, String)> {
    c.envs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

fn hosts_of(c: &cri::ContainerConfig) -> (cri::Mount, String) {
    let m = c
        .mounts
        .iter()
        .find(|m| m.container_path == "/etc/hosts")
        .expect("an /etc/hosts mount")
        .clone();
    let text = std::fs::read_to_string(&m.host_path).unwrap();
    (m, text)
}

#[tokio::test]
async fn the_sandbox_gets_the_cluster_dns_config_and_host_name() {
    let p = pod(serde_json::json!({"spec": {
        "hostname": "db-0", "subdomain": "db", "setHostnameAsFQDN": true,
        "dnsConfig": {"searches": ["extra.example"], "options": [{"name": "ndots", "value": "2"}]}
    }}));
    let (mut w, fake) = worker(&p);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    let sb = sandbox_config(&fake);
    assert_eq!(sb.hostname, "db-0.db.default.svc.cluster.local");
    assert_eq!(
        sb.dns_config,
        Some(cri::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
                "extra.example".into()
            ],
            options: vec!["ndots:2".into()],
        })
    );
    // CreateContainer is sent the same sandbox config (containerd's HOSTNAME comes from it).
    assert_eq!(w.sandbox_config.hostname, sb.hostname);
}

#[tokio::test]
async fn an_fqdn_too_long_fails_the_sandbox_with_upstreams_message() {
    let long = "a".repeat(40);
    let p = pod(serde_json::json!({"spec": {"subdomain": long, "setHostnameAsFQDN": true}}));
    let (mut w, fake) = worker(&p);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "ContainerCreating");
    assert!(
        message(&w).starts_with(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN web.aaaa"
        ),
        "{}",
        message(&w)
    );
    assert!(!fake.calls().iter().any(|c| c.starts_with("RunPodSandbox")));
}

#[tokio::test]
async fn host_network_pods_keep_the_nodes_name_and_resolver_and_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.250.0.1\nsearch lab.example\n").unwrap();
    let node_hosts = dir.path().join("hosts");
    std::fs::write(&node_hosts, "127.0.0.1\tlocalhost\n10.250.0.11\thost1\n").unwrap();
    let mut c = (*cfg()).clone();
    c.dns.resolv_conf = Some(resolv);
    c.node_hosts_file = node_hosts;
    let p = pod(serde_json::json!({"spec": {
        "hostNetwork": true,
        "hostAliases": [{"ip": "10.250.0.99", "hostnames": ["registry.lab"]}]
    }}));
    let fake = Arc::new(FakeCri::default());
    let mut w = PodWorker::new(&p, Arc::new(c), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    let sb = sandbox_config(&fake);
    assert_eq!(sb.hostname, "", "the node's UTS name");
    // ClusterFirst on the host network is Default: the host's resolver.
    let dns = sb.dns_config.unwrap();
    assert_eq!(
        (dns.servers, dns.searches),
        (
            vec!["10.250.0.1".to_string()],
            vec!["lab.example".to_string()]
        )
    );
    let (m, text) = hosts_of(&container_config(&fake, "main"));
    assert!(!m.readonly);
    assert_eq!(
        text,
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n10.250.0.11\thost1\n\n# Entries added by HostAliases.\n10.250.0.99\tregistry.lab\n"
    );
}

#[tokio::test]
async fn containers_get_the_kubelets_hosts_file_with_the_pod_ip() {
    let p = pod(serde_json::json!({
        "spec": {
            "subdomain": "web",
            "hostAliases": [{"ip": "10.250.0.99", "hostnames": ["registry.lab", "reg"]}],
            "initContainers": [{"name": "init", "image": IMG}]
        }
    }));
    let (mut w, fake) = worker(&p);
    w.sync(Instant::now()).await;
    // The init container got it too.
    let (m, text) = hosts_of(&container_config(&fake, "init"));
    assert!(!m.readonly && m.selinux_relabel);
    assert!(m.host_path.ends_with("/u1/etc-hosts"), "{}", m.host_path);
    assert_eq!(
        text,
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
         10.244.1.2\tweb.web.default.svc.cluster.local\tweb\n\n\
         # Entries added by HostAliases.\n10.250.0.99\tregistry.lab\treg\n"
    );
    // A container that mounts /etc/hosts itself keeps its own.
    let p = pod(serde_json::json!({
        "spec": {"volumes": [{"name": "h", "emptyDir": {}}]},
        "container": {"volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]}
    }));
    let (mut w, fake) = worker(&p);
    w.sync(Instant::now()).await;
    let mounts = container_config(&fake, "main").mounts;
    assert_eq!(
        mounts
            .iter()
            .filter(|m| m.container_path == "/etc/hosts")
            .count(),
        1
    );
    assert!(!mounts[0].host_path.ends_with("etc-hosts"));
}

#[tokio::test]
async fn a_recreated_sandbox_rewrites_the_hosts_file_with_its_new_ip() {
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    w.sync(Instant::now()).await;
    let (m, before) = hosts_of(&container_config(&fake, "main"));
    assert!(before.contains("10.244.1.2\tweb\n"), "{before}");
    fake.st().sandboxes.get_mut("sb1").unwrap().ready = false;
    w.sync(Instant::now()).await;
    let after = std::fs::read_to_string(&m.host_path).unwrap();
    assert!(!after.contains("10.244.1.2\t"), "{after}");
    assert!(
        after.contains(&format!("{}\tweb\n", w.status().pod_ip.unwrap())),
        "{after}"
    );
}

fn service(
    ns: &str,
    name: &str,
    ip: &str,
    ports: serde_json::Value,
) -> k8s_openapi::api::core::v1::Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterIP": ip, "ports": ports}
    }))
    .unwrap()
}

fn cluster_services() -> Vec<k8s_openapi::api::core::v1::Service> {
    vec![
        service(
            "default",
            "kubernetes",
            "10.96.0.1",
            serde_json::json!([{"name": "https", "port": 443}]),
        ),
        service(
            "default",
            "web",
            "10.96.3.4",
            serde_json::json!([{"port": 80}]),
        ),
        service(
            "apps",
            "db",
            "10.96.5.5",
            serde_json::json!([{"port": 5432}]),
        ),
    ]
}

#[tokio::test]
async fn containers_get_service_variables_under_their_own_env() {
    let services = Arc::new(crate::services::FakeServices::synced(cluster_services()));
    let p = pod(serde_json::json!({"container": {
        "env": [{"name": "WEB_SERVICE_PORT", "value": "8080"},
                {"name": "API", "value": "$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}],
        "args": ["--web=$(WEB_SERVICE_HOST)"]
    }}));
    let (w, fake) = worker(&p);
    let mut w = w.with_services(services);
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    let c = container_config(&fake, "main");
    let env = env_of(&c);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(
        env[0],
        ("WEB_SERVICE_PORT".into(), "8080".into()),
        "own env first"
    );
    assert_eq!(get("API"), Some("10.96.0.1:443"));
    assert_eq!(
        get("WEB_SERVICE_PORT"),
        Some("8080"),
        "the container's own wins"
    );
    assert_eq!(
        env.iter().filter(|(k, _)| k == "WEB_SERVICE_PORT").count(),
        1
    );
    for (k, v) in [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
        ("KUBERNETES_PORT_443_TCP_PORT", "443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ("WEB_SERVICE_HOST", "10.96.3.4"),
        ("WEB_PORT_80_TCP", "tcp://10.96.3.4:80"),
    ] {
        assert_eq!(get(k), Some(v), "{k}");
    }
    assert_eq!(get("DB_SERVICE_HOST"), None, "another namespace's Service");
    assert_eq!(
        c.args,
        vec!["--web=10.96.3.4"],
        "$(VAR) in args sees Service variables"
    );
}

#[tokio::test]
async fn enable_service_links_false_keeps_only_the_kubernetes_variables() {
    let services = Arc::new(crate::services::FakeServices::synced(cluster_services()));
    let (w, fake) = worker(&pod(
        serde_json::json!({"spec": {"enableServiceLinks": false}}),
    ));
    let mut w = w.with_services(services);
    w.sync(Instant::now()).await;
    let names: Vec<String> = env_of(&container_config(&fake, "main"))
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(
        names.iter().all(|k| k.starts_with("KUBERNETES_")),
        "{names:?}"
    );
    assert_eq!(names.len(), 8);
}

#[tokio::test]
async fn containers_wait_for_the_first_list_of_services() {
    let services = Arc::new(crate::services::FakeServices::default());
    let (w, fake) = worker(&pod(serde_json::json!({})));
    let mut w = w.with_services(services.clone());
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "CreateContainerConfigError");
    assert_eq!(
        message(&w),
        "services have not yet been read at least once, cannot construct envvars"
    );
    assert!(!fake
        .calls()
        .iter()
        .any(|c| c.starts_with("CreateContainer ")));
    *services.0.lock().unwrap() = Some(cluster_services().into_iter().map(Arc::new).collect());
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    // Without an API (no Services source at all) there are simply none.
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    assert!(env_of(&container_config(&fake, "main")).is_empty());
}

#[tokio::test]
async fn a_runtime_class_picks_the_sandbox_handler_and_a_missing_one_fails_the_sandbox() {
    let tmp = tempfile::tempdir().unwrap();
    let objects = Arc::new(FakeObjects::default());
    let p = pod(serde_json::json!({
        "spec": {"automountServiceAccountToken": false, "runtimeClassName": "sandboxed"}
    }));
    let (mut w, fake) = with_objects(&p, tmp.path(), objects.clone());
    w.sync(Instant::now()).await;
    // No such class: no sandbox, and upstream's FailedCreatePodSandBox text in the waiting message.
    assert!(!fake.calls().iter().any(|c| c.starts_with("RunPodSandbox")));
    assert_eq!(reason(&w), "ContainerCreating");
    assert!(
        message(&w).contains("runtimeclass.node.k8s.io \"sandboxed\" not found"),
        "{}",
        message(&w)
    );
    objects
        .runtime_classes
        .lock()
        .unwrap()
        .insert("sandboxed".into(), "gvisor".into());
    fake.take_calls();
    w.sync(Instant::now()).await;
    assert!(
        fake.calls()
            .iter()
            .any(|c| c == "RunPodSandbox web handler=gvisor"),
        "{:?}",
        fake.calls()
    );
}

#[tokio::test]
async fn an_updated_pod_rewrites_its_downward_api_volume_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let objects = Arc::new(FakeObjects::default());
    let mut p = pod(serde_json::json!({
        "spec": {"automountServiceAccountToken": false,
                 "volumes": [{"name": "podinfo", "downwardAPI": {"items": [
                     {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]},
        "container": {"volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"}]}
    }));
    p.metadata.labels = Some([("key1".to_string(), "value1".to_string())].into());
    let (mut w, fake) = with_objects(&p, tmp.path(), objects);
    let t0 = Instant::now();
    w.sync(t0).await;
    assert_eq!(reason(&w), "Running");
    let labels = tmp
        .path()
        .join("u1/volumes/kubernetes.io~downward-api/podinfo/labels");
    assert_eq!(
        std::fs::read_to_string(&labels).unwrap(),
        "key1=\"value1\"\n"
    );
    fake.take_calls();

    let mut updated = p.clone();
    updated.metadata.labels = Some([("key3".to_string(), "value3".to_string())].into());
    w.update_pod(&updated).await;
    assert_eq!(
        std::fs::read_to_string(&labels).unwrap(),
        "key3=\"value3\"\n",
        "rewritten before the next resync"
    );
    // The containers keep running; containers created from now on see the new labels.
    w.sync(t0 + Duration::from_secs(1)).await;
    assert!(fake.take_calls().is_empty());
    assert_eq!(w.pod.metadata.labels, updated.metadata.labels);
}

#[tokio::test]
async fn the_pod_cgroup_is_made_with_its_limits_before_the_sandbox_and_removed_with_the_pod() {
    use crate::cgroupfs::{Op, Recording};
    let cgroups = Arc::new(Recording::default());
    let mut c = (*cfg()).clone();
    c.cgroups = Some(cgroups.clone());
    c.pod_pids_limit = Some(512);
    let p = pod(serde_json::json!({"container": {"resources": {
        "requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"}}}}));
    let fake = Arc::new(FakeCri::default());
    let mut w = PodWorker::new(&p, Arc::new(c), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    let path = "/kubepods/burstable/podu1".to_string();
    assert_eq!(
        cgroups.ops(),
        vec![Op::Ensure(
            path.clone(),
            crate::qos_cgroups::CgroupResources {
                cpu_shares: Some(102),
                cpu_quota: Some(20_000),
                memory_limit: Some(64 << 20),
                pids_limit: Some(512),
            }
        )]
    );
    assert_eq!(
        sandbox_config(&fake).linux.unwrap().cgroup_parent,
        path,
        "containerd puts the sandbox and the containers below the pod's cgroup"
    );
    w.kill(Duration::from_secs(1)).await.unwrap();
    assert_eq!(cgroups.ops().last(), Some(&Op::Remove(path)));
}

#[tokio::test]
async fn a_killed_container_reports_its_real_exit() {
    // Two containers: `main` exits 0 on SIGTERM, `side` has to be killed.
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": IMG}, {"name": "side", "image": IMG}]}
    }))
    .unwrap();
    let (mut w, fake) = worker(&p);
    w.sync(Instant::now()).await;
    assert!(matches!(state(&w), ContainerState::Running { .. }));
    fake.st().stop_exit_codes.insert("main".into(), 0);
    w.kill(Duration::from_secs(4)).await.unwrap();
    // The exits were read before the containers were removed.
    assert!(fake.st().containers.is_empty());
    let st = w.status();
    let exit = |i: usize| match &st.containers[i].state {
        ContainerState::Terminated(t) => (t.exit_code, t.reason.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(exit(0), (0, "Completed".to_string()));
    assert_eq!(exit(1), (137, "Error".to_string()));
    assert!(!st.containers[0].restarting && !st.containers[0].ready);
}
