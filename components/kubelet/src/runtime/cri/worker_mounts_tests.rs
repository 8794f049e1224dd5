//! What the pod worker adds to a container's mounts and reads back when it exits: subPathExpr expanded
//! with the container's env, the termination-log file and the message taken from it or from the log
//! (against the recording fake CRI, on a temp dir).

use std::path::Path;

use super::*;
use crate::runtime::cri::fake::FakeCri;

fn cfg(root: &Path) -> Arc<WorkerConfig> {
    Arc::new(WorkerConfig {
        log_root: root.join("logs"),
        pause_image: "reg/pause:1".into(),
        backoff: Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: "10.250.0.11".into(),
        pods_root: root.join("pods"),
        secrets_in_memory: false,
        allocatable: crate::env_resources::NodeAllocatable {
            cpu: "2".into(),
            memory: "4Gi".into(),
        },
        dns: super::tests::test_dns(),
        node_hosts_file: "/etc/hosts".into(),
        cgroups: None,
        pod_pids_limit: None,
    })
}

fn pod(container: serde_json::Value) -> Pod {
    let mut c = serde_json::json!({"name": "main", "image": "reg/busybox:1"});
    for (k, v) in container.as_object().unwrap() {
        c[k] = v.clone();
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"restartPolicy": "Never", "containers": [c],
                 "volumes": [{"name": "workdir1", "emptyDir": {}}]}
    }))
    .unwrap()
}

fn worker(p: &Pod, root: &Path) -> (PodWorker, Arc<FakeCri>) {
    let fake = Arc::new(FakeCri::default());
    (PodWorker::new(p, cfg(root), fake.clone()).unwrap(), fake)
}

/// The mounts container `c<n>` was created with.
fn mounts(fake: &FakeCri, id: &str) -> Vec<cri::Mount> {
    fake.st().configs[id].mounts.clone()
}

fn subpath_pod(value: &str) -> Pod {
    pod(serde_json::json!({
        "env": [{"name": "POD_NAME", "value": value}],
        "volumeMounts": [{"name": "workdir1", "mountPath": "/logscontainer", "subPathExpr": "$(POD_NAME)"}]
    }))
}

#[tokio::test]
async fn a_sub_path_expr_is_expanded_with_the_containers_env_and_created() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut w, fake) = worker(&subpath_pod("var-expansion-subpath"), tmp.path());
    w.sync(Instant::now()).await;
    let m = mounts(&fake, "c2");
    let m = m
        .iter()
        .find(|m| m.container_path == "/logscontainer")
        .unwrap();
    let want = tmp
        .path()
        .join("pods/u1/volumes/kubernetes.io~empty-dir/workdir1/var-expansion-subpath")
        .canonicalize()
        .unwrap();
    assert_eq!(Path::new(&m.host_path), want);
    assert!(want.is_dir());
}

#[tokio::test]
async fn an_expansion_leaving_the_volume_is_a_config_error_with_upstreams_message() {
    for (value, want) in [
        (
            "..",
            "unable to provision SubPath `..`: must not contain '..'",
        ),
        ("/tmp", "error SubPath `/tmp` must not be an absolute path"),
        ("", "missing value for POD_NAME"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (mut w, fake) = worker(&subpath_pod(value), tmp.path());
        w.sync(Instant::now()).await;
        assert_eq!(
            w.status().containers[0].state,
            ContainerState::Waiting {
                reason: "CreateContainerConfigError".into(),
                message: Some(want.into()),
            }
        );
        assert!(fake.st().configs.is_empty(), "{value:?}: created anyway");
    }
}

fn terminated_message(w: &PodWorker) -> Option<String> {
    match &w.status().containers[0].state {
        ContainerState::Terminated(t) => t.message.clone(),
        other => panic!("not terminated: {other:?}"),
    }
}

#[tokio::test]
async fn the_termination_log_is_mounted_per_run_and_read_when_the_run_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let p = pod(serde_json::json!({
        "terminationMessagePath": "/dev/termination-custom-log",
        "terminationMessagePolicy": "File"
    }));
    let (mut w, fake) = worker(&p, tmp.path());
    w.sync(Instant::now()).await;
    let m = mounts(&fake, "c2");
    let m = m
        .iter()
        .find(|m| m.container_path == "/dev/termination-custom-log")
        .expect("no termination-log mount");
    assert_eq!(
        Path::new(&m.host_path),
        tmp.path().join("pods/u1/containers/main/0")
    );
    std::fs::write(&m.host_path, "DONE").unwrap();
    fake.exit("main", 0);
    w.sync(Instant::now()).await;
    assert_eq!(terminated_message(&w).as_deref(), Some("DONE"));
}

#[tokio::test]
async fn a_failed_run_with_nothing_in_its_file_reports_its_logs_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let p = pod(serde_json::json!({
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError"
    }));
    let (mut w, fake) = worker(&p, tmp.path());
    w.sync(Instant::now()).await;
    let log = tmp.path().join("logs/default_web_u1/main/0.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, "2024-01-01T00:00:00.000000000Z stdout P DONE\n").unwrap();
    fake.exit("main", 1);
    w.sync(Instant::now()).await;
    assert_eq!(terminated_message(&w).as_deref(), Some("DONE"));
}
