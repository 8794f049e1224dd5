//! TLS bootstrap against the real kiln-apiserver (on a real etcd) and the real kiln-controller-manager's
//! csrapproving + csrsigning controllers: a kubelet with only a bootstrap token and the CA obtains its
//! client certificate, then renews it with its own identity; an expired token is refused with the
//! documented error.

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
    let kc = Kubeconfig::new(
        "kiln",
        &c.url,
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
