//! The kubelet server in-process (no root): TLS with a serving certificate from files, client certificates
//! from the cluster CA, authorization by SubjectAccessReview against the real kiln-apiserver (testkit, on a
//! real etcd), and the log endpoint over CRI-format files in a temp dir: current run, previous run,
//! tailLines, timestamps, limitBytes, and follow ending when the run ends. Exec and /pods of real
//! containers are covered on a lab host by `server_lab.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kiln_kubelet::config::ServerSettings;
use kiln_kubelet::container_status::{ContainerState, ContainerStatus};
use kiln_kubelet::runtime::PodStatus;
use kiln_kubelet::server::auth::SarAuthorizer;
use kiln_kubelet::server::pods::{NodePod, PodRuntime, PodSource};
use kiln_kubelet::server::{Context, Server};
use kiln_kubelet::KubeletConfig;
use kiln_testkit::{Cluster, Pair};
use rustls::pki_types::ServerName;
use tokio::sync::watch;

#[derive(Default)]
struct FakePods(Mutex<Vec<NodePod>>);

impl PodSource for FakePods {
    fn pods(&self) -> Vec<NodePod> {
        self.0.lock().unwrap().clone()
    }
}

fn container(restart_count: i32, running: bool) -> ContainerStatus {
    let now = SystemTime::now();
    ContainerStatus {
        name: "main".into(),
        image: "busybox".into(),
        container_id: "containerd://abc".into(),
        restart_count,
        state: if running {
            ContainerState::Running {
                pid: 1,
                started_at: now,
            }
        } else {
            ContainerState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: None,
            }
        },
        last_termination: None,
        ready: running,
        restarting: false,
        started: running,
        restartable: false,
        user: None,
    }
}

fn node_pod(name: &str, uid: &str, runtime: PodRuntime, c: ContainerStatus) -> NodePod {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))
    .unwrap();
    NodePod {
        pod,
        status: Some(PodStatus {
            uid: uid.into(),
            started_at: SystemTime::now(),
            containers: vec![c],
            init_containers: vec![],
            ephemeral_containers: vec![],
            pod_ip: Some("10.244.0.5".into()),
            resize: Default::default(),
        }),
        runtime,
    }
}

fn cri(ts: &str, msg: &str) -> String {
    format!("2026-11-29T10:00:{ts}Z stdout F {msg}\n")
}

struct Client {
    connector: tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
}

impl Client {
    fn new(ca_pem: &str, identity: Option<&Pair>, addr: std::net::SocketAddr) -> Client {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(p) => {
                let certs = rustls_pemfile::certs(&mut p.cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key = rustls_pemfile::private_key(&mut p.key.as_bytes())
                    .unwrap()
                    .unwrap();
                builder.with_client_auth_cert(certs, key).unwrap()
            }
        };
        Client {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            addr,
        }
    }

    async fn get(&self, path: &str) -> hyper::Response<Incoming> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let name = ServerName::IpAddress(self.addr.ip().into());
        let tls = self.connector.connect(name, tcp).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = hyper::Request::get(path)
            .header("host", self.addr.to_string())
            .body(Empty::<Bytes>::new())
            .unwrap();
        sender.send_request(req).await.unwrap()
    }

    async fn text(&self, path: &str) -> (u16, String) {
        let r = self.get(path).await;
        let code = r.status().as_u16();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned())
    }
}

/// The next chunk of a streaming body, waiting at most 30 s (a bound, not a timing assertion).
async fn next_chunk(body: &mut Incoming) -> Option<Bytes> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .expect("no log data within 30s")?
            .unwrap();
        if let Ok(data) = frame.into_data() {
            return Some(data);
        }
    }
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

#[tokio::test]
async fn server_authenticates_authorizes_and_serves_logs() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("pods");
    let web = logs.join("default_web_u1/main");
    write(
        &web.join("0.log"),
        &(cri("01", "first run") + &cri("02", "crashed")),
    );
    write(
        &web.join("1.log"),
        &(cri("10", "one") + &cri("11", "two") + &cri("12", "three")),
    );
    write(
        &logs.join("default_host_u2/main/0.log"),
        "raw process output\n",
    );
    let pods = Arc::new(FakePods::default());
    *pods.0.lock().unwrap() = vec![
        node_pod("web", "u1", PodRuntime::Cri, container(1, true)),
        node_pod("host", "u2", PodRuntime::Host, container(0, true)),
    ];

    let serving = cluster.pki.serving_as("n1");
    let (crt, key) = (
        dir.path().join("kubelet.crt"),
        dir.path().join("kubelet.key"),
    );
    std::fs::write(&crt, &serving.cert).unwrap();
    std::fs::write(&key, &serving.key).unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &cluster.pki.ca.cert).unwrap();
    let mut cfg = KubeletConfig::new("n1", "127.0.0.1".parse().unwrap());
    cfg.kubeconfig = cluster.node_kubeconfig.clone();
    let settings = ServerSettings {
        address: "127.0.0.1".parse().unwrap(),
        port: 0,
        tls: Some((crt, key)),
        client_ca_file: Some(ca),
    };
    let server = Server::bind(
        &settings,
        Context {
            node_name: "n1".into(),
            node_ip: "127.0.0.1".parse().unwrap(),
            log_root: logs.clone(),
            pods: pods.clone(),
            authorizer: SarAuthorizer::new(cfg),
            cri: None,
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(server.run(stop_rx));

    let apiserver = cluster
        .pki
        .client("kube-apiserver-kubelet-client", &["system:masters"]);
    let ca_pem = cluster.pki.ca.cert.clone();
    let admin = Client::new(&ca_pem, Some(&apiserver), addr);
    let anonymous = Client::new(&ca_pem, None, addr);
    let jane = Client::new(&ca_pem, Some(&cluster.pki.client("jane", &[])), addr);

    assert_eq!(anonymous.text("/healthz").await, (200, "ok".into()));
    assert_eq!(anonymous.text("/pods").await.0, 401);
    let (code, body) = jane.text("/containerLogs/default/web/main").await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("user=jane, verb=get, resource=nodes, subresource=proxy"),
        "{body}"
    );

    let l = "/containerLogs/default/web/main";
    assert_eq!(admin.text(l).await, (200, "one\ntwo\nthree\n".into()));
    assert_eq!(
        admin.text(&format!("{l}?previous=true")).await,
        (200, "first run\ncrashed\n".into())
    );
    assert_eq!(
        admin.text(&format!("{l}?tailLines=2")).await.1,
        "two\nthree\n"
    );
    assert_eq!(
        admin
            .text(&format!("{l}?tailLines=1&timestamps=true"))
            .await
            .1,
        "2026-11-29T10:00:12Z three\n"
    );
    assert_eq!(admin.text(&format!("{l}?limitBytes=6")).await.1, "one\ntw");
    assert_eq!(
        admin
            .text(&format!("{l}?sinceTime=2026-11-29T10:00:11Z"))
            .await
            .1,
        "two\nthree\n"
    );
    assert_eq!(
        admin.text("/containerLogs/default/host/main").await.1,
        "raw process output\n"
    );
    let (code, body) = admin
        .text("/containerLogs/default/host/main?previous=true")
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("previous terminated container"), "{body}");
    assert_eq!(admin.text("/containerLogs/default/web/nope").await.0, 404);
    assert_eq!(admin.text("/containerLogs/default/nope/main").await.0, 404);
    // exec needs a CRI pod and a CRI runtime.
    assert_eq!(
        admin
            .text("/exec/default/host/main?command=ls&stdout=1")
            .await
            .0,
        400
    );

    // follow: new lines arrive as they are written; the stream ends once the run is over.
    let mut body = admin
        .get(&format!("{l}?follow=true&tailLines=1"))
        .await
        .into_body();
    assert_eq!(next_chunk(&mut body).await.unwrap(), "three\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(web.join("1.log"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, cri("13", "four").as_bytes()))
        .unwrap();
    assert_eq!(next_chunk(&mut body).await.unwrap(), "four\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(web.join("1.log"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, cri("14", "last words").as_bytes()))
        .unwrap();
    pods.0.lock().unwrap()[0] = node_pod("web", "u1", PodRuntime::Cri, container(1, false));
    let mut rest = Vec::new();
    while let Some(chunk) = next_chunk(&mut body).await {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"last words\n");

    let (code, list) = admin.text("/pods").await;
    assert_eq!(code, 200);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    assert_eq!(list["items"][0]["status"]["podIP"], "10.244.0.5");
    let (code, metrics) = admin.text("/metrics").await;
    assert_eq!(code, 200);
    assert!(metrics.contains("kubelet_running_pods 1\n"), "{metrics}");
    assert!(
        metrics.contains("kiln_kubelet_http_requests_total{path=\"containerLogs\",code=\"403\"} 1"),
        "{metrics}"
    );

    // Resource usage (issue 25): authorized as nodes/stats and nodes/metrics, read from this host.
    let (code, body) = jane.text("/stats/summary").await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource=stats"), "{body}");
    let (code, summary) = admin.text("/stats/summary").await;
    assert_eq!(code, 200, "{summary}");
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert!(
        summary["node"]["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let (code, resource) = admin.text("/metrics/resource").await;
    assert_eq!(code, 200);
    assert!(
        resource
            .contains("# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total "),
        "{resource}"
    );
    assert!(resource.contains("resource_scrape_error 0\n"), "{resource}");

    let _ = stop.send(true);
    task.await.unwrap();
}
