//! kiln-scheduler's preemption against an in-process kiln-apiserver: a high priority pod that fits
//! nowhere evicts the low priority pod in its way (DisruptionTarget condition, graceful delete,
//! `Preempted` event), is nominated to the node, and is bound there once the victim is gone.

use clap::Parser;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kiln_testkit::{create_node, eventually, Cluster};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

fn pod(name: &str, class: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"priorityClassName": class, "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "c", "image": "registry.local/app:1",
                                 "resources": {"requests": {"cpu": cpu}}}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_pod_preempts_and_takes_the_node() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    create_node(
        &client,
        "cp",
        "8",
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
    )
    .await;
    create_node(&client, "host1", "2", json!([])).await;
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("low", 1), ("high", 1000)] {
        let pc =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value})).unwrap();
        classes.create(&PostParams::default(), &pc).await.unwrap();
    }
    let options = kiln_scheduler::Options::parse_from([
        "kiln-scheduler".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
    ]);
    let _scheduler = kiln_scheduler::start(options).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    pods.create(&PostParams::default(), &pod("victim", "low", "1500m"))
        .await
        .unwrap();
    eventually("victim bound", || async {
        pods.get("victim").await.ok()?.spec?.node_name
    })
    .await;
    let preemptor = pods
        .create(&PostParams::default(), &pod("preemptor", "high", "1"))
        .await
        .unwrap();
    let uid = preemptor.metadata.uid.unwrap();

    // No kubelet finishes the graceful deletion: the victim stays terminating, with the condition.
    let victim = eventually("victim terminating", || async {
        pods.get("victim")
            .await
            .ok()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    let condition = victim
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("the DisruptionTarget condition");
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason.as_deref(), Some("PreemptionByScheduler"));
    assert_eq!(
        condition.message.as_deref(),
        Some("default-scheduler: preempting to accommodate a higher priority pod")
    );
    let nominated = eventually("preemptor nominated", || async {
        pods.get("preemptor")
            .await
            .ok()?
            .status?
            .nominated_node_name
    })
    .await;
    assert_eq!(nominated, "host1");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let preempted = eventually("Preempted event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("Preempted")
                    && e.involved_object.name.as_deref() == Some("victim")
            })
    })
    .await;
    assert_eq!(preempted.type_.as_deref(), Some("Normal"));
    assert_eq!(
        preempted.message,
        Some(format!("Preempted by pod {uid} on node host1"))
    );

    // The victim is gone: the nominated node is the preemptor's.
    pods.delete("victim", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let node = eventually("preemptor bound", || async {
        pods.get("preemptor").await.ok()?.spec?.node_name
    })
    .await;
    assert_eq!(node, "host1");
}
