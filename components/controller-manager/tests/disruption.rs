//! The disruption controller (with the replicaset controller) against an in-process kiln-apiserver:
//! a budget counted against its ReplicaSet's scale, an eviction spending its disruption, the
//! controller forgetting the evicted pod once it is gone, and the fail-safe status of a budget whose
//! pods' controller cannot be found. No kubelet runs: the test marks pods Ready itself.

use clap::Parser;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

async fn mark_ready(pods: &Api<Pod>, label: &str) -> usize {
    let list = pods
        .list(&ListParams::default().labels(label))
        .await
        .unwrap();
    let mut n = 0;
    for p in list.items {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !ready {
            let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
            let name = p.metadata.name.unwrap();
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
        }
        n += 1;
    }
    n
}

async fn status_of(pdbs: &Api<PodDisruptionBudget>, name: &str) -> PodDisruptionBudgetStatus {
    pdbs.get(name).await.unwrap().status.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_follow_their_pods_and_evictions() {
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
        "--controllers=replicaset,disruption".into(),
    ]))
    .await
    .unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}}}
    }))
    .unwrap();
    sets.create(&PostParams::default(), &rs).await.unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": "34%", "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();

    // Not ready yet: nothing may be disrupted.
    let s = eventually("the budget to be processed", || async {
        let s = status_of(&pdbs, "web").await;
        (s.observed_generation == Some(1) && s.expected_pods == 3).then_some(s)
    })
    .await;
    assert_eq!((s.desired_healthy, s.disruptions_allowed), (1, 0));

    eventually("3 ready pods", || async {
        (mark_ready(&pods, "app=web").await == 3).then_some(())
    })
    .await;
    // 34% of 3 rounds up to 2 unavailable: 1 must stay healthy, 2 may go.
    let s = eventually("2 disruptions allowed", || async {
        let s = status_of(&pdbs, "web").await;
        (s.disruptions_allowed == 2).then_some(s)
    })
    .await;
    assert_eq!(
        (s.expected_pods, s.desired_healthy, s.current_healthy),
        (3, 1, 3)
    );
    let cond = &s.conditions.unwrap()[0];
    assert_eq!(
        (
            cond.type_.as_str(),
            cond.status.as_str(),
            cond.reason.as_str()
        ),
        ("DisruptionAllowed", "True", "SufficientPods")
    );

    // An eviction spends one; the evicted pod (never scheduled, so deleted at once) is replaced by
    // an unready pod, and the controller drops it from disruptedPods once it is gone.
    let victim = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    pods.evict(&victim, &EvictParams::default()).await.unwrap();
    let s = eventually("the controller to count 2 healthy pods", || async {
        let s = status_of(&pdbs, "web").await;
        (s.current_healthy == 2 && s.disrupted_pods.is_none()).then_some(s)
    })
    .await;
    assert_eq!(s.disruptions_allowed, 1);

    // A pod whose controllerRef leads nowhere: the budget fails safe.
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "lost", "labels": {"app": "lost"}, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gone", "uid": "no-such-uid", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    let lost: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "lost"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "lost"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &lost).await.unwrap();
    let cond = eventually("SyncFailed", || async {
        let s = status_of(&pdbs, "lost").await;
        s.conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.reason == "SyncFailed")
    })
    .await;
    assert_eq!(cond.status, "False");
    assert_eq!(cond.message, "found no controllers for pod \"lost\"");
    assert_eq!(status_of(&pdbs, "lost").await.disruptions_allowed, 0);
}
