//! In-place resize actuated by the pod worker ([`super::resize`]) against the recording fake CRI
//! and cgroups: a running container gets UpdateContainerResources and keeps running
//! (NotRequired), or is restarted (RestartContainer); the pod cgroup follows; the status shows what
//! the containers run with.

use super::*;
use crate::cgroupfs::{Op, Recording};
use crate::runtime::cri::fake::FakeCri;

fn cfg(cgroups: Arc<Recording>) -> Arc<WorkerConfig> {
    Arc::new(WorkerConfig {
        log_root: "/var/log/pods".into(),
        pause_image: "reg/pause:1".into(),
        backoff: Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: "10.250.0.11".into(),
        pods_root: super::tests::unique_pods_root(),
        secrets_in_memory: false,
        allocatable: crate::env_resources::NodeAllocatable {
            cpu: "2".into(),
            memory: "4Gi".into(),
        },
        dns: super::tests::test_dns(),
        node_hosts_file: "/etc/hosts".into(),
        cgroups: Some(cgroups),
        pod_pids_limit: None,
    })
}

fn pod(limits: serde_json::Value, policy: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": "reg/busybox:1",
            "resizePolicy": [{"resourceName": "memory", "restartPolicy": policy}],
            "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": limits}}]}
    }))
    .unwrap()
}

async fn running(p: &Pod) -> (PodWorker, Arc<FakeCri>, Arc<Recording>) {
    let cgroups = Arc::new(Recording::default());
    let fake = Arc::new(FakeCri::default());
    let mut w = PodWorker::new(p, cfg(cgroups.clone()), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    assert!(w.status().containers[0].is_running());
    fake.take_calls();
    (w, fake, cgroups)
}

#[tokio::test]
async fn a_raised_limit_is_applied_in_place() {
    let p = pod(
        serde_json::json!({"cpu": "200m", "memory": "32Mi"}),
        "NotRequired",
    );
    let (mut w, fake, cgroups) = running(&p).await;
    let id = w.status().containers[0].container_id.clone();
    let resized = pod(
        serde_json::json!({"cpu": "400m", "memory": "64Mi"}),
        "NotRequired",
    );
    w.update_pod(&resized).await;
    let calls = fake.take_calls();
    let cid = id.trim_start_matches("containerd://");
    assert_eq!(
        calls,
        [format!(
            "UpdateContainerResources {cid} shares=102 quota=40000 memory=67108864"
        )]
    );
    // The pod cgroup carries the new pod limits.
    let Some(Op::Ensure(path, r)) = cgroups.ops().last().cloned() else {
        panic!("no pod cgroup write: {:?}", cgroups.ops())
    };
    assert_eq!(path, "/kubepods/burstable/podu1");
    assert_eq!(
        (r.cpu_quota, r.memory_limit),
        (Some(40_000), Some(64 << 20))
    );
    // Not restarted; the status shows the new resources.
    w.sync(Instant::now()).await;
    let st = w.status();
    assert_eq!(st.containers[0].restart_count, 0);
    assert_eq!(st.containers[0].container_id, id);
    assert!(st.resize.error.is_none());
    let limits = st.resize.allocated["main"].limits.clone().unwrap();
    assert_eq!(limits["memory"].0, "64Mi");
    // The same resources again are no resize.
    w.update_pod(&resized).await;
    assert!(fake.take_calls().is_empty());
}

#[tokio::test]
async fn restart_container_restarts_it_with_the_new_resources() {
    let p = pod(serde_json::json!({"memory": "32Mi"}), "RestartContainer");
    let (mut w, fake, _) = running(&p).await;
    let resized = pod(serde_json::json!({"memory": "64Mi"}), "RestartContainer");
    w.update_pod(&resized).await;
    let calls = fake.take_calls();
    assert!(
        calls.iter().any(|c| c.starts_with("StopContainer ")),
        "{calls:?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("UpdateContainerResources")),
        "{calls:?}"
    );
}

#[tokio::test]
async fn a_failed_update_shows_as_in_progress_with_an_error() {
    let p = pod(serde_json::json!({"memory": "32Mi"}), "NotRequired");
    let (mut w, fake, _) = running(&p).await;
    // containerd lost the container: the update fails.
    fake.st().containers.clear();
    w.update_pod(&pod(serde_json::json!({"memory": "64Mi"}), "NotRequired"))
        .await;
    let err = w.status().resize.error.expect("an error to report");
    assert!(err.starts_with("container main: "), "{err}");
}
