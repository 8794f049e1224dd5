//! pods/proxy, services/proxy and nodes/proxy end to end: kube-rs → kiln-apiserver → a test
//! backend (plain HTTP and HTTPS on 127.0.0.1) that echoes what reached it. A service reaches its
//! backend through hand-written Endpoints whose address is the pod's; a pod or node on loopback
//! is refused, as upstream refuses it.

use std::sync::Arc;

use axum::http::{HeaderMap, Method, Uri};
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kiln_testkit::Cluster;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a request looked like when it reached the backend.
async fn echo(method: Method, uri: Uri, headers: HeaderMap, body: String) -> impl IntoResponse {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    (
        [
            ("content-type", "application/json"),
            ("access-control-allow-origin", "*"),
            ("x-backend", "yes"),
        ],
        json!({
            "method": method.as_str(),
            "uri": uri.to_string(),
            "body": body,
            "authorization": header("authorization"),
            "forwardedUri": header("x-forwarded-uri"),
        })
        .to_string(),
    )
}

fn backend_app() -> axum::Router {
    axum::Router::new()
        .route(
            "/page/",
            get(|| async {
                (
                    [("content-type", "text/html; charset=utf-8")],
                    r#"<a href="/rewriteme">test</a> <a href="other">x</a>"#,
                )
            }),
        )
        .route(
            "/moved",
            get(|| async { (axum::http::StatusCode::FOUND, [("location", "/elsewhere")]) }),
        )
        .route("/ws", get(upgrade_to_upper_echo))
        .fallback(echo)
}

/// Switches protocols and echoes what it reads, upper-cased.
async fn upgrade_to_upper_echo(mut req: axum::extract::Request) -> axum::response::Response {
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(io) = upgrade.await else { return };
        let mut io = TokioIo::new(io);
        let mut buf = [0u8; 64];
        while let Ok(n) = io.read(&mut buf).await {
            if n == 0 || io.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                break;
            }
        }
    });
    axum::response::Response::builder()
        .status(101)
        .header("connection", "Upgrade")
        .header("upgrade", "upper-echo")
        .body(axum::body::Body::empty())
        .unwrap()
}

/// Raw HTTPS to the API server with a client certificate: kube-rs's client retries 503s
/// (with backoff), and these tests look at the 503s themselves.
struct Caller {
    addr: std::net::SocketAddr,
    tls: tokio_rustls::TlsConnector,
}

fn pem_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

impl Caller {
    fn new(c: &Cluster, user: &str, groups: &[&str]) -> Caller {
        let pair = c.pki.client(user, groups);
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem_certs(&c.pki.ca.cert) {
            roots.add(cert).unwrap();
        }
        let key = rustls_pemfile::private_key(&mut pair.key.as_bytes())
            .unwrap()
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(pem_certs(&pair.cert), key)
        .unwrap();
        Caller {
            addr: c.server.local_addr(),
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }

    /// An upgrade through the API server: the status, then (on 101) "hello" sent and 5 bytes read.
    async fn upgrade(&self, path: &str) -> (u16, String) {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let tls = self
            .tls
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn.with_upgrades());
        let req = http::Request::get(path)
            .header("host", "localhost")
            .header("connection", "Upgrade")
            .header("upgrade", "upper-echo")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let code = resp.status().as_u16();
        if code != 101 {
            return (code, String::new());
        }
        let mut io = TokioIo::new(hyper::upgrade::on(resp).await.unwrap());
        io.write_all(b"hello").await.unwrap();
        let mut echo = [0u8; 5];
        tokio::time::timeout(kiln_testkit::WAIT, io.read_exact(&mut echo))
            .await
            .unwrap()
            .unwrap();
        (code, String::from_utf8_lossy(&echo).into_owned())
    }

    async fn send(&self, method: Method, path: &str, body: &str) -> (u16, HeaderMap, String) {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let tls = self
            .tls
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn.with_upgrades());
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("localhost:{}", self.addr.port()))
            .header("authorization", "Bearer not-for-the-backend")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (code, headers, String::from_utf8_lossy(&bytes).into_owned())
    }
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_reach_pods_services_and_nodes() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let admin = Caller::new(&c, "kubernetes-admin", &["system:masters"]);
    let plain = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, backend_app()).await });
        addr
    };
    let serving = c.pki.serving();
    let tls = kiln_testkit::serve_https(backend_app(), &serving.cert, &serving.key).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "backend"},
        "spec": {"containers": [{"name": "c", "image": "registry.local/c:1",
                                 "ports": [{"containerPort": plain.port()}]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        "backend",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}})),
    )
    .await
    .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let eps: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "subsets": [{
            "addresses": [{"ip": "127.0.0.1",
                           "targetRef": {"kind": "Pod", "namespace": "default", "name": "backend"}}],
            "ports": [{"name": "http", "port": plain.port()}, {"name": "https", "port": tls.port()}]
        }]
    }))
    .unwrap();
    endpoints
        .create(&PostParams::default(), &eps)
        .await
        .unwrap();

    let base = "/api/v1/namespaces/default/services";
    // Path, query, method and body reach the backend; credentials and CORS headers do not pass.
    let (code, headers, text) = admin
        .send(
            Method::GET,
            &format!("{base}/web:http/proxy/some/path?x=1&y=two"),
            "",
        )
        .await;
    assert_eq!(code, 200, "{text}");
    let seen = json_of(&text);
    assert_eq!(seen["uri"], "/some/path?x=1&y=two");
    assert_eq!(seen["authorization"], Value::Null);
    assert_eq!(
        seen["forwardedUri"],
        format!("{base}/web:http/proxy/some/path")
    );
    assert_eq!(headers["x-backend"], "yes");
    assert!(!headers.contains_key("access-control-allow-origin"));
    for method in [
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
    ] {
        let (code, _, text) = admin
            .send(method.clone(), &format!("{base}/web:80/proxy/m/"), "hi")
            .await;
        assert_eq!(code, 200, "{method}: {text}");
        let seen = json_of(&text);
        assert_eq!(seen["method"], method.as_str());
        assert_eq!(seen["uri"], "/m/");
        assert_eq!(seen["body"], "hi");
    }
    // https: scheme, the backend's certificate not verified.
    let (code, _, text) = admin
        .send(Method::GET, &format!("{base}/https:web:443/proxy/tls"), "")
        .await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(json_of(&text)["uri"], "/tls");

    // An upgrade is spliced through.
    assert_eq!(
        admin.upgrade(&format!("{base}/web:http/proxy/ws")).await,
        (101, "HELLO".to_string())
    );

    // Links come back through the proxy.
    let (code, _, text) = admin
        .send(Method::GET, &format!("{base}/web:http/proxy/page/"), "")
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        text,
        format!(r#"<a href="{base}/web:http/proxy/rewriteme">test</a> <a href="other">x</a>"#)
    );
    let (code, headers, _) = admin
        .send(Method::GET, &format!("{base}/web:http/proxy/moved"), "")
        .await;
    assert_eq!(code, 302);
    assert_eq!(
        headers["location"],
        format!("{base}/web:http/proxy/elsewhere").as_str()
    );
    // `…/proxy` without a path: GET is sent to `…/proxy/` first.
    let (code, headers, _) = admin
        .send(Method::GET, &format!("{base}/web:http/proxy?a=b"), "")
        .await;
    assert_eq!(code, 301);
    assert_eq!(
        headers["location"],
        format!("{base}/web:http/proxy/?a=b").as_str()
    );

    // Ports that lead nowhere.
    let (code, _, text) = admin
        .send(Method::GET, &format!("{base}/web/proxy/"), "")
        .await;
    assert_eq!(
        (code, json_of(&text)["message"].clone()),
        (503, json!("no endpoints available for service \"web\""))
    );
    let (code, _, text) = admin
        .send(Method::GET, &format!("{base}/web:81/proxy/"), "")
        .await;
    assert_eq!(
        (code, json_of(&text)["message"].clone()),
        (503, json!("no service port 81 found for service \"web\""))
    );
    let (code, _, _) = admin
        .send(Method::GET, &format!("{base}/nope/proxy/"), "")
        .await;
    assert_eq!(code, 404);

    // Pods and nodes on loopback are not proxied to.
    let (code, _, text) = admin
        .send(
            Method::GET,
            "/api/v1/namespaces/default/pods/backend/proxy/",
            "",
        )
        .await;
    assert_eq!(
        (code, json_of(&text)["message"].clone()),
        (400, json!("address not allowed"))
    );
    let (code, _, text) = admin
        .send(
            Method::GET,
            "/api/v1/namespaces/default/pods/ftp:backend:21/proxy/",
            "",
        )
        .await;
    assert_eq!(
        (code, json_of(&text)["message"].clone()),
        (400, json!("invalid pod request \"ftp:backend:21\""))
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}),
            ),
        )
        .await
        .unwrap();
    let (code, _, _) = admin
        .send(Method::GET, "/api/v1/nodes/n1/proxy/healthz", "")
        .await;
    assert_eq!(code, 400);

    // Discovery lists the subresources.
    let (_, _, text) = admin.send(Method::GET, "/api/v1", "").await;
    let resources = json_of(&text)["resources"].clone();
    for (name, kind) in [
        ("pods/proxy", "PodProxyOptions"),
        ("services/proxy", "ServiceProxyOptions"),
        ("nodes/proxy", "NodeProxyOptions"),
    ] {
        let entry = resources
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in discovery"));
        assert_eq!(entry["kind"], kind);
        assert_eq!(
            entry["verbs"],
            json!(["create", "delete", "get", "patch", "update"])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_verbs_are_authorized_per_method() {
    let c = Cluster::start().await;
    c.kubectl_ok(&[
        "create",
        "role",
        "svc-get",
        "--verb=get",
        "--resource=services",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "bob-svc",
        "--role=svc-get",
        "--user=bob",
    ])
    .await;
    let bob = Caller::new(&c, "bob", &[]);
    let path = "/api/v1/namespaces/default/services/web/proxy/";
    let (code, _, text) = bob.send(Method::GET, path, "").await;
    assert_eq!(code, 403, "{text}");
    assert!(json_of(&text)["message"]
        .as_str()
        .unwrap()
        .contains("cannot get resource \"services/proxy\""));
    c.kubectl_ok(&[
        "create",
        "role",
        "proxy-get",
        "--verb=get",
        "--resource=services/proxy",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "bob-proxy",
        "--role=proxy-get",
        "--user=bob",
    ])
    .await;
    // Allowed now: the service does not exist, so the answer is the API server's 404.
    let (code, _, text) = bob.send(Method::GET, path, "").await;
    assert_eq!(code, 404, "{text}");
    let (code, _, text) = bob.send(Method::POST, path, "").await;
    assert_eq!(code, 403, "{text}");
    assert!(json_of(&text)["message"]
        .as_str()
        .unwrap()
        .contains("cannot create resource \"services/proxy\""));
}
