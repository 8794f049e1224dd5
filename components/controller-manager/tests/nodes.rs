//! kiln-controller-manager against an in-process kiln-apiserver on a real etcd: node IPAM and node
//! lifecycle (stale heartbeat → Ready=Unknown, taints, its pods marked not ready, eviction), leader
//! election.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kiln_testkit::{create_node, eventually, Cluster};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn options(c: &Cluster, extra: &[&str]) -> kiln_controller_manager::Options {
    let mut args = vec![
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    kiln_controller_manager::Options::parse_from(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodeipam_assigns_distinct_pod_cidrs() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    create_node(&client, "n1", "2", json!([])).await;
    let _cm = kiln_controller_manager::start(options(
        &c,
        &[
            "--controllers=nodeipam",
            "--allocate-node-cidrs",
            "--cluster-cidr=10.244.0.0/16",
        ],
    ))
    .await
    .unwrap();
    create_node(&client, "n2", "2", json!([])).await;
    create_node(&client, "n3", "2", json!([])).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut cidrs = Vec::new();
    for name in ["n1", "n2", "n3"] {
        let cidr = eventually(&format!("podCIDR of {name}"), || async {
            let spec = nodes.get(name).await.ok()?.spec?;
            let cidr = spec.pod_cidr?;
            assert_eq!(spec.pod_cidrs, Some(vec![cidr.clone()]));
            Some(cidr)
        })
        .await;
        cidrs.push(cidr);
    }
    cidrs.sort();
    assert_eq!(cidrs, ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]);
}

async fn renew_lease(client: &kube::Client, node: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = MicroTime(Timestamp::now());
    if leases.get_opt(node).await.unwrap().is_some() {
        let patch = json!({"spec": {"renewTime": now}});
        leases
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        return;
    }
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
}

fn ready_status(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_node_goes_unknown_is_tainted_and_its_pods_evicted() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    create_node(&client, "dead", "2", json!([])).await;
    create_node(&client, "alive", "2", json!([])).await;
    renew_lease(&client, "dead").await;
    renew_lease(&client, "alive").await;
    // The live node's kubelet keeps renewing.
    let renewer = {
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                renew_lease(&client, "alive").await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "on-dead", "namespace": "default"},
        "spec": {"nodeName": "dead", "containers": [{"name": "c", "image": "registry.local/app:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // Ready pods that are never evicted (they tolerate unreachable forever), one per node: the dead
    // node's one must turn not ready, so endpoints drop it.
    for (name, node) in [("tolerant-dead", "dead"), ("tolerant-alive", "alive")] {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.local/app:1"}],
                "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                    "effect": "NoExecute"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let status = json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    let pod_ready = |p: &Pod| {
        p.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.clone())
    };

    let _cm = kiln_controller_manager::start(options(
        &c,
        &[
            "--controllers=nodelifecycle",
            "--node-monitor-grace-period=2s",
            "--node-monitor-period=200ms",
            "--pod-eviction-timeout=1s",
        ],
    ))
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let dead = eventually("dead node Ready=Unknown and tainted", || async {
        let n = nodes.get("dead").await.ok()?;
        let tainted = n
            .spec
            .as_ref()?
            .taints
            .as_ref()?
            .iter()
            .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute");
        (ready_status(&n).as_deref() == Some("Unknown") && tainted).then_some(n)
    })
    .await;
    let ready = dead
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));

    eventually("pod on the dead node evicted", || async {
        match pods.get_opt("on-dead").await.ok()? {
            None => Some(()),
            Some(p) => p.metadata.deletion_timestamp.map(|_| ()),
        }
    })
    .await;
    eventually("the dead node's ready pod marked not ready", || async {
        let p = pods.get("tolerant-dead").await.ok()?;
        (pod_ready(&p).as_deref() == Some("False")).then_some(())
    })
    .await;
    let on_alive = pods.get("tolerant-alive").await.unwrap();
    assert_eq!(pod_ready(&on_alive).as_deref(), Some("True"));
    let alive = nodes.get("alive").await.unwrap();
    assert_eq!(
        ready_status(&alive).as_deref(),
        Some("True"),
        "renewing node untouched"
    );
    assert!(alive.spec.unwrap().taints.unwrap_or_default().is_empty());
    renewer.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_runs_controllers() {
    let c = Cluster::start().await;
    let flags = [
        "--leader-elect=true",
        "--leader-elect-lease-duration=2s",
        "--leader-elect-renew-deadline=1500ms",
        "--leader-elect-retry-period=200ms",
        "--controllers=nodeipam",
        "--allocate-node-cidrs",
    ];
    let mut args = vec![
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    let a =
        kiln_controller_manager::start(kiln_controller_manager::Options::parse_from(args.clone()))
            .await
            .unwrap();
    let b = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from(args))
        .await
        .unwrap();
    eventually("one leader", || async {
        (a.is_leader() != b.is_leader()).then_some(())
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(c.admin().await, "kube-system");
    let lease = leases.get("kube-controller-manager").await.unwrap();
    let first = lease.spec.unwrap().holder_identity.unwrap();
    let survivor = if a.is_leader() {
        drop(a);
        b
    } else {
        drop(b);
        a
    };
    eventually("hand over", || async { survivor.is_leader().then_some(()) }).await;
    let lease = leases.get("kube-controller-manager").await.unwrap();
    assert_ne!(lease.spec.unwrap().holder_identity.unwrap(), first);
}
