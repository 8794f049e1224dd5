//! The node agent against the real kiln-apiserver on a real etcd (/usr/bin/etcd), all on 127.0.0.1:
//! the kubelet starts its static pod before the API server exists, then registers the Node (Ready), keeps
//! its Lease, and reports a mirror pod that follows manifest edits and removal.

mod common;

use std::time::Duration;

use clap::Parser;
use common::{eventually, pod_yaml};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kiln_pki::{
    ensure_kubeconfig, ensure_tree, load_ca, spec, KubeconfigKind, TreeParams, Validity,
};
use kiln_testkit::{client_from_kubeconfig, free_port, Etcd};
use kube::api::Api;

const NODE: &str = "node-it";

fn condition(node: &Node, type_: &str) -> Option<(String, String)> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[tokio::test]
async fn registers_node_lease_and_mirror_pods_once_the_api_server_comes_up() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let mut params = TreeParams::new(NODE);
    params.host_addresses = vec!["127.0.0.1".into()];
    ensure_tree(&pki, &params).unwrap();
    let ca = load_ca(&pki, spec("ca").unwrap()).unwrap();
    let port = free_port();
    let server = format!("https://127.0.0.1:{port}");
    let etc = dir.path().join("etc");
    for kind in [
        KubeconfigKind::Admin,
        KubeconfigKind::Kubelet {
            node_name: NODE.into(),
        },
    ] {
        ensure_kubeconfig(&etc, &ca, &kind, "kiln", &server, &Validity::default()).unwrap();
    }

    // 1. The kubelet first: its static pod runs although nothing answers on the API port yet.
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(
        manifests.join("web.yaml"),
        pod_yaml("web", "Always", "sleep 1000", 1),
    )
    .unwrap();
    let mut cfg = kiln_kubelet::KubeletConfig::new(NODE, "127.0.0.1".parse().unwrap());
    cfg.kubeconfig = etc.join("kubelet.conf");
    cfg.pod_manifest_path = manifests.clone();
    cfg.root_dir = dir.path().join("kubelet");
    cfg.pod_log_dir = dir.path().join("logs");
    cfg.file_check_frequency = Duration::from_millis(200);
    cfg.node_status_update_frequency = Duration::from_secs(1);
    cfg.lease_renew_interval = Duration::from_secs(1);
    cfg.api_retry_max = Duration::from_secs(1);
    cfg.capacity_cpu = "2".into();
    cfg.capacity_memory = "2Gi".into();
    let kubelet = kiln_kubelet::run(cfg).await.unwrap();
    eventually(15, "static pod running", || async {
        kubelet
            .static_pods
            .pods()
            .into_iter()
            .find(|(_, st)| st.as_ref().is_some_and(|s| s.containers[0].is_running()))
    })
    .await;
    let mut state = kubelet.agent_state.clone();
    eventually(
        15,
        "registration failing while the API server is down",
        || {
            let e = state.borrow_and_update().last_error.clone();
            async move { e.filter(|e| e.contains("register")) }
        },
    )
    .await;

    // 2. Then the store and the API server.
    let etcd = Etcd::start().await;
    let p = |f: &str| pki.join(f).display().to_string();
    let options = kiln_apiserver::Options::parse_from([
        "kiln-apiserver".to_string(),
        format!("--etcd-servers={}", etcd.endpoint),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
    ]);
    let apiserver = kiln_apiserver::start(options)
        .await
        .expect("apiserver starts");
    let admin = client_from_kubeconfig(&etc.join("admin.conf")).await;

    // 3. The Node: registered, Ready, with what the flags said.
    let nodes: Api<Node> = Api::all(admin.clone());
    let node = eventually(30, "node Ready", || async {
        let n = nodes.get_opt(NODE).await.ok().flatten()?;
        (condition(&n, "Ready") == Some(("True".into(), "KubeletReady".into()))).then_some(n)
    })
    .await;
    let status = node.status.clone().unwrap();
    assert!(status
        .addresses
        .unwrap()
        .iter()
        .any(|a| a.type_ == "InternalIP" && a.address == "127.0.0.1"));
    assert_eq!(status.capacity.unwrap()["memory"].0, "2Gi");
    let info = status.node_info.unwrap();
    assert_eq!(info.container_runtime_version, "kiln-host://0.1.0");
    assert_eq!(info.kubelet_version, kiln_common::version::GIT_VERSION);
    assert!(info.kubelet_version.starts_with("v1.33.0-kiln."));

    // 4. The Lease, renewed.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    let first = eventually(30, "lease", || async {
        leases.get_opt(NODE).await.ok().flatten()
    })
    .await;
    let spec_ = first.spec.clone().unwrap();
    assert_eq!(spec_.holder_identity.as_deref(), Some(NODE));
    let renewed = spec_.renew_time.clone().unwrap();
    eventually(30, "lease renewed", || async {
        let l = leases.get_opt(NODE).await.ok().flatten()?;
        (l.spec?.renew_time? != renewed).then_some(())
    })
    .await;

    // 5. The mirror pod: annotated, owned by the node, Running with the node's IP.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "kube-system");
    let mirror = eventually(30, "mirror pod Running", || async {
        let p = pods.get_opt("web-node-it").await.ok().flatten()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;
    let hash = annotation(&mirror, "kubernetes.io/config.hash")
        .unwrap()
        .to_string();
    assert_eq!(
        annotation(&mirror, "kubernetes.io/config.mirror"),
        Some(hash.as_str())
    );
    assert_eq!(
        annotation(&mirror, "kubernetes.io/config.source"),
        Some("file")
    );
    let owner = &mirror.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", NODE));
    assert_eq!(Some(owner.uid.as_str()), node.metadata.uid.as_deref());
    assert_eq!(
        mirror.spec.as_ref().unwrap().node_name.as_deref(),
        Some(NODE)
    );
    let st = mirror.status.unwrap();
    assert_eq!(st.pod_ip.as_deref(), Some("127.0.0.1"));
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.restart_count == 0);

    // 6. An edit replaces the mirror (new hash); a removal deletes it.
    std::fs::write(
        manifests.join("web.yaml"),
        pod_yaml("web", "Always", "sleep 2000", 1),
    )
    .unwrap();
    eventually(30, "mirror pod of the new manifest", || async {
        let p = pods.get_opt("web-node-it").await.ok().flatten()?;
        let h = annotation(&p, "kubernetes.io/config.mirror")?;
        (h != hash && p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    std::fs::remove_file(manifests.join("web.yaml")).unwrap();
    eventually(30, "mirror pod deleted", || async {
        pods.get_opt("web-node-it")
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await;

    // 7. kubectl sees the node Ready (Table output through the real client).
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(etc.join("admin.conf"))
        .args(["get", "nodes", "--no-headers"])
        .output()
        .await
        .expect("kubectl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(NODE) && text.contains(" Ready"),
        "kubectl get nodes: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 8. A Node deleted under the running kubelet is not created again at once (reset's
    //    leave-cluster deletes it a few seconds before it stops the kubelet; the kubelet waits
    //    60 s before it registers again).
    nodes
        .delete(NODE, &Default::default())
        .await
        .expect("node deleted");
    let renewals = kubelet.agent_state.borrow().lease_renewals;
    eventually(30, "three more lease renewals", || {
        let n = kubelet.agent_state.borrow().lease_renewals;
        async move { (n >= renewals + 3).then_some(()) }
    })
    .await;
    assert!(
        nodes.get_opt(NODE).await.unwrap().is_none(),
        "the kubelet created its deleted Node again at once"
    );

    kubelet.shutdown().await;
    apiserver.shutdown().await;
    drop(etcd);
}
