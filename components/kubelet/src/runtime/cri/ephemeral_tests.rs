//! Ephemeral containers against the recording fake CRI: added by a pod update, started once in the
//! running sandbox, in the target's PID namespace, never restarted, reported, killed with the pod.

use super::*;
use crate::runtime::cri::fake::FakeCri;

const IMG: &str = "reg/busybox:1";

fn cfg() -> Arc<WorkerConfig> {
    Arc::new(WorkerConfig {
        log_root: "/var/log/pods".into(),
        pause_image: "reg/pause:1".into(),
        backoff: Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: "10.250.0.11".into(),
        pods_root: super::super::tests::unique_pods_root(),
        secrets_in_memory: false,
        allocatable: crate::env_resources::NodeAllocatable {
            cpu: "2".into(),
            memory: "4Gi".into(),
        },
        dns: super::super::tests::test_dns(),
        node_hosts_file: "/etc/hosts".into(),
        cgroups: None,
        pod_pids_limit: None,
    })
}

fn pod(ephemeral: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": IMG}],
                 "ephemeralContainers": ephemeral}
    }))
    .unwrap()
}

fn debugger(target: Option<&str>) -> serde_json::Value {
    let mut d = serde_json::json!({"name": "debugger", "image": IMG, "command": ["ps"],
                                   "stdin": true, "tty": true});
    if let Some(t) = target {
        d["targetContainerName"] = serde_json::json!(t);
    }
    d
}

fn ephemeral_reason(w: &PodWorker) -> String {
    match &w.status().ephemeral_containers[0].state {
        ContainerState::Waiting { reason, .. } => reason.clone(),
        ContainerState::Running { .. } => "Running".into(),
        ContainerState::Terminated(t) => format!("Terminated:{}", t.reason),
    }
}

#[test]
fn added_names_only_the_new_ones() {
    let p = pod(serde_json::json!([debugger(None), {"name": "second", "image": IMG}]));
    let names: Vec<&str> = added(&p, &["debugger"])
        .into_iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["second"]);
    assert_eq!(added(&p, &[]).len(), 2);
    let c = as_container(&serde_json::from_value(debugger(Some("main"))).unwrap());
    assert_eq!(c.name, "debugger");
    assert_eq!(c.tty, Some(true));
    assert_eq!(c.command.as_deref(), Some(&["ps".to_string()][..]));
}

#[test]
fn a_target_means_its_pid_namespace_unless_the_pod_shares_one() {
    let mut config = cri::ContainerConfig {
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    pid: cri::NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    target_pid_namespace(&mut config, "c7");
    let ns = config
        .linux
        .as_ref()
        .unwrap()
        .security_context
        .as_ref()
        .unwrap();
    let ns = ns.namespace_options.as_ref().unwrap();
    assert_eq!(ns.pid, cri::NamespaceMode::Target as i32);
    assert_eq!(ns.target_id, "c7");
    let mut shared = config.clone();
    let opts = shared
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .namespace_options
        .as_mut()
        .unwrap();
    opts.pid = cri::NamespaceMode::Pod as i32;
    opts.target_id.clear();
    target_pid_namespace(&mut shared, "c7");
    let opts = shared
        .linux
        .unwrap()
        .security_context
        .unwrap()
        .namespace_options
        .unwrap();
    assert_eq!(opts.pid, cri::NamespaceMode::Pod as i32);
    assert!(opts.target_id.is_empty());
}

#[tokio::test]
async fn an_added_debugger_starts_once_in_the_targets_pid_namespace_and_never_restarts() {
    let fake = Arc::new(FakeCri::default());
    let mut w = PodWorker::new(&pod(serde_json::json!([])), cfg(), fake.clone()).unwrap();
    w.sync(Instant::now()).await;
    assert!(w.status().ephemeral_containers.is_empty());
    fake.take_calls();

    w.update_pod(&pod(serde_json::json!([debugger(Some("main"))])))
        .await;
    assert_eq!(ephemeral_reason(&w), "ContainerCreating");
    w.sync(Instant::now()).await;
    let calls = fake.take_calls();
    assert!(
        calls.contains(&"CreateContainer debugger attempt=0 log=debugger/0.log".to_string()),
        "{calls:?}"
    );
    assert_eq!(ephemeral_reason(&w), "Running");
    let st = w.status();
    assert_eq!(st.containers.len(), 1, "not an app container");
    let e = &st.ephemeral_containers[0];
    assert!(!e.ready);
    assert_eq!(e.restart_count, 0);
    // Created in main's PID namespace, with its stdin and tty.
    let main_id = st.containers[0]
        .container_id
        .trim_start_matches("containerd://")
        .to_string();
    let id = e
        .container_id
        .trim_start_matches("containerd://")
        .to_string();
    let config = fake.st().configs[&id].clone();
    assert!(config.stdin && config.tty);
    let ns = config
        .linux
        .unwrap()
        .security_context
        .unwrap()
        .namespace_options
        .unwrap();
    assert_eq!(ns.pid, cri::NamespaceMode::Target as i32);
    assert_eq!(ns.target_id, main_id);

    // The same update again adds nothing.
    w.update_pod(&pod(serde_json::json!([debugger(Some("main"))])))
        .await;
    assert_eq!(w.status().ephemeral_containers.len(), 1);

    // It exits: terminated for good, whatever the pod's restartPolicy (Always here).
    fake.exit("debugger", 1);
    w.sync(Instant::now()).await;
    assert_eq!(ephemeral_reason(&w), "Terminated:Error");
    for _ in 0..3 {
        w.sync(Instant::now() + Duration::from_secs(600)).await;
    }
    let calls = fake.take_calls();
    assert!(
        !calls.iter().any(|c| c.starts_with("CreateContainer")),
        "never restarted: {calls:?}"
    );
    assert_eq!(ephemeral_reason(&w), "Terminated:Error");

    // Killing the pod removes it with the rest.
    w.kill(Duration::ZERO).await.unwrap();
    assert!(fake.calls().contains(&format!("RemoveContainer {id}")));
}

#[tokio::test]
async fn a_debugger_without_a_target_keeps_its_own_pid_namespace() {
    let fake = Arc::new(FakeCri::default());
    let mut w = PodWorker::new(
        &pod(serde_json::json!([debugger(None)])),
        cfg(),
        fake.clone(),
    )
    .unwrap();
    w.sync(Instant::now()).await;
    let id = w.status().ephemeral_containers[0]
        .container_id
        .trim_start_matches("containerd://")
        .to_string();
    let config = fake.st().configs[&id].clone();
    let ns = config
        .linux
        .unwrap()
        .security_context
        .unwrap()
        .namespace_options
        .unwrap();
    assert_eq!(ns.pid, cri::NamespaceMode::Container as i32);
    assert!(ns.target_id.is_empty());
}
