//! pods/log and pods/exec proxied to the pod's kubelet over TLS with the apiserver-kubelet-client
//! certificate. The kubelet side is a test double (a TLS server on 127.0.0.1 that requires that
//! client certificate); `kubectl logs` is the real client, exec is a raw upgrade.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kiln_testkit::Cluster;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn config_files(c: &kiln_testkit::Pki, dir: &std::path::Path) -> (String, String) {
    let pair = c.client("kube-apiserver-kubelet-client", &["kubeadm:cluster-admins"]);
    let cert = dir.join("kubelet-client.crt");
    let key = dir.join("kubelet-client.key");
    std::fs::write(&cert, pair.cert).unwrap();
    std::fs::write(&key, pair.key).unwrap();
    (
        cert.to_string_lossy().into_owned(),
        key.to_string_lossy().into_owned(),
    )
}

fn certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

fn key(pem: &str) -> rustls::pki_types::PrivateKeyDer<'static> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .unwrap()
        .unwrap()
}

/// A kubelet double: answers /containerLogs with what it was asked, and upgrades /exec into an
/// upper-casing echo. Only clients with a certificate from `ca` get through the handshake.
async fn fake_kubelet(pki: &kiln_testkit::Pki) -> u16 {
    let serving = pki.serving_as("n1");
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&pki.ca.cert) {
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&serving.cert), key(&serving.key))
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service =
                    hyper::service::service_fn(|mut req: http::Request<Incoming>| async move {
                        let path = req.uri().path().to_string();
                        let query = req.uri().query().unwrap_or("").to_string();
                        if path.starts_with("/exec/") {
                            let upgrade = hyper::upgrade::on(&mut req);
                            tokio::spawn(async move {
                                let Ok(io) = upgrade.await else { return };
                                let mut io = TokioIo::new(io);
                                let mut buf = [0u8; 64];
                                while let Ok(n) = io.read(&mut buf).await {
                                    if n == 0 {
                                        break;
                                    }
                                    let upper = buf[..n].to_ascii_uppercase();
                                    if io.write_all(&upper).await.is_err() {
                                        break;
                                    }
                                }
                            });
                            let protocol = req
                                .headers()
                                .get("sec-websocket-protocol")
                                .cloned()
                                .unwrap_or(http::HeaderValue::from_static("none"));
                            return Ok::<_, Infallible>(
                                http::Response::builder()
                                    .status(101)
                                    .header("connection", "Upgrade")
                                    .header("upgrade", "websocket")
                                    .header("sec-websocket-protocol", protocol)
                                    .header("x-exec-query", query)
                                    .body(Body::empty())
                                    .unwrap(),
                            );
                        }
                        Ok(http::Response::builder()
                            .header("content-type", "text/plain")
                            .body(Body::from(format!("log of {path}?{query}\nsecond line\n")))
                            .unwrap())
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_exec_reach_the_kubelet() {
    let c = Cluster::start_with_pki_flags(|pki, dir| {
        let (cert, key) = config_files(pki, dir);
        vec![
            format!("--kubelet-client-certificate={cert}"),
            format!("--kubelet-client-key={key}"),
        ]
    })
    .await;
    let port = fake_kubelet(&c.pki).await;

    let node = format!(
        r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"n1"}},"status":{{"addresses":[{{"type":"InternalIP","address":"127.0.0.1"}}],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":{port}}}}}}}}}"#
    );
    let dir = c.dir.path();
    std::fs::write(dir.join("node.json"), node).unwrap();
    c.kubectl_ok(&["create", "-f", dir.join("node.json").to_str().unwrap()])
        .await;
    c.kubectl_ok(&[
        "patch", "node", "n1", "--subresource=status", "--type=merge", "-p",
        &format!(r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"127.0.0.1"}}],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":{port}}}}}}}}}"#),
    ])
    .await;
    std::fs::write(
        dir.join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  nodeName: n1\n  containers:\n  - name: c\n    image: registry.local/c:1\n",
    )
    .unwrap();
    c.kubectl_ok(&["create", "-f", dir.join("pod.yaml").to_str().unwrap()])
        .await;

    let out = c.kubectl_ok(&["logs", "p", "--tail=2"]).await;
    assert!(
        out.starts_with("log of /containerLogs/default/p/c?tailLines=2\n"),
        "{out}"
    );
    assert!(out.contains("second line"), "{out}");

    // A user without pods/log is denied before anything reaches the kubelet.
    let bob = c.kubeconfig_for("bob", &[]);
    c.kubectl_ok(&["create", "role", "pod-get", "--verb=get", "--resource=pods"])
        .await;
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "bob-get",
        "--role=pod-get",
        "--user=bob",
    ])
    .await;
    let (ok, _, err) = c.kubectl(&bob, &["logs", "p"]).await;
    assert!(
        !ok && err.contains("cannot get resource \"pods/log\""),
        "{err}"
    );

    // Exec: the upgrade handshake goes through and the streams are spliced. v4 is passed through
    // as it is (v5 is translated to SPDY in the API server: tests/portforward_debug.rs on a lab).
    let admin = c.pki.client("kubernetes-admin", &["system:masters"]);
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(&c.pki.ca.cert) {
        roots.add(cert).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(certs(&admin.cert), key(&admin.key))
    .unwrap();
    let tcp = tokio::net::TcpStream::connect(c.server.local_addr())
        .await
        .unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let request =
        "GET /api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true&stdout=true HTTP/1.1\r\n\
        Host: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n";
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read_head = async {
        while !head.ends_with(b"\r\n\r\n") {
            tls.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(kiln_testkit::WAIT, read_head)
        .await
        .unwrap();
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains("sec-websocket-protocol: v4.channel.k8s.io"),
        "{head}"
    );
    tls.write_all(b"hello").await.unwrap();
    let mut echo = [0u8; 5];
    tokio::time::timeout(kiln_testkit::WAIT, tls.read_exact(&mut echo))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echo, b"HELLO");
}
