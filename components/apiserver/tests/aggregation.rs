//! The aggregation layer end to end: kiln-apiserver on a real store, with a front-proxy CA and
//! client pair, and an extension API server of the test's own on 127.0.0.1 that only lets the
//! front-proxy certificate in and echoes the X-Remote-* identity it receives. An APIService with a
//! Service + EndpointSlice pointing at it becomes Available; kubectl reaches it through kiln with
//! the right identity; its resources show in `kubectl api-resources`; RBAC stays kiln's; stopping
//! it turns the APIService Available=False and requests into 503s.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query, Request};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Json, Router};
use base64::Engine;
use futures::StreamExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::core::v1::ConfigMap;
use kiln_testkit::{eventually, rows, Cluster, Pki};
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

const GROUP_VERSION: &str = "metrics.example.com/v1beta1";
const APISERVICE: &str = "v1beta1.metrics.example.com";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A CA of the extension server's own and a serving certificate for `<svc>.<ns>.svc`.
fn service_certificate(dns: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![dns.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// The common name of the client certificate that opened the connection.
#[derive(Clone)]
struct PeerName(String);

/// Who the extension server saw, request by request.
type Seen = Arc<Mutex<Vec<String>>>;

fn remote_identity(headers: &http::HeaderMap) -> (String, Vec<String>) {
    let user = headers
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let groups = headers
        .get_all("x-remote-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    (user, groups)
}

async fn resource_list() -> Json<Value> {
    Json(json!({
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
    "resources": [
        {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
        {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list", "watch"]},
    ]}))
}

/// Lists echo the identity; watches send one event and then stay open, so a client that sees
/// the event proves the body is streamed, not buffered.
async fn pods(
    Extension(peer): Extension<PeerName>,
    Extension(seen): Extension<Seen>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    req: Request,
) -> axum::response::Response {
    let (user, groups) = remote_identity(req.headers());
    seen.lock().unwrap().push(user.clone());
    if query.get("watch").map(String::as_str) == Some("true") {
        let event = json!({"type": "ADDED", "object": {"apiVersion": GROUP_VERSION,
            "kind": "PodMetrics", "metadata": {"name": "p1", "namespace": "default"}}});
        let first = bytes::Bytes::from(format!("{event}\n"));
        let stream = futures::stream::once(async move { Ok::<_, Infallible>(first) })
            .chain(futures::stream::pending());
        return axum::response::Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    let extra: Vec<String> = req
        .headers()
        .keys()
        .filter(|k| k.as_str().starts_with("x-remote-extra-"))
        .map(|k| k.to_string())
        .collect();
    Json(json!({
        "kind": "PodMetricsList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": [],
        "user": user, "groups": groups, "client": peer.0, "extra": extra,
        "authorization": req.headers().contains_key("authorization"),
    }))
    .into_response()
}

/// The extension API server: TLS with the service certificate, requiring a client certificate
/// from the front-proxy CA. Aborting the handle stops it and every connection it holds.
async fn extension_server(
    cert: &str,
    key: &str,
    front_proxy_ca: &str,
    seen: Seen,
) -> (u16, JoinHandle<()>) {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(front_proxy_ca) {
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let key = rustls_pemfile::private_key(&mut key.as_bytes())
        .unwrap()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(cert), key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let app = Router::new()
        .route("/apis/metrics.example.com/v1beta1", get(resource_list))
        .route(
            "/apis/metrics.example.com/v1beta1/namespaces/{ns}/pods",
            get(pods),
        )
        .layer(Extension(seen));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            connections.spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let peer = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|der| {
                        use x509_parser::prelude::FromDer;
                        let (_, cert) =
                            x509_parser::certificate::X509Certificate::from_der(der).ok()?;
                        let cn = cert
                            .subject()
                            .iter_common_name()
                            .next()?
                            .as_str()
                            .ok()?
                            .to_string();
                        Some(cn)
                    })
                    .unwrap_or_default();
                let service = TowerToHyperService::new(app.layer(Extension(PeerName(peer))));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, task)
}

fn write(dir: &std::path::Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

fn available(obj: &DynamicObject) -> Option<(String, String, String)> {
    let c = obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str().unwrap_or("").to_string(),
        c["message"].as_str().unwrap_or("").to_string(),
    ))
}

fn apiservices(client: &kube::Client) -> Api<DynamicObject> {
    let resource = kube::discovery::ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    };
    Api::all_with(client.clone(), &resource)
}

async fn wait_available(
    api: &Api<DynamicObject>,
    name: &str,
    status: &str,
) -> (String, String, String) {
    eventually(&format!("APIService {name} Available={status}"), || {
        let api = api.clone();
        let name = name.to_string();
        let status = status.to_string();
        async move {
            let obj = api.get(&name).await.ok()?;
            available(&obj).filter(|(s, _, _)| *s == status)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_api_server_is_reached_through_kiln() {
    let front_proxy = Pki::new();
    let c = Cluster::start_with_pki_flags(|_, dir| {
        let pair = front_proxy.client("front-proxy-client", &[]);
        vec![
            format!(
                "--proxy-client-cert-file={}",
                write(dir, "front-proxy-client.crt", &pair.cert)
            ),
            format!(
                "--proxy-client-key-file={}",
                write(dir, "front-proxy-client.key", &pair.key)
            ),
            format!(
                "--requestheader-client-ca-file={}",
                write(dir, "front-proxy-ca.crt", &front_proxy.ca.cert)
            ),
            "--requestheader-allowed-names=front-proxy-client".into(),
        ]
    })
    .await;
    let client = c.admin().await;
    let pp = PostParams::default();

    // Extension servers find their trust anchors where upstream publishes them.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let auth = cms.get("extension-apiserver-authentication").await.unwrap();
    let data = auth.data.unwrap();
    assert_eq!(data["client-ca-file"], c.pki.ca.cert);
    assert_eq!(data["requestheader-client-ca-file"], front_proxy.ca.cert);
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );

    // Built-in group/versions have Local APIServices.
    let api = apiservices(&client);
    let (_, reason, message) = wait_available(&api, "v1.apps", "True").await;
    assert_eq!(
        (reason.as_str(), message.as_str()),
        ("Local", "Local APIServices are always available")
    );
    wait_available(&api, "v1.", "True").await;

    let seen: Seen = Arc::default();
    let (ca, cert, key) = service_certificate("metrics.kube-system.svc");
    let (port, server) = extension_server(&cert, &key, &front_proxy.ca.cert, seen.clone()).await;

    // An APIService whose Service does not exist yet says so.
    let apiservice: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {"group": "metrics.example.com", "version": "v1beta1",
                 "groupPriorityMinimum": 100, "versionPriority": 100,
                 "service": {"namespace": "kube-system", "name": "metrics"},
                 "caBundle": b64(ca.as_bytes())}}))
    .unwrap();
    let created = api.create(&pp, &apiservice).await.unwrap();
    assert_eq!(created.data["spec"]["service"]["port"], 443, "defaulted");
    let (_, reason, message) = wait_available(&api, APISERVICE, "False").await;
    assert_eq!(reason, "ServiceNotFound");
    assert_eq!(message, "service/metrics in \"kube-system\" is not present");

    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "kube-system");
    services
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "metrics"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 4443}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), "kube-system");
    slices
        .create(
            &pp,
            &serde_json::from_value(json!({
            "metadata": {"name": "metrics-1", "labels": {"kubernetes.io/service-name": "metrics"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let (_, reason, message) = wait_available(&api, APISERVICE, "True").await;
    assert_eq!(
        (reason.as_str(), message.as_str()),
        ("Passed", "all checks passed")
    );
    let table = c.kubectl_ok(&["get", "apiservices", APISERVICE]).await;
    let table = rows(&table);
    assert_eq!(table[0][..3], ["NAME", "SERVICE", "AVAILABLE"]);
    assert_eq!(table[1][..3], [APISERVICE, "kube-system/metrics", "True"]);

    // kubectl reaches the extension server through kiln, as the user kiln authenticated, with
    // the front-proxy certificate.
    let raw = c
        .kubectl_ok(&[
            "get",
            "--raw",
            "/apis/metrics.example.com/v1beta1/namespaces/default/pods",
        ])
        .await;
    let echoed: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(echoed["user"], "kubernetes-admin");
    assert_eq!(
        echoed["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert_eq!(echoed["client"], "front-proxy-client");
    let discovery = c
        .kubectl_ok(&["get", "--raw", "/apis/metrics.example.com/v1beta1"])
        .await;
    assert!(discovery.contains("PodMetrics"), "{discovery}");
    let group = c
        .kubectl_ok(&["get", "--raw", "/apis/metrics.example.com"])
        .await;
    let group: Value = serde_json::from_str(&group).unwrap();
    assert_eq!(group["preferredVersion"]["groupVersion"], GROUP_VERSION);

    // Identity headers a client sends are not believed.
    let spoofed = http::Request::get("/apis/metrics.example.com/v1beta1/namespaces/default/pods")
        .header("X-Remote-User", "system:admin")
        .header("X-Remote-Group", "evil")
        .header("X-Remote-Extra-Scopes", "all")
        .body(Vec::new())
        .unwrap();
    let answer: Value = serde_json::from_str(&client.request_text(spoofed).await.unwrap()).unwrap();
    assert_eq!(answer["user"], "kubernetes-admin");
    assert_eq!(
        answer["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert_eq!(answer["extra"], json!([]));
    assert_eq!(answer["authorization"], false);

    // Watches stream through the proxy.
    let watch =
        http::Request::get("/apis/metrics.example.com/v1beta1/namespaces/default/pods?watch=true")
            .body(Vec::new())
            .unwrap();
    let mut events = client.request_events::<Value>(watch).await.unwrap().boxed();
    let first = tokio::time::timeout(kiln_testkit::WAIT, events.next())
        .await
        .expect("the first event arrives while the watch stays open")
        .unwrap()
        .unwrap();
    match first {
        kube::core::WatchEvent::Added(obj) => assert_eq!(obj["metadata"]["name"], "p1"),
        other => panic!("expected ADDED, got {other:?}"),
    }
    drop(events);

    // kubectl's discovery sees the extension's resources.
    let resources = c
        .kubectl_ok(&["api-resources", "--api-group=metrics.example.com"])
        .await;
    assert!(
        resources.contains("PodMetrics") && resources.contains("NodeMetrics"),
        "{resources}"
    );
    let groups = c.kubectl_ok(&["api-versions"]).await;
    assert!(groups.lines().any(|l| l == GROUP_VERSION), "{groups}");

    // Authorization stays kiln's: a user without RBAC never reaches the extension server.
    let nobody = c.kubeconfig_for("nobody", &[]);
    let (ok, _, err) = c
        .kubectl(
            &nobody,
            &[
                "get",
                "--raw",
                "/apis/metrics.example.com/v1beta1/namespaces/default/pods",
            ],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
    assert!(!seen.lock().unwrap().iter().any(|u| u == "nobody"));

    // The extension server stops: the APIService turns unavailable and requests get 503.
    server.abort();
    let _ = server.await;
    let (_, reason, message) = wait_available(&api, APISERVICE, "False").await;
    assert_eq!(reason, "FailedDiscoveryCheck");
    assert!(
        message.starts_with(&format!("failing or missing response from https://127.0.0.1:{port}/apis/metrics.example.com/v1beta1: ")),
        "{message}"
    );
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "get",
                "--raw",
                "/apis/metrics.example.com/v1beta1/namespaces/default/pods",
            ],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("ServiceUnavailable") || err.contains("unable to handle the request"),
        "{err}"
    );
    let table = rows(&c.kubectl_ok(&["get", "apiservices", APISERVICE]).await);
    assert_eq!(table[1][2], "False");
    assert_eq!(table[1][3], "(FailedDiscoveryCheck)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_apiservices_get_upstreams_field_errors() {
    let c = Cluster::start().await;
    let api = apiservices(&c.admin().await);
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "metrics"},
        "spec": {"group": "metrics.example.com", "version": "v1beta1",
                 "groupPriorityMinimum": 0, "versionPriority": 100,
                 "service": {"namespace": "kube-system", "name": "metrics"},
                 "caBundle": b64(b"ca"), "insecureSkipTLSVerify": true}}))
    .unwrap();
    let err = match api.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected a 422, got {other:?}"),
    };
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.example.com\""),
        "{}",
        err.message
    );
    assert!(
        err.message.contains(
            "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"
        ),
        "{}",
        err.message
    );
    assert!(err.message.contains("spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"), "{}", err.message);
}
