//! The runtime's pods against the recording fake CRI. A kubelet restart: pods a first "run" started
//! (workers dropped, as when the kubelet dies) are adopted by a new runtime on the same CRI without a
//! single create or start. A running pod's update reaches its worker.

use std::time::Duration;

use super::*;
use crate::container_status::ContainerState;
use crate::runtime::cri::fake::FakeCri;
use crate::runtime::{Backoff, Runtime};

const PAUSE: &str = "reg/pause:1";
const IMG: &str = "reg/busybox:1";

fn cfg(pods_root: &std::path::Path) -> WorkerConfig {
    WorkerConfig {
        log_root: "/var/log/pods".into(),
        pause_image: PAUSE.into(),
        backoff: Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: "10.250.0.11".into(),
        pods_root: pods_root.to_path_buf(),
        secrets_in_memory: false,
        allocatable: Default::default(),
        dns: crate::dns_config::DnsSettings {
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
            resolv_conf: None,
        },
        node_hosts_file: "/etc/hosts".into(),
        cgroups: None,
        pod_pids_limit: None,
    }
}

fn pod(name: &str, uid: &str, container: serde_json::Value) -> Pod {
    let mut c = serde_json::json!({"name": "main", "image": IMG});
    for (k, v) in container.as_object().unwrap() {
        c[k] = v.clone();
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"nodeName": "host1", "containers": [c]},
        "status": {"startTime": "2026-11-29T10:00:00Z"}
    }))
    .unwrap()
}

/// What the kubelet's first run leaves behind: `pod` synced to running, its worker then dropped.
async fn first_run(fake: &Arc<FakeCri>, pods_root: &std::path::Path, pod: &Pod) {
    let mut w = PodWorker::new(pod, Arc::new(cfg(pods_root)), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    assert!(w.status().containers[0].is_running());
}

fn runtime(fake: &Arc<FakeCri>, pods_root: &std::path::Path) -> CriRuntime {
    // A long period: the pod tasks sync once at start, then the test drives nothing else.
    CriRuntime::new(fake.clone(), cfg(pods_root), Duration::from_secs(3600))
}

fn container_ids(fake: &FakeCri) -> Vec<String> {
    let mut ids: Vec<String> = fake.st().containers.keys().cloned().collect();
    ids.sort();
    ids
}

fn makes_nothing(calls: &[String]) -> bool {
    !calls.iter().any(|c| {
        c.starts_with("RunPodSandbox")
            || c.starts_with("CreateContainer")
            || c.starts_with("StartContainer")
            || c.starts_with("StopContainer")
    })
}

#[tokio::test]
async fn running_pods_are_adopted_with_restart_counts_and_previous_kept() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let crashed = pod("crashed", "u-crash", serde_json::json!({}));
    let plain = pod("plain", "u-plain", serde_json::json!({}));
    // "crashed" restarted once in the first run: attempt 1 runs, attempt 0 exited 3.
    let mut w = PodWorker::new(&crashed, Arc::new(cfg(dir.path())), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    fake.exit("main", 3);
    w.sync(Instant::now()).await;
    let before = w.status().containers[0].clone();
    assert_eq!(before.restart_count, 1);
    assert!(before.is_running());
    drop(w);
    first_run(&fake, dir.path(), &plain).await;
    let ids = container_ids(&fake);
    fake.take_calls();

    let rt = runtime(&fake, dir.path());
    let done = rt
        .reconcile(&[crashed.clone(), plain.clone()])
        .await
        .unwrap();
    let mut adopted = done.adopted.clone();
    adopted.sort();
    assert_eq!(adopted, vec!["u-crash".to_string(), "u-plain".to_string()]);
    assert_eq!(done.removed, 0);
    let calls = fake.take_calls();
    assert!(makes_nothing(&calls), "{calls:?}");
    assert_eq!(
        container_ids(&fake),
        ids,
        "the dead run is kept for its log"
    );

    let st = rt.pod_status("u-crash").unwrap();
    let c = &st.containers[0];
    assert_eq!(c.container_id, before.container_id, "the same container");
    assert_eq!(c.restart_count, 1);
    assert!(c.ready && c.is_running());
    let last = c
        .last_termination
        .as_ref()
        .expect("the previous run's exit");
    assert_eq!(last.exit_code, 3);
    assert_eq!(st.pod_ip.as_deref(), Some("10.244.1.2"), "the sandbox's IP");
    assert_eq!(
        st.started_at,
        std::time::UNIX_EPOCH + Duration::from_secs(1_795_946_400),
        "the start time the pod was reported with"
    );
    let st = rt.pod_status("u-plain").unwrap();
    assert_eq!(st.containers[0].restart_count, 0);
    assert!(st.containers[0].ready);

    assert_eq!(rt.pod_uids().len(), 2);
    // Stopping an adopted pod stops the containers it adopted.
    rt.stop_pod("u-plain", Some(Duration::from_secs(1)))
        .await
        .unwrap();
    let calls = fake.take_calls();
    assert!(
        calls.iter().any(|c| c.starts_with("RemovePodSandbox")),
        "{calls:?}"
    );
    rt.stop_pod("u-crash", Some(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(fake.st().containers.is_empty(), "both runs removed");
}

#[tokio::test]
async fn unwanted_and_not_ready_sandboxes_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let gone = pod("gone", "u-gone", serde_json::json!({}));
    let rebooted = pod("rebooted", "u-reboot", serde_json::json!({}));
    first_run(&fake, dir.path(), &gone).await;
    first_run(&fake, dir.path(), &rebooted).await;
    // The host rebooted under the second: its sandbox is there but not ready.
    for sb in fake.st().sandboxes.values_mut() {
        if sb.labels.get(spec::LABEL_POD_UID).map(String::as_str) == Some("u-reboot") {
            sb.ready = false;
        }
    }
    // A volume directory of the deleted pod is removed too, the wanted pod's is kept.
    std::fs::create_dir_all(dir.path().join("u-gone/volumes")).unwrap();
    std::fs::create_dir_all(dir.path().join("u-reboot/volumes")).unwrap();
    fake.take_calls();

    let rt = runtime(&fake, dir.path());
    let done = rt.reconcile(std::slice::from_ref(&rebooted)).await.unwrap();
    assert!(done.adopted.is_empty());
    assert_eq!(done.removed, 2);
    assert!(fake.st().sandboxes.is_empty());
    assert!(fake.st().containers.is_empty());
    assert!(!dir.path().join("u-gone").exists());
    assert!(dir.path().join("u-reboot").exists());
    assert!(
        rt.pod_uids().is_empty(),
        "the workload loop starts it afresh"
    );
    // Afresh: a new sandbox and container.
    rt.run_pod(&rebooted).await.unwrap();
    let mut running = false;
    for _ in 0..100 {
        if rt
            .pod_status("u-reboot")
            .is_some_and(|s| s.containers[0].is_running())
        {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(running);
    assert!(fake.calls().iter().any(|c| c.starts_with("RunPodSandbox")));
}

#[tokio::test]
async fn probes_start_over_readiness_false_until_it_passes() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let probe = serde_json::json!({"exec": {"command": ["true"]}, "periodSeconds": 10});
    let p = pod(
        "probed",
        "u-probe",
        serde_json::json!({"readinessProbe": probe, "livenessProbe": probe}),
    );
    first_run(&fake, dir.path(), &p).await;
    fake.take_calls();
    // The first readiness probe after the restart fails: not ready, nothing restarted.
    fake.st().exec_results.extend([0, 1]);
    let rt = runtime(&fake, dir.path());
    rt.reconcile(std::slice::from_ref(&p)).await.unwrap();
    let calls = fake.take_calls();
    assert!(makes_nothing(&calls), "{calls:?}");
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("ExecSync")).count(),
        2,
        "both probes run at the first sync (the container started long before): {calls:?}"
    );
    let c = &rt.pod_status("u-probe").unwrap().containers[0];
    assert!(c.is_running());
    assert!(!c.ready, "readiness starts false until a probe passes");
}

#[tokio::test]
async fn an_exited_container_is_handled_per_restart_policy() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let p = pod("crashy", "u-crashy", serde_json::json!({}));
    let mut w = PodWorker::new(&p, Arc::new(cfg(dir.path())), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    fake.exit("main", 1);
    w.sync(Instant::now()).await;
    drop(w);
    // The restarted container crashed too while the kubelet was down.
    fake.exit("main", 2);
    fake.take_calls();
    let rt = runtime(&fake, dir.path());
    rt.reconcile(std::slice::from_ref(&p)).await.unwrap();
    let c = &rt.pod_status("u-crashy").unwrap().containers[0];
    assert_eq!(c.restart_count, 1);
    // The exit found at adoption shows first (about to be restarted after its back-off, so the
    // pod stays Running), as upstream's kubelet reports a container it finds exited.
    assert!(
        matches!(&c.state, ContainerState::Terminated(t) if t.exit_code == 2),
        "{:?}",
        c.state
    );
    assert!(c.restarting);
    assert_eq!(c.last_termination.as_ref().map(|t| t.exit_code), Some(1));
    assert!(makes_nothing(&fake.take_calls()));
}

#[tokio::test]
async fn a_runtime_outage_is_not_a_lost_container() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let p = pod("steady", "u-steady", serde_json::json!({}));
    let mut w = PodWorker::new(&p, Arc::new(cfg(dir.path())), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    // The second sync reads the start time containerd reports.
    w.sync(Instant::now()).await;
    let before = w.status();
    fake.take_calls();
    // containerd restarts: every call is Unavailable for a while.
    fake.st().unavailable = true;
    for _ in 0..3 {
        w.sync(Instant::now()).await;
    }
    assert_eq!(
        w.status(),
        before,
        "nothing changes while the runtime is away"
    );
    fake.st().unavailable = false;
    w.sync(Instant::now()).await;
    assert_eq!(w.status(), before);
    assert!(makes_nothing(&fake.take_calls()));

    // Adoption waits for the runtime instead of deciding anything.
    drop(w);
    fake.st().unavailable = true;
    let rt = runtime(&fake, dir.path());
    assert!(rt.reconcile(std::slice::from_ref(&p)).await.is_err());
    assert!(rt.pod_uids().is_empty());
    fake.st().unavailable = false;
    let done = rt.reconcile(std::slice::from_ref(&p)).await.unwrap();
    assert_eq!(done.adopted, vec!["u-steady".to_string()]);
    assert!(makes_nothing(&fake.take_calls()));
}

#[tokio::test]
async fn adopted_turns_true_only_after_a_successful_adoption() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let rt = runtime(&fake, dir.path());
    let adopted = rt.adopted();
    // The CNI IP GC waits on this: while the runtime is away nothing is adopted, so nothing is known.
    fake.st().unavailable = true;
    assert!(rt.adopt(&[]).await.is_err());
    assert!(!*adopted.borrow());
    fake.st().unavailable = false;
    rt.adopt(&[]).await.unwrap();
    assert!(*adopted.borrow());
    assert!(*rt.adopted().borrow(), "a later subscriber sees it too");
}

/// Waits (a few seconds at most) until `path` reads `want`.
async fn wait_for_content(path: &std::path::Path, want: &str) {
    for _ in 0..100 {
        if std::fs::read_to_string(path).is_ok_and(|s| s == want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} never read {want:?}", path.display());
}

#[tokio::test]
async fn a_running_pods_new_labels_reach_its_downward_api_volume_and_pods_list() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let mut p = pod(
        "labeled",
        "u-labels",
        serde_json::json!({"volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"}]}),
    );
    p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(serde_json::json!(
        {"name": "podinfo", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}
    ))
    .unwrap()]);
    p.metadata.labels = Some([("key1".to_string(), "value1".to_string())].into());
    let rt = runtime(&fake, dir.path());
    rt.run_pod(&p).await.unwrap();
    let labels = dir
        .path()
        .join("u-labels/volumes/kubernetes.io~downward-api/podinfo/labels");
    wait_for_content(&labels, "key1=\"value1\"\n").await;

    let mut updated = p.clone();
    updated.metadata.labels = Some([("key3".to_string(), "value3".to_string())].into());
    rt.update_pod(&updated).unwrap();
    // Long before the pod's next periodic sync (an hour away).
    wait_for_content(&labels, "key3=\"value3\"\n").await;
    let (listed, _) = rt.pods_with_status().pop().unwrap();
    assert_eq!(listed.metadata.labels, updated.metadata.labels);

    let mut stranger = p.clone();
    stranger.metadata.uid = Some("u-none".into());
    assert!(matches!(
        rt.update_pod(&stranger),
        Err(RuntimeError::NotFound(_))
    ));
    rt.stop_pod("u-labels", Some(Duration::ZERO)).await.unwrap();
}

#[test]
fn a_deleted_pods_logs_go_and_other_pods_logs_stay() {
    let root = tempfile::tempdir().unwrap();
    let mut c = cfg(root.path());
    c.log_root = root.path().join("logs");
    let rt = CriRuntime::new(Arc::new(FakeCri::default()), c, Duration::from_secs(3600));
    let gone = root.path().join("logs/default_job-1_u1/main");
    let kept = root.path().join("logs/default_job-2_u2/main");
    for d in [&gone, &kept] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("0.log"), "line\n").unwrap();
    }
    rt.forget_pod("u1");
    assert!(!root.path().join("logs/default_job-1_u1").exists());
    assert!(kept.join("0.log").exists());
    // Twice, or a pod that never logged: nothing to do, no panic.
    rt.forget_pod("u1");
}

/// A pod that ended just before the restart (its sandbox already stopped, its status maybe not yet
/// posted) is adopted as ended: no new sandbox, no second run of its container; one that has not
/// ended (Always, or OnFailure after a failure) gets a new sandbox as before.
#[tokio::test]
async fn an_ended_pods_stopped_sandbox_is_adopted_as_ended_and_never_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let mut done_pod = pod("done", "u-done", serde_json::json!({}));
    done_pod.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    let mut w = PodWorker::new(&done_pod, Arc::new(cfg(dir.path())), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    fake.exit("main", 0);
    w.sync(Instant::now()).await;
    assert!(!fake.st().sandboxes["sb1"].ready, "stopped when it ended");
    drop(w);
    fake.take_calls();

    let rt = runtime(&fake, dir.path());
    let done = rt.reconcile(std::slice::from_ref(&done_pod)).await.unwrap();
    assert_eq!(done.adopted, vec!["u-done".to_string()]);
    let calls = fake.take_calls();
    assert!(makes_nothing(&calls), "{calls:?}");
    let st = rt.pod_status("u-done").unwrap();
    assert_eq!(
        crate::pod_phase::pod_phase(&st.init_containers, &st.containers),
        "Succeeded"
    );
    assert_eq!(st.pod_ip.as_deref(), Some("10.244.1.2"));
    // Its periodic syncs change nothing either.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(makes_nothing(&fake.take_calls()));

    // restartPolicy Always: a stopped sandbox is never taken for an ended pod.
    let fake = Arc::new(FakeCri::default());
    let always = pod("always", "u-always", serde_json::json!({}));
    first_run(&fake, dir.path(), &always).await;
    fake.st().sandboxes.get_mut("sb1").unwrap().ready = false;
    let rt = runtime(&fake, dir.path());
    let done = rt.reconcile(std::slice::from_ref(&always)).await.unwrap();
    assert!(done.adopted.is_empty());
    assert_eq!(
        done.removed, 1,
        "its stopped sandbox goes; the pod starts again"
    );
}
