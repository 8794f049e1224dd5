//! The proxy's runtime against the real kiln-apiserver on a real etcd (/usr/bin/etcd), all on 127.0.0.1:
//! Node watch → host-gw routes (added, re-pointed, removed), /healthz and /metrics, clean shutdown that
//! leaves routes in place. The kernel side is the recording doubles: no root, no host changes.
//! Services and EndpointSlices are exercised as soon as the API server serves them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kiln_pki::{
    ensure_kubeconfig, ensure_tree, load_ca, spec, KubeconfigKind, TreeParams, Validity,
};
use kiln_proxy::config::EndpointsApi;
use kiln_proxy::conntrack::RecordingConntrack;
use kiln_proxy::netfilter::RecordingNetfilter;
use kiln_proxy::routes::{RecordingRoutes, Route};
use kiln_proxy::ProxyConfig;
use kiln_testkit::{client_from_kubeconfig, eventually, free_port, Etcd};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .ok()?
        .ok()?;
    Some(out)
}

async fn create_node(nodes: &Api<Node>, name: &str, cidr: &str, ip: &str) {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    set_ip(nodes, name, ip).await;
}

async fn set_ip(nodes: &Api<Node>, name: &str, ip: &str) {
    let status =
        serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn route(dst: &str, via: &str) -> Route {
    Route {
        dst: dst.parse().unwrap(),
        via: via.parse().unwrap(),
    }
}

#[tokio::test]
async fn node_watch_drives_host_gw_routes_and_health() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let mut params = TreeParams::new("node-a");
    params.host_addresses = vec!["127.0.0.1".into()];
    ensure_tree(&pki, &params).unwrap();
    let ca = load_ca(&pki, spec("ca").unwrap()).unwrap();
    let port = free_port();
    let server = format!("https://127.0.0.1:{port}");
    let etc = dir.path().join("etc");
    ensure_kubeconfig(
        &etc,
        &ca,
        &KubeconfigKind::Admin,
        "kiln",
        &server,
        &Validity::default(),
    )
    .unwrap();

    let etcd = Etcd::start().await;
    let p = |f: &str| pki.join(f).display().to_string();
    let options = kiln_apiserver::Options::parse_from([
        "kiln-apiserver".to_string(),
        format!("--etcd-servers={}", etcd.endpoint),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
    ]);
    let apiserver = kiln_apiserver::start(options)
        .await
        .expect("apiserver starts");
    let admin = client_from_kubeconfig(&etc.join("admin.conf")).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    create_node(&nodes, "node-a", "10.244.1.0/24", "10.250.0.11").await;
    create_node(&nodes, "node-b", "10.244.2.0/24", "10.250.0.12").await;

    let proc_sys = dir.path().join("sys");
    std::fs::create_dir_all(proc_sys.join("net/ipv4")).unwrap();
    std::fs::write(proc_sys.join("net/ipv4/ip_forward"), "0\n").unwrap();
    let healthz: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = ProxyConfig {
        kubeconfig: etc.join("admin.conf"),
        node_name: "node-a".into(),
        cluster_cidr: "10.244.0.0/16".parse().unwrap(),
        node_ip: None,
        healthz_bind_address: healthz,
        metrics_bind_address: metrics,
        sync_period: Duration::from_secs(2),
        min_sync_period: Duration::from_millis(50),
        endpoints_api: EndpointsApi::Endpointslices,
        proc_sys: proc_sys.clone(),
    };
    let nft = Arc::new(RecordingNetfilter::default());
    let routes = Arc::new(RecordingRoutes::default());
    // a stale kiln route for a node that no longer exists
    routes
        .table
        .lock()
        .unwrap()
        .insert(route("10.244.9.0/24", "10.250.0.19"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let proxy = tokio::spawn(kiln_proxy::run_with(
        cfg,
        nft.clone(),
        Arc::new(RecordingConntrack::default()),
        routes.clone(),
        async {
            let _ = stopped.await;
        },
    ));

    // routes: only node-b (not this node), the stale one removed
    let only_b = [route("10.244.2.0/24", "10.250.0.12")]
        .into_iter()
        .collect();
    eventually("route to node-b", || async {
        (*routes.table.lock().unwrap() == only_b).then_some(())
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(proc_sys.join("net/ipv4/ip_forward")).unwrap(),
        "1\n"
    );

    // a third node joins; node-b moves to a new address
    create_node(&nodes, "node-c", "10.244.3.0/24", "10.250.0.13").await;
    set_ip(&nodes, "node-b", "10.250.0.22").await;
    let want = [
        route("10.244.2.0/24", "10.250.0.22"),
        route("10.244.3.0/24", "10.250.0.13"),
    ]
    .into_iter()
    .collect();
    eventually("route to node-c and node-b re-pointed", || async {
        (*routes.table.lock().unwrap() == want).then_some(())
    })
    .await;
    // node-c leaves
    nodes
        .delete("node-c", &DeleteParams::default())
        .await
        .unwrap();
    let want_b = [route("10.244.2.0/24", "10.250.0.22")]
        .into_iter()
        .collect();
    eventually("route to node-c removed", || async {
        (*routes.table.lock().unwrap() == want_b).then_some(())
    })
    .await;

    // health and metrics, on both addresses
    let health = eventually("healthz 200", || async {
        http_get(healthz, "/healthz")
            .await
            .filter(|r| r.starts_with("HTTP/1.0 200"))
    })
    .await;
    assert!(health.contains("\"lastUpdated\":\"20"), "{health}");
    let m = http_get(metrics, "/metrics").await.expect("metrics answer");
    assert!(m.contains("kiln_proxy_sync_total "), "{m}");
    assert!(m.contains("kiln_proxy_routes 1"), "{m}");

    // Services, once the API server serves them: ClusterIP + EndpointSlice → DNAT in the applied table.
    let services: Api<Service> = Api::namespaced(admin.clone(), "default");
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    match services.create(&PostParams::default(), &svc).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            eprintln!("the API server does not serve Services yet: rules part not exercised");
            assert!(
                nft.applied().is_empty(),
                "no rules before the Services were listed"
            );
        }
        Err(e) => panic!("create service: {e}"),
        Ok(created) => {
            let ip = created.spec.unwrap().cluster_ip.unwrap();
            let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), "default");
            let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web-1", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.244.2.7"], "conditions": {"ready": true}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }))
            .unwrap();
            slices.create(&PostParams::default(), &slice).await.unwrap();
            eventually("DNAT for the service", || async {
                let last = nft.applied().last().cloned()?;
                (last.contains(&format!("{ip} . tcp . 80 : goto svc-default/web/tcp/80"))
                    && last.contains("map { 0 : 10.244.2.7 . 8080 }"))
                .then_some(())
            })
            .await;

            // an endpoint moves: once /metrics says the rules hold the slice's new resourceVersion, the
            // table holds the change, applied as an update (the first rules sync was the only replace)
            let mut moved = slices.get("web-1").await.unwrap();
            moved.endpoints[0].addresses = vec!["10.244.2.8".into()];
            let moved = slices
                .replace("web-1", &PostParams::default(), &moved)
                .await
                .unwrap();
            let rv: u64 = moved.metadata.resource_version.unwrap().parse().unwrap();
            let m = eventually("rules synced to the slice's new resourceVersion", || async {
                let m = http_get(metrics, "/metrics").await?;
                let synced: u64 = m
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix(
                            "kiln_proxy_rules_synced_resource_version{resource=\"endpointslices\"} ",
                        )
                    })?
                    .parse()
                    .ok()?;
                (synced >= rv).then_some(m)
            })
            .await;
            let applied = nft.applied();
            let last = applied.last().unwrap();
            assert!(
                last.contains("add rule ip kiln svc-default/web/tcp/80 meta l4proto tcp dnat to numgen random mod 1 map { 0 : 10.244.2.8 . 8080 }")
                    && !last.contains("delete table"),
                "{last}"
            );
            assert!(
                m.contains("\nkiln_proxy_sync_full_applies_total 1\n"),
                "{m}"
            );
        }
    }

    // SIGTERM-like shutdown: the loop ends cleanly and leaves the routes (and rules) in place
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), proxy)
        .await
        .expect("proxy stops")
        .unwrap()
        .expect("clean exit");
    assert_eq!(*routes.table.lock().unwrap(), want_b);

    apiserver.shutdown().await;
    drop(etcd);
}
