//! The manifest directory drives the runtime: add → start, edit → restart, remove → stop; and the kubelet
//! starts static pods while no API server answers.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, pod_yaml, process_gone};
use kiln_kubelet::container_status::ContainerState;
use kiln_kubelet::runtime::{HostRuntime, Runtime};
use kiln_kubelet::static_pods::StaticPods;
use kiln_kubelet::KubeletConfig;

fn pid_of(sp: &StaticPods, name: &str) -> Option<(String, i32)> {
    sp.pods().into_iter().find_map(|(p, st)| {
        if p.metadata.name.as_deref() != Some(name) {
            return None;
        }
        match st?.containers[0].state {
            ContainerState::Running { pid, .. } => Some((p.metadata.uid.clone()?, pid as i32)),
            _ => None,
        }
    })
}

#[tokio::test]
async fn add_edit_remove_start_restart_stop() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let rt: Arc<dyn Runtime> = Arc::new(HostRuntime::new(
        dir.path().join("logs"),
        Duration::from_millis(100),
        Duration::from_secs(1),
        "node-a",
        "127.0.0.1".parse().unwrap(),
    ));
    let sp = StaticPods::new(&manifests, "node-a", rt.clone());
    assert!(sp.sync_once().await.is_empty());

    let file = manifests.join("web.yaml");
    std::fs::write(&file, pod_yaml("web", "Always", "echo v1; sleep 1000", 2)).unwrap();
    // Files the kubelet ignores: hidden and non-manifest extensions.
    std::fs::write(manifests.join(".web.yaml.swp"), "junk").unwrap();
    std::fs::write(manifests.join("notes.txt"), "junk").unwrap();
    let r = sp.sync_once().await;
    assert_eq!(r.started, vec!["web-node-a".to_string()]);
    let (uid1, pid1) = eventually(10, "web running", || async { pid_of(&sp, "web-node-a") }).await;
    let pod = sp.pods().remove(0).0;
    let ann = pod.metadata.annotations.unwrap();
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert_eq!(ann["kubernetes.io/config.hash"], uid1);

    // Unchanged file: nothing happens.
    assert!(sp.sync_once().await.is_empty());
    assert_eq!(pid_of(&sp, "web-node-a").unwrap().1, pid1);

    std::fs::write(&file, pod_yaml("web", "Always", "echo v2; sleep 1000", 2)).unwrap();
    let r = sp.sync_once().await;
    assert_eq!(r.restarted, vec!["web-node-a".to_string()]);
    assert!(process_gone(pid1), "old process survived the edit");
    let (uid2, _) = eventually(10, "web restarted", || async { pid_of(&sp, "web-node-a") }).await;
    assert_ne!(uid1, uid2);
    assert_eq!(rt.pod_uids(), vec![uid2.clone()]);
    let log2 = dir
        .path()
        .join(format!("logs/kube-system_web-node-a_{uid2}/main/0.log"));
    eventually(10, "v2 log", || async {
        std::fs::read_to_string(&log2)
            .ok()
            .filter(|t| t.contains("v2"))
    })
    .await;

    // A broken edit keeps the running pod (a half-written file must not take the control plane down).
    std::fs::write(&file, "apiVersion: v1\nkind: Pod\nmetadata: [").unwrap();
    assert!(sp.sync_once().await.is_empty());
    let (_, pid2) = pid_of(&sp, "web-node-a").unwrap();

    std::fs::remove_file(&file).unwrap();
    let r = sp.sync_once().await;
    assert_eq!(r.stopped, vec!["web-node-a".to_string()]);
    assert!(process_gone(pid2));
    assert!(rt.pod_uids().is_empty());
    assert!(sp.pods().is_empty());
}

#[tokio::test]
async fn kubelet_runs_static_pods_without_an_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let mut cfg = KubeletConfig::new("node-b", "127.0.0.1".parse().unwrap());
    // The kubeconfig does not exist yet, as on a control-plane host before init writes it.
    cfg.kubeconfig = dir.path().join("kubelet.conf");
    cfg.pod_manifest_path = manifests.clone();
    cfg.root_dir = dir.path().join("root");
    cfg.pod_log_dir = dir.path().join("logs");
    cfg.file_check_frequency = Duration::from_millis(100);
    cfg.backoff_base = Duration::from_millis(100);
    let kubelet = kiln_kubelet::run(cfg).await.unwrap();

    std::fs::write(
        manifests.join("api.yaml"),
        pod_yaml("api", "Always", "sleep 1000", 1),
    )
    .unwrap();
    let (_, pid) = eventually(15, "static pod running", || async {
        pid_of(&kubelet.static_pods, "api-node-b")
    })
    .await;
    let mut state = kubelet.agent_state.clone();
    let err = eventually(15, "agent reports the missing kubeconfig", || {
        let e = state.borrow_and_update().last_error.clone();
        async move { e }
    })
    .await;
    assert!(err.contains("kubeconfig"), "{err}");
    assert!(kubelet.agent_state.borrow().node_uid.is_none());

    // A file removed while the loop runs stops its pod.
    std::fs::remove_file(manifests.join("api.yaml")).unwrap();
    eventually(15, "pod stopped", || async {
        process_gone(pid).then_some(())
    })
    .await;

    std::fs::write(
        manifests.join("again.yaml"),
        pod_yaml("again", "Always", "sleep 1000", 1),
    )
    .unwrap();
    let (_, pid) = eventually(15, "second pod running", || async {
        pid_of(&kubelet.static_pods, "again-node-b")
    })
    .await;
    kubelet.shutdown().await;
    assert!(process_gone(pid), "shutdown left the pod running");
}
