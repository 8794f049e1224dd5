//! An ended pod gives its sandbox (and so its address) back at once, against the recording fake CRI.

use super::tests::{pod, worker};
use super::*;

fn phase(w: &PodWorker) -> &'static str {
    let st = w.status();
    crate::pod_phase::pod_phase(&st.init_containers, &st.containers)
}

fn sandbox_ready(fake: &crate::runtime::cri::fake::FakeCri, id: &str) -> Option<bool> {
    fake.st().sandboxes.get(id).map(|s| s.ready)
}

#[tokio::test]
async fn a_completed_pod_stops_its_sandbox_once_and_keeps_its_ip_and_logs() {
    let (mut w, fake) = worker(&pod(
        serde_json::json!({"spec": {"restartPolicy": "Never"}}),
    ));
    w.sync(Instant::now()).await;
    assert_eq!(sandbox_ready(&fake, "sb1"), Some(true));
    fake.exit("main", 0);
    fake.take_calls();
    w.sync(Instant::now()).await;
    assert_eq!(phase(&w), "Succeeded");
    assert!(
        fake.take_calls()
            .contains(&"StopPodSandbox sb1".to_string()),
        "the sync that saw the pod end stops its sandbox"
    );
    assert_eq!(sandbox_ready(&fake, "sb1"), Some(false));
    // Not treated as a lost sandbox: no new one, no more calls, the last address still reported.
    for _ in 0..3 {
        w.sync(Instant::now() + Duration::from_secs(60)).await;
    }
    assert_eq!(fake.take_calls(), Vec::<String>::new());
    assert_eq!(w.status().pod_ip.as_deref(), Some("10.244.1.2"));
    assert_eq!(phase(&w), "Succeeded");
    // The exited container stays (its logs) until the pod is deleted.
    assert!(fake.st().containers.contains_key("c2"));
    w.kill(Duration::from_secs(1)).await.unwrap();
    let calls = fake.take_calls();
    assert!(
        calls.contains(&"RemovePodSandbox sb1".to_string()),
        "{calls:?}"
    );
    assert!(fake.st().sandboxes.is_empty());
}

#[tokio::test]
async fn a_failed_pod_that_will_not_restart_stops_its_sandbox() {
    for policy in ["Never", "OnFailure"] {
        let (mut w, fake) = worker(&pod(serde_json::json!({"spec": {"restartPolicy": policy}})));
        w.sync(Instant::now()).await;
        fake.exit("main", 3);
        w.sync(Instant::now()).await;
        let stopped = sandbox_ready(&fake, "sb1") == Some(false);
        match policy {
            // Failed for good.
            "Never" => assert!(stopped && phase(&w) == "Failed", "{policy}"),
            // Restarted after a back-off: the pod still runs and keeps its sandbox.
            _ => assert!(!stopped && phase(&w) == "Running", "{policy}"),
        }
    }
}

#[tokio::test]
async fn a_crash_looping_pod_keeps_its_sandbox() {
    let (mut w, fake) = worker(&pod(serde_json::json!({})));
    let t0 = Instant::now();
    w.sync(t0).await;
    for i in 1..=3u64 {
        fake.exit("main", 1);
        w.sync(t0 + Duration::from_secs(400 * i)).await;
    }
    assert_eq!(sandbox_ready(&fake, "sb1"), Some(true));
    assert!(!fake.calls().iter().any(|c| c.starts_with("StopPodSandbox")));
}

#[tokio::test]
async fn a_failed_init_container_under_never_ends_the_pod_and_stops_its_sandbox() {
    let p = pod(serde_json::json!({"spec": {
        "restartPolicy": "Never",
        "initContainers": [{"name": "setup", "image": "reg/busybox:1"}]
    }}));
    let (mut w, fake) = worker(&p);
    w.sync(Instant::now()).await;
    fake.exit("setup", 1);
    w.sync(Instant::now()).await;
    w.sync(Instant::now()).await;
    assert_eq!(phase(&w), "Failed");
    assert_eq!(sandbox_ready(&fake, "sb1"), Some(false));
}
