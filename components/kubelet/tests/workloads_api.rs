//! The workload pod loop against the real kiln-apiserver on a real etcd (127.0.0.1), with a recording fake
//! runtime: a pod bound to the node is started and its status reported through pods/status; static/mirror
//! pods and other nodes' pods are left alone; `kubectl delete` (graceful) stops the pod with its grace
//! period, and the kubelet then removes the object.

mod common;

use std::sync::Arc;

use clap::Parser;
use common::eventually;
use common::fake_runtime::{RunningRuntime, POD_IP};
use k8s_openapi::api::core::v1::Pod;
use kiln_kubelet::workloads::WorkloadPods;
use kiln_pki::{
    ensure_kubeconfig, ensure_tree, load_ca, spec, KubeconfigKind, TreeParams, Validity,
};
use kiln_testkit::{client_from_kubeconfig, free_port, Etcd};
use kube::api::{Api, DeleteParams, PostParams};

const NODE: &str = "node-w";

fn pod(name: &str, node: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 3,
                 "containers": [{"name": "c", "image": "10.250.0.1:5000/kiln/busybox:1"}]}
    }))
    .unwrap()
}

fn condition(p: &Pod, t: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn bound_pods_run_report_status_and_are_removed_after_graceful_stop() {
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
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");

    let runtime = Arc::new(RunningRuntime::default());
    let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
    let kubelet = client_from_kubeconfig(&etc.join("kubelet.conf")).await;
    let loop_task = tokio::spawn(
        WorkloadPods::new(NODE, "127.0.0.1", runtime.clone()).run(kubelet, shutdown_rx),
    );

    let pp = PostParams::default();
    let web = pods
        .create(&pp, &pod("web", NODE, serde_json::json!({})))
        .await
        .unwrap();
    pods.create(&pp, &pod("elsewhere", "other-node", serde_json::json!({})))
        .await
        .unwrap();
    pods.create(
        &pp,
        &pod(
            "mirror",
            NODE,
            serde_json::json!({"kubernetes.io/config.mirror": "abc"}),
        ),
    )
    .await
    .unwrap();

    // Started once, and its status reported: Running, Ready, pod IP from the runtime, host IP the node's.
    let reported = eventually(30, "web status reported", || async {
        let p = pods.get("web").await.ok()?;
        (condition(&p, "Ready").as_deref() == Some("True")).then_some(p)
    })
    .await;
    let st = reported.status.unwrap();
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(st.pod_ip.as_deref(), Some(POD_IP));
    assert_eq!(st.host_ip.as_deref(), Some("127.0.0.1"));
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert_eq!(
        runtime.calls(),
        vec!["run web".to_string()],
        "only this node's workload pod"
    );

    // Graceful delete: the pod stays (deletionTimestamp) until the kubelet stopped it, then it is gone.
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually(30, "web removed from the API", || async {
        pods.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    let uid = web.metadata.uid.unwrap();
    assert_eq!(
        runtime.calls(),
        vec!["run web".to_string(), format!("stop {uid} Some(3s)")]
    );
    // The other node's pod and the mirror pod are untouched.
    assert!(pods.get_opt("elsewhere").await.unwrap().is_some());
    assert!(pods.get_opt("mirror").await.unwrap().is_some());

    let _ = shutdown.send(true);
    loop_task.await.unwrap();
    apiserver.shutdown().await;
}
