//! The events a pod's sync records and its lifecycle hooks, against the fake CRI and the recording
//! event fake, with time passed in.

use super::*;
use crate::events::{FakeRecorder, Recorded};
use crate::runtime::cri::fake::FakeCri;

const PAUSE: &str = "reg/pause:1";
const IMG: &str = "reg/busybox:1";

fn cfg() -> Arc<WorkerConfig> {
    Arc::new(WorkerConfig {
        log_root: "/var/log/pods".into(),
        pause_image: PAUSE.into(),
        backoff: crate::runtime::Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: "10.250.0.11".into(),
        pods_root: super::tests::unique_pods_root(),
        secrets_in_memory: false,
        allocatable: NodeAllocatable::default(),
        dns: super::tests::test_dns(),
        node_hosts_file: "/etc/hosts".into(),
        cgroups: None,
        pod_pids_limit: None,
    })
}

fn pod(spec: serde_json::Value, container: serde_json::Value) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
        "spec": {"containers": [{"name": "main", "image": IMG}]}
    });
    for (k, val) in spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    for (k, val) in container.as_object().unwrap() {
        v["spec"]["containers"][0][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn worker(p: &Pod) -> (PodWorker, Arc<FakeCri>, Arc<FakeRecorder>) {
    let fake = Arc::new(FakeCri::default());
    let rec = Arc::new(FakeRecorder::default());
    let w = PodWorker::new(p, cfg(), fake.clone())
        .unwrap()
        .with_recorder(rec.clone());
    (w, fake, rec)
}

fn summary(events: &[Recorded]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("{} {}: {}", e.type_.as_str(), e.reason, e.message))
        .collect()
}

fn reason(w: &PodWorker) -> String {
    match &w.status().containers[0].state {
        ContainerState::Waiting { reason, .. } => reason.clone(),
        ContainerState::Running { .. } => "Running".into(),
        ContainerState::Terminated(t) => format!("Terminated:{}", t.reason),
    }
}

#[tokio::test]
async fn a_start_records_pulling_pulled_created_started_on_the_container() {
    let (mut w, _, rec) = worker(&pod(serde_json::json!({}), serde_json::json!({})));
    w.sync(Instant::now()).await;
    let events = rec.take();
    assert_eq!(
        events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(),
        vec!["Pulling", "Pulled", "Created", "Started"]
    );
    assert_eq!(events[0].message, format!("Pulling image {IMG:?}"));
    assert!(
        events[1]
            .message
            .starts_with(&format!("Successfully pulled image {IMG:?} in ")),
        "{}",
        events[1].message
    );
    assert_eq!(events[2].message, "Created container main");
    assert_eq!(events[3].message, "Started container main");
    for e in &events {
        assert_eq!(e.type_, EventType::Normal);
        assert_eq!(
            e.object.field_path.as_deref(),
            Some("spec.containers{main}")
        );
        assert_eq!(
            (
                e.object.name.as_str(),
                e.object.uid.as_str(),
                e.object.resource_version.as_str()
            ),
            ("web", "u1", "7")
        );
    }
    // Steady state: nothing more.
    w.sync(Instant::now()).await;
    assert!(rec.take().is_empty());

    // An image already there under IfNotPresent: "already present", no pull.
    let (mut w, fake, rec) = worker(&pod(
        serde_json::json!({}),
        serde_json::json!({"imagePullPolicy": "IfNotPresent"}),
    ));
    fake.st().images.insert(IMG.into());
    w.sync(Instant::now()).await;
    assert_eq!(
        summary(&rec.take()),
        vec![
            format!("Normal Pulled: Container image {IMG:?} already present on machine"),
            "Normal Created: Created container main".into(),
            "Normal Started: Started container main".into(),
        ]
    );
}

#[tokio::test]
async fn a_failed_pull_records_failed_then_back_off_once() {
    let (mut w, fake, rec) = worker(&pod(serde_json::json!({}), serde_json::json!({})));
    fake.st().failing_pulls.insert(IMG.into());
    let t0 = Instant::now();
    w.sync(t0).await;
    let s = summary(&rec.take());
    assert_eq!(s[0], format!("Normal Pulling: Pulling image {IMG:?}"));
    assert!(
        s[1].starts_with(&format!("Warning Failed: Failed to pull image {IMG:?}: ")),
        "{s:?}"
    );
    assert_eq!(s[2], "Warning Failed: Error: ErrImagePull");
    w.sync(t0 + Duration::from_secs(1)).await;
    w.sync(t0 + Duration::from_secs(2)).await;
    assert_eq!(
        summary(&rec.take()),
        vec![format!("Normal BackOff: Back-off pulling image {IMG:?}")]
    );
}

#[tokio::test]
async fn a_crash_loop_records_back_off_per_back_off_not_per_sync() {
    let (mut w, fake, rec) = worker(&pod(serde_json::json!({}), serde_json::json!({})));
    let t0 = Instant::now();
    w.sync(t0).await;
    fake.exit("main", 1);
    w.sync(t0).await; // first restart: immediate
    rec.take();
    fake.exit("main", 1);
    w.sync(t0 + Duration::from_secs(1)).await;
    w.sync(t0 + Duration::from_secs(2)).await;
    w.sync(t0 + Duration::from_secs(3)).await;
    // The exit shows for a while (as upstream's next pod-worker sync), then the back-off.
    w.sync(t0 + Duration::from_secs(7)).await;
    w.sync(t0 + Duration::from_secs(8)).await;
    assert_eq!(reason(&w), "CrashLoopBackOff");
    let events = rec.take();
    assert_eq!(
        summary(&events),
        vec!["Warning BackOff: Back-off restarting failed container main in pod web_default(u1)"]
    );
    assert_eq!(
        events[0].object.field_path.as_deref(),
        Some("spec.containers{main}")
    );
    // After the back-off: restarted (the image is there now: "already present").
    w.sync(t0 + Duration::from_secs(11)).await;
    assert_eq!(
        rec.reasons(),
        vec!["Pulled", "Created", "Started"],
        "{:?}",
        summary(&rec.events())
    );
}

#[tokio::test]
async fn failing_probes_record_unhealthy_and_a_liveness_kill() {
    let p = pod(
        serde_json::json!({"terminationGracePeriodSeconds": 5}),
        serde_json::json!({
            "readinessProbe": {"exec": {"command": ["cat", "/ready"]}, "periodSeconds": 1},
            "livenessProbe": {"exec": {"command": ["cat", "/alive"]}, "periodSeconds": 1, "failureThreshold": 1}
        }),
    );
    let (mut w, fake, rec) = worker(&p);
    let t0 = Instant::now();
    w.sync(t0).await;
    rec.take();
    // Liveness passes, readiness fails.
    fake.st().exec_results.extend([0, 1]);
    w.sync(t0).await;
    let s = summary(&rec.take());
    assert_eq!(s.len(), 1, "{s:?}");
    assert!(
        s[0].starts_with("Warning Unhealthy: Readiness probe failed: "),
        "{s:?}"
    );
    // Liveness fails (threshold 1): Unhealthy, then the kill with its reason.
    fake.st().exec_results.extend([1]);
    w.sync(t0 + Duration::from_secs(1)).await;
    let s = summary(&rec.take());
    assert!(
        s[0].starts_with("Warning Unhealthy: Liveness probe failed: "),
        "{s:?}"
    );
    assert_eq!(
        s[1],
        "Normal Killing: Container main failed liveness probe, will be restarted"
    );
    assert!(fake
        .calls()
        .contains(&"StopContainer c2 timeout=5".to_string()));
}

#[tokio::test]
async fn post_start_runs_right_after_start_and_its_failure_kills_the_container() {
    let hook = serde_json::json!({"lifecycle": {"postStart": {"exec": {"command": ["touch", "/started"]}}}});
    let (mut w, fake, rec) = worker(&pod(serde_json::json!({}), hook.clone()));
    w.sync(Instant::now()).await;
    let calls = fake.take_calls();
    let start = calls.iter().position(|c| c == "StartContainer c2").unwrap();
    assert_eq!(calls[start + 1], "ExecSync c2 touch /started");
    assert_eq!(reason(&w), "Running");
    assert_eq!(
        rec.reasons(),
        vec!["Pulling", "Pulled", "Created", "Started"]
    );

    let (mut w, fake, rec) = worker(&pod(
        serde_json::json!({"terminationGracePeriodSeconds": 3}),
        hook,
    ));
    fake.st().exec_results.push_back(1);
    let t0 = Instant::now();
    w.sync(t0).await;
    let calls = fake.take_calls();
    let start = calls.iter().position(|c| c == "StartContainer c2").unwrap();
    assert_eq!(
        calls[start + 1..],
        ["ExecSync c2 touch /started", "StopContainer c2 timeout=3"]
    );
    assert_eq!(reason(&w), "PostStartHookError");
    let s = summary(&rec.take());
    assert!(
        s[4].starts_with("Warning FailedPostStartHook: Exec lifecycle hook ([\"touch\", \"/started\"]) for Container \"main\" in Pod \"web_default(u1)\" failed - error: command 'touch /started' exited with 1"),
        "{s:?}"
    );
    assert_eq!(
        s[5],
        "Normal Killing: FailedPostStartHook: container main is killed"
    );
    // The next sync sees the exit and restarts it per policy (the first restart is immediate).
    w.sync(t0 + Duration::from_secs(1)).await;
    assert_eq!(reason(&w), "Running");
    assert_eq!(w.status().containers[0].restart_count, 1);
}

#[tokio::test]
async fn pre_stop_runs_before_stop_container_within_the_grace_period() {
    let (mut w, fake, rec) = worker(&pod(
        serde_json::json!({}),
        serde_json::json!({"lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo bye"]}}}}),
    ));
    w.sync(Instant::now()).await;
    fake.take_calls();
    rec.take();
    w.kill(Duration::from_secs(4)).await.unwrap();
    let calls = fake.take_calls();
    assert_eq!(
        calls[..2],
        ["ExecSync c2 sh -c echo bye", "StopContainer c2 timeout=4"]
    );
    assert_eq!(
        summary(&rec.take()),
        vec!["Normal Killing: Stopping container main"]
    );

    // A failing hook is a FailedPreStopHook warning; the container is stopped all the same.
    let (mut w, fake, rec) = worker(&pod(
        serde_json::json!({}),
        serde_json::json!({"lifecycle": {"preStop": {"exec": {"command": ["false"]}}}}),
    ));
    w.sync(Instant::now()).await;
    rec.take();
    fake.st().exec_results.push_back(2);
    w.kill(Duration::from_secs(4)).await.unwrap();
    let s = summary(&rec.take());
    assert_eq!(s[0], "Normal Killing: Stopping container main");
    assert!(
        s[1].starts_with("Warning FailedPreStopHook: Exec lifecycle hook ([\"false\"])"),
        "{s:?}"
    );
    assert!(fake
        .calls()
        .contains(&"StopContainer c2 timeout=4".to_string()));
}

#[tokio::test]
async fn a_pre_stop_hook_uses_up_the_grace_period_then_the_minimum_is_left() {
    // A sleep hook longer than the grace period is cut at the grace period; StopContainer then gets
    // upstream's 2 s minimum rather than the 1 s grace.
    let (mut w, fake, _) = worker(&pod(
        serde_json::json!({}),
        serde_json::json!({"lifecycle": {"preStop": {"sleep": {"seconds": 600}}}}),
    ));
    w.sync(Instant::now()).await;
    fake.take_calls();
    w.kill(Duration::from_secs(1)).await.unwrap();
    assert_eq!(fake.take_calls()[0], "StopContainer c2 timeout=2");
}

#[tokio::test]
async fn grace_zero_skips_pre_stop_and_exited_containers_get_no_killing_event() {
    let (mut w, fake, rec) = worker(&pod(
        serde_json::json!({"restartPolicy": "Never"}),
        serde_json::json!({"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}),
    ));
    w.sync(Instant::now()).await;
    fake.exit("main", 0);
    w.sync(Instant::now()).await;
    rec.take();
    fake.take_calls();
    w.kill(Duration::ZERO).await.unwrap();
    assert!(rec.take().is_empty());
    assert!(!fake.take_calls().iter().any(|c| c.starts_with("ExecSync")));
}

#[tokio::test]
async fn resource_field_ref_env_reaches_the_container_config() {
    let (mut w, fake, _) = worker(&pod(
        serde_json::json!({}),
        serde_json::json!({
            "resources": {"limits": {"memory": "64Mi"}},
            "env": [{"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}]
        }),
    ));
    w.sync(Instant::now()).await;
    let st = fake.st();
    let env: Vec<(String, String)> = st.configs["c2"]
        .envs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    assert!(env.contains(&("MEM".into(), "64".into())), "{env:?}");
}

#[tokio::test]
async fn a_config_error_is_recorded_once_not_every_retry() {
    // No API client: the configMap reference cannot be resolved (CreateContainerConfigError).
    let (mut w, _, rec) = worker(&pod(
        serde_json::json!({}),
        serde_json::json!({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}),
    ));
    let t0 = Instant::now();
    for s in 0..3 {
        w.sync(t0 + Duration::from_secs(s)).await;
    }
    assert_eq!(reason(&w), "CreateContainerConfigError");
    let failed: Vec<String> = summary(&rec.events())
        .into_iter()
        .filter(|e| e.starts_with("Warning Failed: Error: "))
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", summary(&rec.events()));
    assert_eq!(
        rec.reasons().iter().filter(|r| *r == "Pulled").count(),
        1,
        "{:?}",
        rec.reasons()
    );
}

#[tokio::test]
async fn dns_fallbacks_and_cuts_are_warnings_on_the_pod_once() {
    let mut c = (*cfg()).clone();
    c.dns.cluster_dns.clear();
    let p = pod(
        serde_json::json!({"dnsConfig": {"nameservers": ["1.1.1.1", "8.8.8.8", "9.9.9.9", "4.4.4.4"]}}),
        serde_json::json!({}),
    );
    let fake = Arc::new(FakeCri::default());
    let rec = Arc::new(FakeRecorder::default());
    let mut w = PodWorker::new(&p, Arc::new(c), fake.clone())
        .unwrap()
        .with_recorder(rec.clone());
    // The first sandbox fails (containerd unavailable): the DNS warnings come with the first try only.
    fake.st().unavailable = true;
    w.sync(Instant::now()).await;
    fake.st().unavailable = false;
    w.sync(Instant::now()).await;
    assert_eq!(reason(&w), "Running");
    let dns: Vec<String> = summary(&rec.take())
        .into_iter()
        .filter(|e| e.contains("DNS"))
        .collect();
    assert_eq!(
        dns,
        vec![
            "Warning MissingClusterDNS: pod: \"web_default(u1)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.".to_string(),
            // No host resolv.conf in these tests: the Default fallback resolves through the node.
            "Warning DNSConfigForming: Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 127.0.0.1 1.1.1.1 8.8.8.8".into(),
        ]
    );
}
