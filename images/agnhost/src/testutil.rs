//! Helpers for the unit tests: a router served on 127.0.0.1 and a GET against it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;

pub async fn spawn_router(app: Router) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(crate::server::serve(l, None, app, std::future::pending()));
    addr
}

pub async fn get(addr: SocketAddr, path_and_query: &str) -> (u16, http::HeaderMap, String) {
    let a = crate::client::get(
        &format!("http://{addr}{path_and_query}"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    (
        a.status.as_u16(),
        a.headers,
        String::from_utf8_lossy(&a.body).into_owned(),
    )
}

/// A self-signed certificate for `localhost` (rcgen), written as PEM files the way a pod mounts its
/// serving secret; the certificate's DER is what a client trusts.
pub struct TestCert {
    /// Holds the files for the test's lifetime.
    _dir: tempfile::TempDir,
    pub cert_file: String,
    pub key_file: String,
    pub der: rustls::pki_types::CertificateDer<'static>,
}

pub fn test_cert() -> TestCert {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_file = dir.path().join("tls.crt");
    let key_file = dir.path().join("tls.key");
    std::fs::write(&cert_file, ck.cert.pem()).unwrap();
    std::fs::write(&key_file, ck.signing_key.serialize_pem()).unwrap();
    TestCert {
        cert_file: cert_file.display().to_string(),
        key_file: key_file.display().to_string(),
        der: ck.cert.der().clone(),
        _dir: dir,
    }
}

/// POSTs `body` over HTTPS (HTTP/1.1) to `addr`, trusting only `cert`, as the apiserver calls a
/// webhook Service.
pub async fn https_post(
    addr: SocketAddr,
    cert: &TestCert,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, http::HeaderMap, String) {
    use http_body_util::BodyExt as _;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der.clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post(path)
        .header(http::header::HOST, "localhost")
        .header(http::header::CONTENT_TYPE, content_type)
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// Sends one request through `app` in-process (no socket): status, headers, body, and whether the
/// response asks the server to drop the connection.
pub async fn call(
    app: Router,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, http::HeaderMap, String, bool) {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    let mut req = http::Request::post(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(axum::body::Body::from(body.to_owned())).unwrap();
    let resp = app.oneshot(req).await.unwrap();
    let dropped = resp
        .extensions()
        .get::<crate::server::Disconnect>()
        .is_some();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
        dropped,
    )
}
