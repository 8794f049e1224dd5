//! `spawn_reflector_with_changes` against an in-process kiln-apiserver: every change it reports is
//! already in its store when it arrives (a reconcile triggered by it never reads an older cache).

use std::collections::HashMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kiln_controller_manager::context::spawn_reflector_with_changes;
use kiln_testkit::Cluster;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"t": "changes"}},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_reported_change_is_already_in_the_store() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("before"))
        .await
        .unwrap();
    let (store, mut changes, _task) = spawn_reflector_with_changes::<Pod>(&client);
    store.wait_until_ready().await.unwrap();

    // The initial list is reported too, after the store holds it.
    let listed = changes.next().await.unwrap();
    assert!(store.get(&ObjectRef::from_obj(&listed)).is_some());

    let names: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
    for name in &names {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    for name in &names {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    // Each pod is reported twice: created, then deleted (unscheduled pods go at once). The store
    // may have moved on by the time a report is read, but it is never behind it.
    let mut seen: HashMap<String, usize> = HashMap::new();
    while seen.values().filter(|n| **n == 2).count() < names.len() {
        let changed = changes.next().await.expect("the change stream ended");
        let name = changed.metadata.name.clone().unwrap_or_default();
        if !names.contains(&name) {
            continue;
        }
        let reports = seen.entry(name.clone()).or_default();
        *reports += 1;
        let cached = store.get(&ObjectRef::from_obj(&changed));
        if *reports == 1 {
            let rv = |p: &Pod| -> i64 {
                p.metadata
                    .resource_version
                    .as_deref()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            assert!(
                cached.is_none_or(|c| rv(&c) >= rv(&changed)),
                "{name}: the store is behind its creation"
            );
        } else {
            assert!(
                cached.is_none(),
                "{name}: the store still holds a deleted pod"
            );
        }
    }
}
