//! The storage controllers (persistentvolume-binder, pvc-protection, pv-protection,
//! ephemeral-volume, with the garbage collector) against an in-process kiln-apiserver with its
//! PV/PVC/StorageClass registry and StorageObjectInUseProtection admission: a claim binds to a
//! matching static volume; the Retain volume is Released once its claim is deleted; a deleted claim
//! that a running pod uses keeps its finalizer until the pod goes; an ephemeral volume's claim is
//! created for its pod and collected with it; a WaitForFirstConsumer claim waits until a node is
//! selected and is then handed to its provisioner. No kubelet or scheduler runs: the test sets
//! nodeName, pod phases and the selected-node annotation itself.

use clap::Parser;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn ann<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    k: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(k).map(String::as_str)
}

fn pv_phase(v: &PersistentVolume) -> Option<&str> {
    v.status.as_ref()?.phase.as_deref()
}

fn pvc_phase(c: &PersistentVolumeClaim) -> Option<&str> {
    c.status.as_ref()?.phase.as_deref()
}

async fn event_reasons(events: &Api<Event>, name: &str) -> Vec<(String, String)> {
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

async fn gone<K>(api: &Api<K>, name: &str) -> Option<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_none().then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_release_stay_protected_and_follow_their_pods() {
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
        "--controllers=persistentvolume-binder,pvc-protection,pv-protection,ephemeral-volume,garbagecollector".into(),
    ]))
    .await
    .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");

    // Two static volumes; the smaller one that fits is chosen.
    for (name, size) in [("big", "10Gi"), ("fits", "2Gi")] {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "manual",
                "hostPath": {"path": format!("/data/{name}")}}
        }))
        .unwrap();
        pvs.create(&PostParams::default(), &pv).await.unwrap();
    }
    // The binder matches a claim against the volumes it has seen; both must be
    // Available (observed) first, or the claim may fairly take the only one known.
    for name in ["big", "fits"] {
        eventually("the volume to be Available", || async {
            let v = pvs.get(name).await.unwrap();
            (pv_phase(&v) == Some("Available")).then_some(())
        })
        .await;
    }
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
            "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    pvcs.create(&PostParams::default(), &claim).await.unwrap();
    let bound = eventually("the claim to be Bound", || async {
        let c = pvcs.get("data").await.unwrap();
        (pvc_phase(&c) == Some("Bound")).then_some(c)
    })
    .await;
    assert_eq!(
        bound.spec.as_ref().unwrap().volume_name.as_deref(),
        Some("fits")
    );
    assert_eq!(
        ann(&bound.metadata, "pv.kubernetes.io/bind-completed"),
        Some("yes")
    );
    assert_eq!(
        ann(&bound.metadata, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    let status = bound.status.as_ref().unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["storage"].0, "2Gi");
    assert_eq!(
        status.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_string()][..])
    );
    assert!(bound
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == "kubernetes.io/pvc-protection"));
    let fits = eventually("the volume to be Bound", || async {
        let v = pvs.get("fits").await.unwrap();
        (pv_phase(&v) == Some("Bound")).then_some(v)
    })
    .await;
    let r = fits.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(
        (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
        (Some("default"), Some("data"), bound.metadata.uid.as_deref())
    );
    assert_eq!(
        ann(&fits.metadata, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    assert_eq!(pv_phase(&pvs.get("big").await.unwrap()), Some("Available"));

    // A running pod uses the claim: deleting the claim leaves it Terminating.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "user"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "registry.local/app:1"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        "user",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    pvcs.delete("data", &DeleteParams::default()).await.unwrap();
    // The controller saw the deletion (its pod check ran) and kept the finalizer.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let kept = pvcs.get("data").await.unwrap();
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert_eq!(
        kept.metadata.finalizers.as_deref(),
        Some(&["kubernetes.io/pvc-protection".to_string()][..])
    );
    assert_eq!(pv_phase(&pvs.get("fits").await.unwrap()), Some("Bound"));

    // The pod goes: the claim goes, and its Retain volume is Released, keeping its claimRef.
    pods.delete(
        "user",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    eventually("the claim to be deleted", || gone(&pvcs, "data")).await;
    let released = eventually("the volume to be Released", || async {
        let v = pvs.get("fits").await.unwrap();
        (pv_phase(&v) == Some("Released")).then_some(v)
    })
    .await;
    assert!(released.spec.unwrap().claim_ref.is_some());
    // A Released volume is not Bound: pv-protection lets it be deleted.
    pvs.delete("fits", &DeleteParams::default()).await.unwrap();
    eventually("the released volume to be deleted", || gone(&pvs, "fits")).await;

    // An ephemeral volume: its claim is made for the pod and collected with it.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "scratchy"},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}],
            "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                "metadata": {"labels": {"kind": "scratch"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                    "resources": {"requests": {"storage": "1Gi"}}}}}}]}
    }))
    .unwrap();
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
    let eph = eventually("the ephemeral claim", || async {
        pvcs.get_opt("scratchy-scratch").await.unwrap()
    })
    .await;
    let owner = &eph.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.uid.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        (
            "Pod",
            pod.metadata.uid.as_deref().unwrap(),
            Some(true),
            Some(true)
        )
    );
    assert_eq!(eph.metadata.labels.as_ref().unwrap()["kind"], "scratch");
    // It binds to the remaining volume like any claim.
    eventually("the ephemeral claim to bind", || async {
        let c = pvcs.get("scratchy-scratch").await.unwrap();
        (c.spec.as_ref()?.volume_name.as_deref() == Some("big")).then_some(())
    })
    .await;
    pods.delete(
        "scratchy",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    eventually("the ephemeral claim to be collected", || {
        gone(&pvcs, "scratchy-scratch")
    })
    .await;

    // WaitForFirstConsumer: nothing until a node is selected, then the provisioner's turn.
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "local-path"},
        "provisioner": "kiln.io/local-path", "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "later"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
            "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    pvcs.create(&PostParams::default(), &claim).await.unwrap();
    eventually("the WaitForFirstConsumer event", || async {
        event_reasons(&events, "later")
            .await
            .into_iter()
            .find(|(r, m)| {
                r == "WaitForFirstConsumer"
                    && m == "waiting for first consumer to be created before binding"
            })
    })
    .await;
    let waiting = pvcs.get("later").await.unwrap();
    assert_eq!(pvc_phase(&waiting), Some("Pending"));
    assert_eq!(
        ann(
            &waiting.metadata,
            "volume.kubernetes.io/storage-provisioner"
        ),
        None
    );
    pvcs.patch(
        "later",
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-a"}}}),
        ),
    )
    .await
    .unwrap();
    let handed = eventually("the provisioner annotations", || async {
        let c = pvcs.get("later").await.unwrap();
        ann(&c.metadata, "volume.kubernetes.io/storage-provisioner")
            .is_some()
            .then_some(c)
    })
    .await;
    assert_eq!(
        ann(&handed.metadata, "volume.kubernetes.io/storage-provisioner"),
        Some("kiln.io/local-path")
    );
    assert_eq!(
        ann(
            &handed.metadata,
            "volume.beta.kubernetes.io/storage-provisioner"
        ),
        Some("kiln.io/local-path")
    );
    eventually("the ExternalProvisioning event", || async {
        event_reasons(&events, "later").await.into_iter().find(|(r, m)| {
            r == "ExternalProvisioning" && m.starts_with("Waiting for a volume to be created either by the external provisioner 'kiln.io/local-path'")
        })
    })
    .await;
    // Every sync records the event again (the annotation write above already caused one more;
    // a label change causes another): the repeats aggregate into one Event whose count grows,
    // never a second Event object.
    pvcs.patch(
        "later",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"resync": "1"}}})),
    )
    .await
    .unwrap();
    let provisioning = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some("later")
                    && e.reason.as_deref() == Some("ExternalProvisioning")
            })
            .collect::<Vec<_>>()
    };
    eventually("the ExternalProvisioning event repeated", || async {
        let all = provisioning().await;
        (all.iter().map(|e| e.count.unwrap_or(1)).sum::<i32>() >= 2).then_some(())
    })
    .await;
    assert_eq!(
        provisioning().await.len(),
        1,
        "a repeated ExternalProvisioning event is aggregated into one Event"
    );
}
