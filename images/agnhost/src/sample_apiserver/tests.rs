//! The server over real HTTPS on 127.0.0.1: the front proxy's certificate makes its identity
//! headers believed and the cluster's SubjectAccessReview decides; without it the same headers
//! are an anonymous request, which is refused.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::kube::recording::Recording;
use super::trust::tests::{client_pki, configmap_data, ClientPki};
use super::*;
use crate::testutil::{test_cert, TestCert};

async fn start(kube: Arc<Recording>, cert: &TestCert) -> (SocketAddr, Arc<State>) {
    let tls = tls::server_config(Path::new(&cert.cert_file), Path::new(&cert.key_file)).unwrap();
    let state = Arc::new(State::new(kube));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, tls, state.clone()));
    (addr, state)
}

/// One request over HTTPS, trusting the server's certificate, presenting `client` if given.
async fn call(
    addr: SocketAddr,
    server: &TestCert,
    client: Option<&ClientPki>,
    req: http::request::Builder,
    body: &str,
) -> (u16, Value) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server.der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some(c) => {
            let chain = rustls_pemfile::certs(&mut c.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = rustls_pemfile::private_key(&mut c.key_pem.as_bytes())
                .unwrap()
                .unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = req
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn as_alice(method: &str, path: &str) -> http::request::Builder {
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("X-Remote-User", "alice")
        .header("X-Remote-Group", "dev")
}

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";

#[tokio::test]
async fn the_front_proxys_user_is_authorized_by_the_cluster() {
    let proxy = client_pki("front-proxy-ca", "front-proxy-client", None);
    let cluster_ca = client_pki("kubernetes", "nobody", None);
    let kube = Arc::new(Recording::default());
    kube.answer(
        AUTH_CONFIGMAP,
        200,
        json!({"data": configmap_data(&proxy.ca_pem, &cluster_ca.ca_pem)}),
    );
    kube.answer(
        "/api/v1/namespaces/default",
        200,
        json!({"status": {"phase": "Active"}}),
    );
    *kube.allow_user.lock().unwrap() = Some("alice".into());
    let cert = test_cert();
    let (addr, state) = start(kube.clone(), &cert).await;

    // Before the ConfigMap is read every request is anonymous, and refused.
    let (code, body) = call(addr, &cert, Some(&proxy), as_alice("GET", FLUNDERS), "").await;
    assert_eq!(code, 403, "{body}");
    assert!(state.refresh_trust().await.unwrap());

    let flunder = r#"{"apiVersion":"wardle.example.com/v1alpha1","kind":"Flunder","metadata":{"labels":{"sample-label":"true"},"name":"rest-flunder-1","namespace":"default"}}"#;
    let (code, created) = call(
        addr,
        &cert,
        Some(&proxy),
        as_alice("POST", FLUNDERS),
        flunder,
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["name"], "rest-flunder-1");

    let (code, list) = call(addr, &cert, Some(&proxy), as_alice("GET", FLUNDERS), "").await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));

    // The reviews named alice and her groups, with the request's attributes.
    let calls = kube.calls.lock().unwrap().clone();
    let reviews: Vec<&Value> = calls
        .iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/subjectaccessreviews"))
        .map(|(_, _, b)| &b["spec"])
        .collect();
    let verbs: Vec<&str> = reviews
        .iter()
        .filter(|s| s["user"] == "alice")
        .map(|s| s["resourceAttributes"]["verb"].as_str().unwrap())
        .collect();
    assert_eq!(verbs, ["create", "list"]);
    assert_eq!(
        reviews.iter().find(|s| s["user"] == "alice").unwrap()["groups"],
        json!(["dev", "system:authenticated"])
    );

    // Without the front proxy's certificate the headers are not believed.
    let (code, body) = call(addr, &cert, None, as_alice("GET", FLUNDERS), "").await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        "flunders.wardle.example.com is forbidden: User \"system:anonymous\" cannot list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"default\""
    );
    // A certificate of the cluster CA is its own user, whatever the headers say.
    let (code, body) = call(
        addr,
        &cert,
        Some(&cluster_ca),
        as_alice("GET", FLUNDERS),
        "",
    )
    .await;
    assert_eq!(code, 403);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("User \"nobody\""),
        "{body}"
    );

    // Health needs no one.
    let (code, _) = call(addr, &cert, None, http::Request::get("/readyz"), "").await;
    assert_eq!(code, 200);
}
