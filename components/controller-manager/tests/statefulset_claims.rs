//! StatefulSet claims against an in-process kiln-apiserver serving PersistentVolumeClaims: the
//! statefulset controller creates each pod's claims from the volumeClaimTemplates, and with
//! persistentVolumeClaimRetentionPolicy Delete/Delete the claims are owned by the set, a
//! scaled-down pod's claim is handed to that pod and collected with it, and the rest go with the
//! set (garbage collector, pvc-protection).

use clap::Parser;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn controller_uid(c: &PersistentVolumeClaim) -> Option<String> {
    c.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_follow_the_retention_policy() {
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
        "--controllers=statefulset,garbagecollector,pvc-protection".into(),
    ]))
    .await
    .unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "serviceName": "web", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .unwrap();
    let set = sets.create(&PostParams::default(), &set).await.unwrap();
    let set_uid = set.metadata.uid.clone().unwrap();
    for claim in ["data-web-0", "data-web-1"] {
        let c = eventually("the claim to be owned by the set", || async {
            let c = pvcs.get_opt(claim).await.unwrap()?;
            (controller_uid(&c).as_deref() == Some(set_uid.as_str())).then_some(c)
        })
        .await;
        assert_eq!(c.metadata.labels.as_ref().unwrap()["app"], "web");
    }

    // Scaled down: web-1's claim goes with web-1; web-0's stays with the set.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    eventually("the scaled-down claim to be collected", || async {
        pvcs.get_opt("data-web-1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let kept = pvcs.get("data-web-0").await.unwrap();
    assert_eq!(controller_uid(&kept).as_deref(), Some(set_uid.as_str()));

    // The set goes: so does its claim.
    sets.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("the set's claim to be collected", || async {
        pvcs.get_opt("data-web-0")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}
