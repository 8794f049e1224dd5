//! kiln-scheduler's volume plugins against an in-process kiln-apiserver: a bound PV's node affinity
//! decides the node, its FailedScheduling text is upstream's, and WaitForFirstConsumer claims get a
//! node (selected-node, or a static PV's claimRef) before the pod is bound. No PV controller runs
//! here: the test does its part by hand, so what is checked is the scheduler's half of the protocol.

use clap::Parser;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kiln_testkit::{create_node, eventually, Cluster};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// The scheduler runs as itself, so its RBAC (system:kube-scheduler, system:volume-scheduler) is
/// part of what is tested.
fn options(c: &Cluster) -> kiln_scheduler::Options {
    let kubeconfig = c.kubeconfig_for("system:kube-scheduler", &[]);
    kiln_scheduler::Options::parse_from([
        "kiln-scheduler".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        "--leader-elect=false".into(),
    ])
}

async fn three_nodes(client: &kube::Client) {
    for n in ["host1", "host2", "host3"] {
        create_node(client, n, "2", json!([])).await;
    }
}

fn pod_with_claim(name: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "registry.local/app:1"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        }
    }))
    .unwrap()
}

fn local_pv(name: &str, class: &str, host: &str, claim_ref: Value) -> PersistentVolume {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class,
            "local": {"path": "/var/lib/kiln-test"},
            "claimRef": claim_ref,
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}
        }
    }))
    .unwrap()
}

fn claim(
    name: &str,
    class: &str,
    volume: Option<&str>,
    annotations: Value,
) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}}
        }
    }))
    .unwrap()
}

fn class(name: &str, mode: &str, provisioner: &str) -> StorageClass {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode
    }))
    .unwrap()
}

async fn failed_scheduling(client: &kube::Client, pod: &str) -> Option<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.ok()?;
    list.items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(pod)
                && e.reason.as_deref() == Some("FailedScheduling")
        })
        .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0))
        .and_then(|e| e.message)
}

async fn node_of(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("{name} bound"), || async {
        pods.get(name).await.ok()?.spec?.node_name
    })
    .await
}

/// What the PV controller does once a claim has its PV: point the claim at it, mark it bound.
async fn complete_binding(claims: &Api<PersistentVolumeClaim>, claim: &str, volume: &str) {
    let patch = json!({
        "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                     "pv.kubernetes.io/bound-by-controller": "yes"}},
        "spec": {"volumeName": volume}
    });
    claims
        .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pv_decides_the_node_and_a_missing_node_reads_as_upstream() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    three_nodes(&client).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let bound = json!({"pv.kubernetes.io/bind-completed": "yes"});
    for (pv, host, pvc) in [
        ("pv-a", "host2", "data-a"),
        ("pv-gone", "host9", "data-gone"),
    ] {
        pvs.create(
            &pp,
            &local_pv(
                pv,
                "manual",
                host,
                json!({"namespace": "default", "name": pvc}),
            ),
        )
        .await
        .unwrap();
        claims
            .create(&pp, &claim(pvc, "manual", Some(pv), bound.clone()))
            .await
            .unwrap();
    }
    let _scheduler = kiln_scheduler::start(options(&c)).await.unwrap();

    pods.create(&pp, &pod_with_claim("pinned", "data-a"))
        .await
        .unwrap();
    assert_eq!(node_of(&pods, "pinned").await, "host2");

    pods.create(&pp, &pod_with_claim("stranded", "data-gone"))
        .await
        .unwrap();
    let want = "0/3 nodes are available: 3 node(s) had volume node affinity conflict. \
                preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";
    eventually("the FailedScheduling event", || async {
        failed_scheduling(&client, "stranded")
            .await
            .filter(|m| m == want)
    })
    .await;

    pods.create(&pp, &pod_with_claim("no-claim", "nope"))
        .await
        .unwrap();
    let want = "0/3 nodes are available: persistentvolumeclaim \"nope\" not found. \
                preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";
    eventually("the missing claim's event", || async {
        failed_scheduling(&client, "no-claim")
            .await
            .filter(|m| m == want)
    })
    .await;
    // The claim appears (bound to the pinned PV's twin on host3): the pod is retried and placed.
    pvs.create(
        &pp,
        &local_pv(
            "pv-c",
            "manual",
            "host3",
            json!({"namespace": "default", "name": "nope"}),
        ),
    )
    .await
    .unwrap();
    claims
        .create(&pp, &claim("nope", "manual", Some("pv-c"), bound.clone()))
        .await
        .unwrap();
    assert_eq!(node_of(&pods, "no-claim").await, "host3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_claims_get_a_node_before_the_pod_is_bound() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    three_nodes(&client).await;
    let classes: Api<StorageClass> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    classes
        .create(
            &pp,
            &class("local-path", "WaitForFirstConsumer", "kiln.io/local-path"),
        )
        .await
        .unwrap();
    classes
        .create(
            &pp,
            &class(
                "manual",
                "WaitForFirstConsumer",
                "kubernetes.io/no-provisioner",
            ),
        )
        .await
        .unwrap();
    classes
        .create(&pp, &class("fast", "Immediate", "example.com/fast"))
        .await
        .unwrap();
    let _scheduler = kiln_scheduler::start(options(&c)).await.unwrap();

    // Dynamic provisioning: the scheduler picks a node and says so on the claim.
    claims
        .create(&pp, &claim("scratch", "local-path", None, json!({})))
        .await
        .unwrap();
    pods.create(&pp, &pod_with_claim("provisioned", "scratch"))
        .await
        .unwrap();
    let _first_choice = eventually("selected-node on the claim", || async {
        claims
            .get("scratch")
            .await
            .ok()?
            .metadata
            .annotations?
            .get("volume.kubernetes.io/selected-node")
            .cloned()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        pods.get("provisioned")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name,
        None,
        "the pod waits for its claim to be bound"
    );
    // The provisioner gives up (it takes the node away, keeping its own annotation): the binding
    // fails, the pod is unreserved and tried again, and the claim gets a node again.
    let mut failed = claims.get("scratch").await.unwrap();
    let annotations = failed
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.remove("volume.kubernetes.io/selected-node");
    annotations.insert(
        "volume.kubernetes.io/storage-provisioner".into(),
        "kiln.io/local-path".into(),
    );
    claims.replace("scratch", &pp, &failed).await.unwrap();
    let want = "running PreBind plugin \"VolumeBinding\": binding volumes: provisioning failed for PVC \"scratch\"";
    eventually("the PreBind failure event", || async {
        failed_scheduling(&client, "provisioned")
            .await
            .filter(|m| m == want)
    })
    .await;
    // ...and the pod says so: PodScheduled=False/SchedulerError with the same message.
    eventually("PodScheduled=False/SchedulerError", || async {
        let pod = pods.get("provisioned").await.ok()?;
        pod.status?.conditions?.into_iter().find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("SchedulerError")
                && c.message.as_deref() == Some(want)
        })
    })
    .await;
    let selected = eventually("selected-node set again", || async {
        claims
            .get("scratch")
            .await
            .ok()?
            .metadata
            .annotations?
            .get("volume.kubernetes.io/selected-node")
            .cloned()
    })
    .await;
    // The provisioner's PV on that node, and the PV controller's binding.
    let uid = claims.get("scratch").await.unwrap().metadata.uid.unwrap();
    pvs.create(
        &pp,
        &local_pv(
            "pvc-scratch",
            "local-path",
            &selected,
            json!({"namespace": "default", "name": "scratch", "uid": uid}),
        ),
    )
    .await
    .unwrap();
    complete_binding(&claims, "scratch", "pvc-scratch").await;
    assert_eq!(node_of(&pods, "provisioned").await, selected);

    // A static PV of a WaitForFirstConsumer class: the scheduler writes its claimRef.
    pvs.create(&pp, &local_pv("static", "manual", "host1", Value::Null))
        .await
        .unwrap();
    pvs.patch_status(
        "static",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Available"}})),
    )
    .await
    .unwrap();
    claims
        .create(&pp, &claim("db", "manual", None, json!({})))
        .await
        .unwrap();
    pods.create(&pp, &pod_with_claim("static-user", "db"))
        .await
        .unwrap();
    let claim_ref = eventually("claimRef on the static PV", || async {
        pvs.get("static").await.ok()?.spec?.claim_ref
    })
    .await;
    assert_eq!(claim_ref.name.as_deref(), Some("db"));
    assert!(claim_ref.uid.is_some_and(|u| !u.is_empty()));
    complete_binding(&claims, "db", "static").await;
    assert_eq!(node_of(&pods, "static-user").await, "host1");

    // An Immediate class's unbound claim: nothing to do but wait for the PV controller.
    claims
        .create(&pp, &claim("later", "fast", None, json!({})))
        .await
        .unwrap();
    pods.create(&pp, &pod_with_claim("waiting", "later"))
        .await
        .unwrap();
    let want = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. \
                preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";
    eventually("the unbound immediate event", || async {
        failed_scheduling(&client, "waiting")
            .await
            .filter(|m| m == want)
    })
    .await;
}
