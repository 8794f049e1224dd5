//! The daemonset controller with the in-process kiln-scheduler and fake nodes: one pod per
//! eligible node (bound by the scheduler through the node affinity the controller sets), none on a
//! tainted node, a pod for a node that joins, removal when a node goes, and a rolling template
//! update that `kubectl rollout status` sees finish.
//!
//! In-process (no lab, no root). It lives here rather than in kiln-controller-manager's tests because
//! it needs the scheduler too, and kiln-controller-manager may not depend on kiln-scheduler, not even
//! for tests (.ci/check-architecture).

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kiln_testkit::{create_node, eventually, Cluster};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

/// Marks bound pods Running and Ready and removes deleted ones, as their kubelet would; stops on drop.
struct FakeKubelets(tokio::task::JoinHandle<()>);

impl FakeKubelets {
    fn start(pods: Api<Pod>) -> FakeKubelets {
        FakeKubelets(tokio::spawn(async move {
            loop {
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    for p in list.items {
                        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                        let ready = p
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            });
                        if p.metadata.deletion_timestamp.is_some() {
                            // The kubelet's last step for a deleted pod: remove the object once its
                            // containers are stopped (here: at once). Controllers wait for it, as
                            // the daemonset controller waits before replacing a terminating pod.
                            let name = p.metadata.name.clone().unwrap_or_default();
                            let _ = pods
                                .delete(&name, &DeleteParams::default().grace_period(0))
                                .await;
                            continue;
                        }
                        if !bound || ready {
                            continue;
                        }
                        let status = json!({"status": {"phase": "Running",
                            "conditions": [{"type": "Ready", "status": "True"}]}});
                        let name = p.metadata.name.unwrap_or_default();
                        let _ = pods
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }))
    }
}

impl Drop for FakeKubelets {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// node → images of the live daemon pods bound there.
async fn placement(pods: &Api<Pod>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let spec = p.spec?;
            Some((spec.node_name?, spec.containers[0].image.clone()?))
        })
        .collect();
    out.sort();
    out
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pod_per_eligible_node_and_rolling_update() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    create_node(&client, "n1", "2", json!([])).await;
    create_node(&client, "n2", "2", json!([])).await;
    create_node(
        &client,
        "cp",
        "2",
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
    )
    .await;
    let kubeconfig = format!("--kubeconfig={}", c.admin_kubeconfig.display());
    let _scheduler = kiln_scheduler::start(kiln_scheduler::Options::parse_from([
        "kiln-scheduler",
        &kubeconfig,
        "--secure-port=0",
        "--leader-elect=false",
    ]))
    .await
    .unwrap();
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager",
        &kubeconfig,
        "--secure-port=0",
        "--leader-elect=false",
        "--controllers=daemonset",
    ]))
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let _kubelets = FakeKubelets::start(pods.clone());

    let manifest = c.dir.path().join("agent.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: kube-system
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: c
        image: registry.local/agent:1
",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()])
        .await;
    let out = c
        .kubectl_ok(&[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "daemonset/agent",
            "--timeout=45s",
        ])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(
        placement(&pods).await,
        pairs(&[
            ("n1", "registry.local/agent:1"),
            ("n2", "registry.local/agent:1")
        ])
    );

    // A node joins: it gets its pod.
    create_node(&client, "n3", "2", json!([])).await;
    eventually("a pod on n3", || async {
        (placement(&pods).await.len() == 3).then_some(())
    })
    .await;

    // Rolling update to a new image.
    c.kubectl_ok(&[
        "-n",
        "kube-system",
        "set",
        "image",
        "daemonset/agent",
        "c=registry.local/agent:2",
    ])
    .await;
    let out = c
        .kubectl_ok(&[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "daemonset/agent",
            "--timeout=45s",
        ])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    eventually("every node on the new image", || async {
        let now = placement(&pods).await;
        (now == pairs(&[
            ("n1", "registry.local/agent:2"),
            ("n2", "registry.local/agent:2"),
            ("n3", "registry.local/agent:2"),
        ]))
        .then_some(())
    })
    .await;

    // A node goes: its pod goes.
    Api::<Node>::all(client.clone())
        .delete("n2", &DeleteParams::default())
        .await
        .unwrap();
    eventually("no pod for n2", || async {
        let now = placement(&pods).await;
        (!now.iter().any(|(n, _)| n == "n2")).then_some(())
    })
    .await;
    eventually("status for 2 nodes", || async {
        let ds: DaemonSet = Api::namespaced(client.clone(), "kube-system")
            .get("agent")
            .await
            .ok()?;
        let s = ds.status?;
        (s.desired_number_scheduled == 2 && s.number_available == Some(2)).then_some(())
    })
    .await;
}
