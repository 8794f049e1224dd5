//! TLS bootstrap against the real kiln-apiserver (on a real etcd) and the real kiln-controller-manager's
//! csrapproving + csrsigning controllers: a kubelet with only a bootstrap token and the CA obtains its
//! client certificate, then renews it with its own identity; an expired token is refused with the
//! documented error. A running kubelet rotates its short-lived certificate and its workload pod loop
//! follows: once the first certificate has expired, pods are still started and reported and the node
//! status keeps updating.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use kiln_kubelet::tls_bootstrap::{self, Credentials, Ensured};
use kiln_pki::Kubeconfig;
use kiln_testkit::Cluster;
use kube::api::{Api, PostParams};
use serde_json::json;

use common::fake_runtime::RunningRuntime;

fn bootstrap_secret(id: &str, secret: &str, expiration: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id,
            "token-secret": secret,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kiln:default-node-token",
        }
    }))
    .unwrap()
}

fn write_bootstrap_kubeconfig(c: &Cluster, token: &str) -> std::path::PathBuf {
    write_bootstrap_kubeconfig_to(c, &c.url, token)
}

fn write_bootstrap_kubeconfig_to(c: &Cluster, url: &str, token: &str) -> std::path::PathBuf {
    let kc = Kubeconfig::new(
        "kiln",
        url,
        &c.pki.ca.cert,
        "tls-bootstrap-token-user",
        kiln_pki::kubeconfig::User {
            token: Some(token.into()),
            ..Default::default()
        },
    );
    let path = c.dir.path().join("bootstrap-kubelet.conf");
    std::fs::write(&path, kc.to_yaml().unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_bootstrap_token_is_refused_with_the_documented_error() {
    let c = Cluster::start().await;
    let secrets: Api<Secret> = Api::namespaced(c.admin().await, "kube-system");
    secrets
        .create(
            &PostParams::default(),
            &bootstrap_secret("abc123", "0123456789abcdef", "2020-01-01T00:00:00Z"),
        )
        .await
        .unwrap();
    let bootstrap = write_bootstrap_kubeconfig(&c, "abc123.0123456789abcdef");
    let node_dir = tempfile::tempdir().unwrap();
    let creds = Credentials {
        kubeconfig: node_dir.path().join("kubelet.conf"),
        bootstrap_kubeconfig: Some(bootstrap),
        node_name: "late-node".into(),
        sign_timeout: Duration::from_secs(5),
    };
    let err = tls_bootstrap::ensure(&creds).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, tls_bootstrap::BootstrapError::TokenRejected { .. }),
        "{msg}"
    );
    assert!(msg.contains("bootstrap token abc123"), "{msg}");
    assert!(msg.contains("expired or deleted"), "{msg}");
    assert!(
        !msg.contains("0123456789abcdef"),
        "the secret leaked: {msg}"
    );
    assert!(!creds.kubeconfig.exists(), "nothing half-written");
}

fn condition_of(csr: &CertificateSigningRequest, type_: &str) -> Option<String> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| c.reason.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_bootstraps_its_client_certificate_and_renews_it() {
    let c = Cluster::start().await;
    let admin = c.admin().await;
    let ca_cert = c.dir.path().join("signing-ca.crt");
    let ca_key = c.dir.path().join("signing-ca.key");
    std::fs::write(&ca_cert, &c.pki.ca.cert).unwrap();
    std::fs::write(&ca_key, &c.pki.ca.key).unwrap();
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=csrapproving,csrsigning".into(),
        format!("--cluster-signing-cert-file={}", ca_cert.display()),
        format!("--cluster-signing-key-file={}", ca_key.display()),
    ]))
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    secrets
        .create(
            &PostParams::default(),
            &bootstrap_secret("kiln01", "fedcba9876543210", "2099-01-01T00:00:00Z"),
        )
        .await
        .unwrap();
    let bootstrap = write_bootstrap_kubeconfig(&c, "kiln01.fedcba9876543210");
    let node_dir = tempfile::tempdir().unwrap();
    let creds = Credentials {
        kubeconfig: node_dir.path().join("kubelet.conf"),
        bootstrap_kubeconfig: Some(bootstrap),
        node_name: "worker-7".into(),
        sign_timeout: Duration::from_secs(60),
    };

    let Ensured::Bootstrapped { csr } = tls_bootstrap::ensure(&creds).await.unwrap() else {
        panic!("expected a bootstrap");
    };
    let mode = std::fs::metadata(&creds.kubeconfig)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "kubelet.conf holds a private key");
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let obj = csrs.get(&csr).await.unwrap();
    assert_eq!(
        obj.spec.username.as_deref(),
        Some("system:bootstrap:kiln01"),
        "requested with the bootstrap token"
    );
    assert_eq!(
        condition_of(&obj, "Approved").as_deref(),
        Some("AutoApproved")
    );

    // The new identity is the node's own, with the token nowhere in kubelet.conf.
    let text = std::fs::read_to_string(&creds.kubeconfig).unwrap();
    assert!(!text.contains("fedcba9876543210"));
    let (ok, out, err) = c
        .kubectl(&creds.kubeconfig, &["auth", "whoami", "-o", "json"])
        .await;
    assert!(ok, "{err}");
    let who: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "system:node:worker-7"
    );
    assert!(who["status"]["userInfo"]["groups"]
        .as_array()
        .unwrap()
        .contains(&json!("system:nodes")));
    let first = tls_bootstrap::client_cert_window(&creds.kubeconfig).unwrap();

    // A second ensure keeps what is there.
    assert_eq!(
        tls_bootstrap::ensure(&creds).await.unwrap(),
        Ensured::Present
    );

    // Renewal with the node's own identity (selfnodeclient), no token needed.
    std::fs::remove_file(creds.bootstrap_kubeconfig.as_ref().unwrap()).unwrap();
    let renewal = tls_bootstrap::renew(&creds).await.unwrap();
    let obj = csrs.get(&renewal).await.unwrap();
    assert_eq!(obj.spec.username.as_deref(), Some("system:node:worker-7"));
    assert_eq!(
        condition_of(&obj, "Approved").as_deref(),
        Some("AutoApproved")
    );
    let second = tls_bootstrap::client_cert_window(&creds.kubeconfig).unwrap();
    assert!(second.0 >= first.0, "a new certificate");
    let (ok, out, err) = c.kubectl(&creds.kubeconfig, &["auth", "whoami"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("system:node:worker-7"), "{out}");
}

/// A TCP relay on 127.0.0.1 to the API server at `url`. Sending another address moves it there and
/// cuts every connection through it (as an API server restart does), so clients must connect again.
async fn relay(url: &str) -> (String, tokio::sync::watch::Sender<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (to, targets) = tokio::sync::watch::channel(url.trim_start_matches("https://").to_string());
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut targets = targets.clone();
            let target = targets.borrow_and_update().clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    _ = targets.changed() => {}
                }
            });
        }
    });
    (format!("https://127.0.0.1:{port}"), to)
}

/// The first certificate lives 90 s (--cluster-signing-duration; 5 min backdated, so rotation is due
/// within seconds and the agent rotates at its first check, a minute in). Once it has expired, the
/// kubelet's connections are moved to a second API server on the same store (a fresh TLS session cache,
/// so nothing resumes a session made with the old certificate): a client still made with the first
/// certificate cannot connect any more, so the workload loop must be on the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_loop_follows_the_rotated_client_certificate() {
    const NODE: &str = "worker-9";
    let c = Cluster::start().await;
    let admin = c.admin().await;
    let ca_cert = c.dir.path().join("signing-ca.crt");
    let ca_key = c.dir.path().join("signing-ca.key");
    std::fs::write(&ca_cert, &c.pki.ca.cert).unwrap();
    std::fs::write(&ca_key, &c.pki.ca.key).unwrap();
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=csrapproving,csrsigning".into(),
        format!("--cluster-signing-cert-file={}", ca_cert.display()),
        format!("--cluster-signing-key-file={}", ca_key.display()),
        "--cluster-signing-duration=90s".into(),
    ]))
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    secrets
        .create(
            &PostParams::default(),
            &bootstrap_secret("kiln09", "0a1b2c3d4e5f6a7b", "2099-01-01T00:00:00Z"),
        )
        .await
        .unwrap();
    let (url, to) = relay(&c.url).await;
    let bootstrap = write_bootstrap_kubeconfig_to(&c, &url, "kiln09.0a1b2c3d4e5f6a7b");
    let node_dir = tempfile::tempdir().unwrap();
    let mut cfg = kiln_kubelet::KubeletConfig::new(NODE, "127.0.0.1".parse().unwrap());
    cfg.kubeconfig = node_dir.path().join("kubelet.conf");
    cfg.bootstrap_kubeconfig = Some(bootstrap);
    cfg.rotate_certificates = true;
    cfg.pod_manifest_path = node_dir.path().join("manifests");
    std::fs::create_dir_all(&cfg.pod_manifest_path).unwrap();
    cfg.root_dir = node_dir.path().join("kubelet");
    cfg.pod_log_dir = node_dir.path().join("logs");
    cfg.node_status_update_frequency = Duration::from_secs(1);
    cfg.lease_renew_interval = Duration::from_secs(1);
    cfg.api_retry_max = Duration::from_secs(1);
    let kubeconfig = cfg.kubeconfig.clone();
    let kubelet = kiln_kubelet::run(cfg).await.unwrap();

    // The workload loop on the kubelet's client (the one lib.rs gives it when CRI is configured).
    let client = tokio::time::timeout(Duration::from_secs(60), kubelet.api_client.client())
        .await
        .expect("the agent bootstraps a client");
    let runtime = std::sync::Arc::new(RunningRuntime::default());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let workloads = tokio::spawn(
        kiln_kubelet::workloads::WorkloadPods::new(NODE, "127.0.0.1", runtime).run(client, stop_rx),
    );
    let first = tls_bootstrap::client_cert_window(&kubeconfig).unwrap();
    let old = node_dir.path().join("first-kubelet.conf");
    std::fs::copy(&kubeconfig, &old).unwrap();

    kiln_testkit::eventually_within(Duration::from_secs(150), "the agent rotates", || async {
        let now = tls_bootstrap::client_cert_window(&kubeconfig)?;
        (now.0 > first.0).then_some(())
    })
    .await;
    let left = first.1 - time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
    if left.is_positive() {
        tokio::time::sleep(left.unsigned_abs()).await;
    }
    let file = |f: &str| c.dir.path().join(f).display().to_string();
    let second = kiln_apiserver::start(kiln_apiserver::Options::parse_from([
        "kiln-apiserver".to_string(),
        format!("--etcd-servers={}", c.etcd.endpoint),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--tls-cert-file={}", file("apiserver.crt")),
        format!("--tls-private-key-file={}", file("apiserver.key")),
        format!("--client-ca-file={}", file("ca.crt")),
    ]))
    .await
    .unwrap();
    to.send_replace(second.local_addr().to_string());
    // The first certificate is refused now.
    let (ok, _, err) = c.kubectl(&old, &["auth", "whoami"]).await;
    assert!(!ok, "the expired certificate still works?");
    assert!(!err.is_empty());

    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), "default");
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "after-rotation", "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    kiln_testkit::eventually_within(
        Duration::from_secs(60),
        "the pod's status posted with the new certificate",
        || async {
            let p = pods.get("after-rotation").await.ok()?;
            let ready = p
                .status?
                .conditions?
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        },
    )
    .await;
    // The agent's own calls (node status, lease) go on too.
    let mut state = kubelet.agent_state.clone();
    let before = state.borrow_and_update().status_updates;
    kiln_testkit::eventually_within(Duration::from_secs(30), "node status updates", || {
        let s = state.borrow_and_update().clone();
        async move { (s.status_updates > before && s.last_error.is_none()).then_some(()) }
    })
    .await;

    let _ = stop.send(true);
    workloads.await.unwrap();
    kubelet.shutdown().await;
    second.shutdown().await;
}
