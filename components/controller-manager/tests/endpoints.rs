//! The endpoint and endpointslice controllers against an in-process kiln-apiserver: ready and
//! not-ready pod IPs, named target ports, selector-less services left alone, cleanup with the
//! service. Pod IPs and readiness are written through pods/status, as a kubelet would.

use clap::Parser;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

async fn running_pod(pods: &Api<Pod>, name: &str, ip: &str, ready: bool) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "registry.local/app:1",
            "ports": [{"name": "http", "containerPort": 8080}]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn ips(ep: &Endpoints, ready: bool) -> Vec<String> {
    ep.subsets
        .iter()
        .flatten()
        .flat_map(|s| {
            if ready {
                s.addresses.clone()
            } else {
                s.not_ready_addresses.clone()
            }
        })
        .flatten()
        .map(|a| a.ip)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_and_slices_follow_pods_and_services() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let c = Cluster::start().await;
    let client = c.admin().await;
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=endpoint,endpointslice".into(),
    ]))
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");

    running_pod(&pods, "web-1", "10.244.0.11", true).await;
    running_pod(&pods, "web-2", "10.244.0.12", false).await;
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let manual: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "manual"},
        "spec": {"ports": [{"port": 80}]}
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &manual)
        .await
        .unwrap();

    let ep = eventually("endpoints with ready and not-ready pods", || async {
        let ep = endpoints.get_opt("web").await.ok()??;
        (ips(&ep, true) == ["10.244.0.11"] && ips(&ep, false) == ["10.244.0.12"]).then_some(ep)
    })
    .await;
    let subset = &ep.subsets.as_ref().unwrap()[0];
    let port = &subset.ports.as_ref().unwrap()[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("http"), 8080));
    let addr = &subset.addresses.as_ref().unwrap()[0];
    assert_eq!(addr.node_name.as_deref(), Some("n1"));
    assert_eq!(
        addr.target_ref.as_ref().unwrap().name.as_deref(),
        Some("web-1")
    );

    let slice = eventually("an endpointslice", || async {
        let list = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .ok()?;
        let s = list.items.into_iter().next()?;
        (s.endpoints.len() == 2).then_some(s)
    })
    .await;
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.ports.as_ref().unwrap()[0].port, Some(8080));
    let ready: Vec<_> = slice
        .endpoints
        .iter()
        .map(|e| (e.addresses[0].clone(), e.conditions.clone().unwrap().ready))
        .collect();
    assert_eq!(
        ready,
        [
            ("10.244.0.11".to_string(), Some(true)),
            ("10.244.0.12".to_string(), Some(false))
        ]
    );

    // The not-ready pod becomes ready: it moves to addresses.
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("web-2", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually("both ready", || async {
        let ep = endpoints.get_opt("web").await.ok()??;
        (ips(&ep, true) == ["10.244.0.11", "10.244.0.12"] && ips(&ep, false).is_empty())
            .then_some(())
    })
    .await;
    // A pod whose labels no longer match leaves.
    let relabel = json!({"metadata": {"labels": {"app": "other"}}});
    pods.patch("web-1", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    eventually("relabelled pod removed", || async {
        let ep = endpoints.get_opt("web").await.ok()??;
        (ips(&ep, true) == ["10.244.0.12"]).then_some(())
    })
    .await;

    // kubectl sees them like upstream's.
    let out = c.kubectl_ok(&["get", "endpoints", "web"]).await;
    assert!(out.contains("10.244.0.12:8080"), "{out}");

    // The service without a selector has no controller-made Endpoints.
    assert!(endpoints.get_opt("manual").await.unwrap().is_none());

    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("endpoints and slices removed with the service", || async {
        let gone = endpoints.get_opt("web").await.ok()?.is_none();
        let left = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .ok()?
            .items
            .len();
        (gone && left == 0).then_some(())
    })
    .await;
}

/// kube-dns's Service carries `trafficDistribution: PreferSameNode`: the apiserver stores it, the
/// controller writes node (and zone) hints that the apiserver stores too, and takes them away again
/// when the field goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_same_node_hints_round_trip_through_the_apiserver() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let c = Cluster::start().await;
    let client = c.admin().await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "zone-a"}}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=endpointslice".into(),
    ]))
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    running_pod(&pods, "web-1", "10.244.0.11", true).await;
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "trafficDistribution": "PreferSameNode",
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .unwrap();
    let created = services.create(&PostParams::default(), &svc).await.unwrap();
    assert_eq!(
        created.spec.unwrap().traffic_distribution.as_deref(),
        Some("PreferSameNode")
    );
    let hints = |s: &EndpointSlice| {
        s.endpoints
            .first()
            .map(|e| serde_json::to_value(&e.hints).unwrap())
    };
    let list = ListParams::default().labels("kubernetes.io/service-name=web");
    eventually("node and zone hints stored", || async {
        let s = slices.list(&list).await.ok()?.items.into_iter().next()?;
        (hints(&s)? == json!({"forNodes": [{"name": "n1"}], "forZones": [{"name": "zone-a"}]}))
            .then_some(())
    })
    .await;
    let unset = json!({"spec": {"trafficDistribution": null}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&unset))
        .await
        .unwrap();
    eventually("hints removed", || async {
        let s = slices.list(&list).await.ok()?.items.into_iter().next()?;
        (hints(&s)? == serde_json::Value::Null).then_some(())
    })
    .await;
}
