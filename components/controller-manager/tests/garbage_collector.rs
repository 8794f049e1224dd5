//! The garbage collector against an in-process kiln-apiserver: deleting a Deployment removes its
//! ReplicaSets and their pods (background propagation); a pod with one owner left keeps living
//! without the dangling reference.

use clap::Parser;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_of_deleted_owners_go() {
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
        "--controllers=deployment,replicaset,garbagecollector".into(),
    ]))
    .await
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let lp = ListParams::default().labels("app=web");
    eventually("a ReplicaSet with 2 pods", || async {
        let rs = sets.list(&lp).await.ok()?.items.len();
        let p = pods.list(&lp).await.ok()?.items.len();
        (rs == 1 && p == 2).then_some(())
    })
    .await;

    // Two owners, one of which goes: the dependent stays, without the dangling reference.
    let keeper: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keeper"}
    }))
    .unwrap();
    let keeper = maps.create(&PostParams::default(), &keeper).await.unwrap();
    let rs = sets.list(&lp).await.unwrap().items.remove(0);
    let shared: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper", "uid": keeper.metadata.uid},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs.metadata.name, "uid": rs.metadata.uid}
        ]}
    }))
    .unwrap();
    maps.create(&PostParams::default(), &shared).await.unwrap();

    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("ReplicaSets and pods collected", || async {
        let rs = sets.list(&lp).await.ok()?.items.len();
        let p = pods.list(&lp).await.ok()?.items.len();
        (rs == 0 && p == 0).then_some(())
    })
    .await;
    let shared = eventually("dangling reference removed", || async {
        let m = maps.get("shared").await.ok()?;
        (m.metadata.owner_references.as_ref()?.len() == 1).then_some(m)
    })
    .await;
    assert_eq!(shared.metadata.owner_references.unwrap()[0].name, "keeper");
}
