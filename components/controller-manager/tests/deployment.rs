//! The deployment controller (with the replicaset controller) against an in-process
//! kiln-apiserver, driven by the real kubectl: rollout status finishes, a new image makes a new
//! ReplicaSet and scales the old one to 0, history lists revisions, undo goes back, scale works
//! through the Deployment, a paused Deployment is not rolled. A stand-in kubelet marks pods
//! Running and Ready through pods/status.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

/// Marks every pod of the namespace Running and Ready, as a kubelet would; stops on drop.
struct FakeKubelet(tokio::task::JoinHandle<()>);

impl FakeKubelet {
    fn start(pods: Api<Pod>) -> FakeKubelet {
        FakeKubelet(tokio::spawn(async move {
            let mut n = 0u32;
            loop {
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    for p in list.items {
                        let ready = p
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            });
                        if ready || p.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        n += 1;
                        let ip = format!("10.244.{}.{}", n / 250, n % 250 + 2);
                        let status = json!({"status": {"phase": "Running", "podIP": ip,
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

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn image(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap()
}

async fn owned_sets(sets: &Api<ReplicaSet>, uid: &str) -> Vec<ReplicaSet> {
    sets.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == uid && r.controller == Some(true))
        })
        .collect()
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_history_undo_scale_and_pause_with_kubectl() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kiln_controller_manager=debug")
        .with_test_writer()
        .try_init();
    let c = Cluster::start().await;
    let client = c.admin().await;
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=deployment,replicaset".into(),
    ]))
    .await
    .unwrap();
    let _kubelet = FakeKubelet::start(Api::namespaced(client.clone(), "default"));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");

    let manifest = c.dir.path().join("web.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: registry.local/app:1
",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()])
        .await;
    let out = c
        .kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=45s"])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let d = deployments.get("web").await.unwrap();
    let uid = d.metadata.uid.clone().unwrap();
    let first = owned_sets(&sets, &uid).await;
    assert_eq!(first.len(), 1);
    let hash = first[0].metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(
        first[0].metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "1"
    );
    let s = d.status.clone().unwrap();
    assert_eq!(
        (
            s.replicas,
            s.updated_replicas,
            s.ready_replicas,
            s.available_replicas
        ),
        (Some(3), Some(3), Some(3), Some(3))
    );
    let progressing = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(
        progressing.reason.as_deref(),
        Some("NewReplicaSetAvailable")
    );

    // A new image: a second ReplicaSet takes over, the first goes to 0.
    c.kubectl_ok(&["set", "image", "deployment/web", "c=registry.local/app:2"])
        .await;
    let out = c
        .kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=45s"])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let after = owned_sets(&sets, &uid).await;
    assert_eq!(after.len(), 2);
    let old = after
        .iter()
        .find(|rs| rs.metadata.name == first[0].metadata.name)
        .unwrap();
    assert_eq!(spec_replicas(old), 0);
    let history = c
        .kubectl_ok(&["rollout", "history", "deployment/web"])
        .await;
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");

    // Undo: back to app:1 in the first set, now revision 3.
    c.kubectl_ok(&["rollout", "undo", "deployment/web"]).await;
    let out = c
        .kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=45s"])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let d = deployments.get("web").await.unwrap();
    assert_eq!(image(&d), "registry.local/app:1");
    let back = sets
        .get(first[0].metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(spec_replicas(&back), 3);
    assert_eq!(
        back.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "3"
    );

    // kubectl scale goes through the Deployment to its set.
    c.kubectl_ok(&["scale", "deployment/web", "--replicas=5"])
        .await;
    eventually("5 available replicas", || async {
        let s = deployments.get("web").await.ok()?.status?;
        (s.available_replicas == Some(5) && s.updated_replicas == Some(5)).then_some(())
    })
    .await;

    // Paused: a template change makes no new set until resumed.
    c.kubectl_ok(&["rollout", "pause", "deployment/web"]).await;
    c.kubectl_ok(&["set", "image", "deployment/web", "c=registry.local/app:3"])
        .await;
    eventually("paused change observed", || async {
        let d = deployments.get("web").await.ok()?;
        let s = d.status.as_ref()?;
        let paused = s
            .conditions
            .iter()
            .flatten()
            .any(|c| c.reason.as_deref() == Some("DeploymentPaused"));
        (s.observed_generation == d.metadata.generation && paused).then_some(())
    })
    .await;
    assert_eq!(owned_sets(&sets, &uid).await.len(), 2);
    c.kubectl_ok(&["rollout", "resume", "deployment/web"]).await;
    let out = c
        .kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=45s"])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let last = owned_sets(&sets, &uid).await;
    assert_eq!(last.len(), 3);
    assert_eq!(last.iter().map(spec_replicas).sum::<i32>(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_stops_old_pods_before_starting_new_ones() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=deployment,replicaset".into(),
    ]))
    .await
    .unwrap();
    let _kubelet = FakeKubelet::start(Api::namespaced(client.clone(), "default"));
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "registry.local/db:1"}]}}}
    }))
    .unwrap();
    let d = deployments
        .create(&kube::api::PostParams::default(), &d)
        .await
        .unwrap();
    let uid = d.metadata.uid.clone().unwrap();
    c.kubectl_ok(&["rollout", "status", "deployment/db", "--timeout=45s"])
        .await;
    let first = owned_sets(&sets, &uid).await;
    assert_eq!(first.len(), 1);
    let old_name = first[0].metadata.name.clone().unwrap();

    c.kubectl_ok(&["set", "image", "deployment/db", "c=registry.local/db:2"])
        .await;
    // Until the rollout is done, the new set never runs while old pods still do.
    eventually("recreate rollout done", || async {
        let all = owned_sets(&sets, &uid).await;
        let old = all
            .iter()
            .find(|rs| rs.metadata.name.as_deref() == Some(&old_name))?;
        let new = all
            .iter()
            .find(|rs| rs.metadata.name.as_deref() != Some(&old_name))?;
        let old_running = old.status.as_ref().map(|s| s.replicas).unwrap_or(0);
        let new_running = new.status.as_ref().map(|s| s.replicas).unwrap_or(0);
        assert!(
            !(old_running > 0 && new_running > 0),
            "old and new pods ran together: {old_running} + {new_running}"
        );
        let s = deployments.get("db").await.ok()?.status?;
        (spec_replicas(old) == 0
            && s.updated_replicas == Some(2)
            && s.available_replicas == Some(2))
        .then_some(())
    })
    .await;
    let out = c
        .kubectl_ok(&["rollout", "status", "deployment/db", "--timeout=45s"])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
}
