//! The replicaset controller against an in-process kiln-apiserver: create to replicas, replace a
//! deleted pod, adopt a matching orphan and remove the extra, report status.

use clap::Parser;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

async fn active_owned(pods: &Api<Pod>, uid: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == uid && r.controller == Some(true))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_keeps_replicas_and_adopts_orphans() {
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
        "--controllers=replicaset".into(),
    ]))
    .await
    .unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}}}
    }))
    .unwrap();
    let rs = sets.create(&PostParams::default(), &rs).await.unwrap();
    let uid = rs.metadata.uid.clone().unwrap();

    let first = eventually("3 pods", || async {
        let owned = active_owned(&pods, &uid).await;
        (owned.len() == 3).then_some(owned)
    })
    .await;
    assert!(first[0]
        .metadata
        .name
        .as_deref()
        .unwrap()
        .starts_with("web-"));

    let victim = first[0].metadata.name.clone().unwrap();
    pods.delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eventually("replacement", || async {
        let owned = active_owned(&pods, &uid).await;
        (owned.len() == 3
            && owned
                .iter()
                .all(|p| p.metadata.name.as_deref() != Some(&victim)))
        .then_some(())
    })
    .await;

    let orphan: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hand-made", "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "registry.local/app:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    // Adopted, and the set is back at 3: the extra deleted is one of the unscheduled pods, which
    // go before assigned ones. (Were the orphan unscheduled too, it would be the newest and so the
    // one deleted — upstream's order — whenever it was created in a later second than the rest.)
    eventually("orphan adopted and extra removed", || async {
        let owned = active_owned(&pods, &uid).await;
        let adopted = pods.get("hand-made").await.ok().is_some_and(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == uid)
        });
        (adopted && owned.len() == 3).then_some(())
    })
    .await;
    eventually("status.replicas = 3", || async {
        let s = sets.get("web").await.ok()?.status?;
        (s.replicas == 3 && s.observed_generation == Some(1)).then_some(())
    })
    .await;
}
