//! The kubelet's event sink against the real kiln-apiserver on a real etcd (/usr/bin/etcd), on 127.0.0.1,
//! with the kubelet's own credentials (system:node:<name>): events are created, a repeat raises `count` on
//! the same object, an event deleted meanwhile is created again, and the API server's field selectors on
//! involvedObject find them.

mod common;

use clap::Parser;
use common::eventually;
use k8s_openapi::api::core::v1::{Event, Pod};
use kiln_kubelet::events::{api_recorder, EventRecorder, EventType, ObjectRef};
use kiln_pki::{
    ensure_kubeconfig, ensure_tree, load_ca, spec, KubeconfigKind, TreeParams, Validity,
};
use kiln_testkit::{client_from_kubeconfig, free_port, Etcd};
use kube::api::{Api, DeleteParams, ListParams};

const NODE: &str = "node-ev";

fn pod_ref() -> ObjectRef {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-web", "resourceVersion": "5"}
    }))
    .unwrap();
    ObjectRef::pod(&p)
}

#[tokio::test]
async fn events_are_created_counted_and_selectable_by_involved_object() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let mut params = TreeParams::new(NODE);
    params.host_addresses = vec!["127.0.0.1".into()];
    ensure_tree(&pki, &params).unwrap();
    let ca = load_ca(&pki, spec("ca").unwrap()).unwrap();
    let port = free_port();
    let server = format!("https://127.0.0.1:{port}");
    let etc = dir.path().join("etc");
    for kind in [
        KubeconfigKind::Admin,
        KubeconfigKind::Kubelet {
            node_name: NODE.into(),
        },
    ] {
        ensure_kubeconfig(&etc, &ca, &kind, "kiln", &server, &Validity::default()).unwrap();
    }
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
    let kubelet = client_from_kubeconfig(&etc.join("kubelet.conf")).await;

    // Recorded before the sink runs: queued, posted once it does.
    let (recorder, sink) = api_recorder(NODE, 100);
    let web = pod_ref();
    let main = web.container("main", false);
    recorder.record(
        &main,
        EventType::Normal,
        "Started",
        "Started container main".into(),
    );
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(sink.run(kubelet, stop_rx));
    for _ in 0..3 {
        recorder.record(
            &main,
            EventType::Warning,
            "Unhealthy",
            "Readiness probe failed: nope".into(),
        );
    }
    recorder.record(&web, EventType::Normal, "SandboxChanged", "changed".into());

    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    let by_pod = ListParams::default().fields(
        "involvedObject.name=web,involvedObject.namespace=default,involvedObject.uid=uid-web,involvedObject.kind=Pod",
    );
    let list = eventually(30, "three event objects", || {
        let events = events.clone();
        let by_pod = by_pod.clone();
        async move {
            let l = events.list(&by_pod).await.ok()?;
            let done = l.items.len() == 3
                && l.items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("SandboxChanged"));
            done.then_some(l.items)
        }
    })
    .await;
    let unhealthy = list
        .iter()
        .find(|e| e.reason.as_deref() == Some("Unhealthy"))
        .unwrap();
    assert_eq!(unhealthy.count, Some(3), "{unhealthy:?}");
    assert_eq!(unhealthy.type_.as_deref(), Some("Warning"));
    assert_eq!(
        unhealthy.involved_object.field_path.as_deref(),
        Some("spec.containers{main}")
    );
    assert_eq!(
        unhealthy.source.as_ref().and_then(|s| s.host.as_deref()),
        Some(NODE)
    );
    assert!(unhealthy.last_timestamp >= unhealthy.first_timestamp);

    // Other selectors the API server offers on events.
    let warnings = events
        .list(&ListParams::default().fields("type=Warning,source=kubelet,reason=Unhealthy"))
        .await
        .unwrap();
    assert_eq!(warnings.items.len(), 1);
    let other = events
        .list(&ListParams::default().fields("involvedObject.name=other"))
        .await
        .unwrap();
    assert!(other.items.is_empty());

    // Deleted meanwhile (as events expire): the next repeat creates it again, with its count.
    let name = unhealthy.metadata.name.clone().unwrap();
    events
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    recorder.record(
        &main,
        EventType::Warning,
        "Unhealthy",
        "Readiness probe failed: nope".into(),
    );
    let again = eventually(30, "the event created again", || {
        let events = events.clone();
        let name = name.clone();
        async move { events.get(&name).await.ok() }
    })
    .await;
    assert_eq!(again.count, Some(4));

    apiserver.shutdown().await;
    drop(etcd);
}
