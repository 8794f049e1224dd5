//! A LIST whose objects add up to more than the etcd client's 4 MiB gRPC message limit still works
//! (the store is read in pages at one revision): 10 ConfigMaps of 600 KiB each, listed unpaged.

use k8s_openapi::api::core::v1::ConfigMap;
use kiln_testkit::Cluster;
use kube::api::{Api, ListParams, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpaged_list_larger_than_a_grpc_message() {
    let c = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin().await, "default");
    let blob = "x".repeat(600 * 1024);
    for i in 0..10 {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("big-{i}")}, "data": {"blob": blob}
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let all = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = all
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .filter(|n| n.starts_with("big-"))
        .collect();
    assert_eq!(names.len(), 10, "{names:?}");
    let rv: i64 = all.metadata.resource_version.unwrap().parse().unwrap();
    let newest = all
        .items
        .iter()
        .filter_map(|c| c.metadata.resource_version.as_ref()?.parse::<i64>().ok())
        .max()
        .unwrap();
    assert!(
        rv >= newest,
        "the list's revision {rv} covers every item ({newest})"
    );
}
