//! csrapproving, csrsigning and tokencleaner against an in-process kiln-apiserver, with the
//! controller-manager running as system:kube-controller-manager: a kubelet joining with a bootstrap
//! token gets its client certificate approved and signed by the cluster CA; a node renews its own;
//! requests outside the rules stay Pending (or fail validation when a human approves them); an
//! expired bootstrap token's Secret is deleted while a valid one stays.

use base64::Engine;
use clap::Parser;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, PostParams};
use serde_json::json;
use x509_parser::prelude::FromDer;

fn token_kubeconfig(c: &Cluster, name: &str, token: &str) -> std::path::PathBuf {
    let ca = base64::engine::general_purpose::STANDARD.encode(&c.pki.ca.cert);
    let path = c.dir.path().join(format!("{name}.conf"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kiln\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: kiln\n    user: {name}\ncurrent-context: {name}\n",
            c.url
        ),
    )
    .unwrap();
    path
}

fn bootstrap_secret(id: &str, expiration: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": {"token-id": id, "token-secret": "0123456789abcdef",
            "expiration": expiration,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}
    }))
    .unwrap()
}

/// A CSR object for a fresh key: (object, the key's SubjectPublicKeyInfo DER).
fn csr(
    name: &str,
    cn: &str,
    org: &str,
    sans: &[&str],
    signer: &str,
    usages: &[&str],
) -> (CertificateSigningRequest, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, org);
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    let obj = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                 "signerName": signer, "usages": usages},
    }))
    .unwrap();
    let spki_pem = key.public_key_pem();
    let (_, spki) = x509_parser::pem::parse_x509_pem(spki_pem.as_bytes()).unwrap();
    (obj, spki.contents)
}

fn conditions(c: &CertificateSigningRequest) -> Vec<(String, String)> {
    c.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|l| {
            l.iter()
                .map(|c| (c.type_.clone(), c.reason.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// The issued certificate once there is one, checked against the cluster CA: (CN, O, SPKI DER).
async fn issued(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    ca_pem: &str,
) -> (String, String, Vec<u8>) {
    let got = eventually(&format!("{name} issued"), || async {
        let c = api.get(name).await.ok()?;
        let cert = c.status?.certificate?;
        (!cert.0.is_empty()).then_some(cert.0)
    })
    .await;
    let (_, ca_block) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).unwrap();
    let ca = ca_block.parse_x509().unwrap();
    let (_, block) = x509_parser::pem::parse_x509_pem(&got).unwrap();
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&block.contents).unwrap();
    cert.verify_signature(Some(ca.public_key()))
        .expect("signed by the cluster CA");
    assert_eq!(cert.issuer(), ca.subject());
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    let o = cert
        .subject()
        .iter_organization()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    assert!(cert.validity().time_to_expiration().unwrap() > time::Duration::days(360));
    (cn, o, cert.public_key().raw.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_csrs_are_approved_and_signed_and_expired_tokens_cleaned() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kiln_controller_manager=debug")
        .with_test_writer()
        .try_init();
    let c = Cluster::start().await;
    let admin = c.admin().await;
    let dir = c.dir.path();
    let ca_key = dir.join("ca.key");
    std::fs::write(&ca_key, &c.pki.ca.key).unwrap();
    let kubeconfig = c.kubeconfig_for("system:kube-controller-manager", &[]);
    let _cm = kiln_controller_manager::start(kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!(
            "--cluster-signing-cert-file={}",
            dir.join("ca.crt").display()
        ),
        format!("--cluster-signing-key-file={}", ca_key.display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--controllers=csrapproving,csrsigning,tokencleaner".into(),
    ]))
    .await
    .unwrap();

    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let pp = PostParams::default();
    secrets
        .create(&pp, &bootstrap_secret("abcdef", "2099-01-01T00:00:00Z"))
        .await
        .unwrap();
    secrets
        .create(&pp, &bootstrap_secret("oldold", "2020-01-01T00:00:00Z"))
        .await
        .unwrap();
    eventually("the expired bootstrap token deleted", || async {
        secrets
            .get_opt("bootstrap-token-oldold")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(secrets
        .get_opt("bootstrap-token-abcdef")
        .await
        .unwrap()
        .is_some());

    // The joining kubelet, authenticated with the bootstrap token.
    let joiner = c
        .client(&token_kubeconfig(&c, "joiner", "abcdef.0123456789abcdef"))
        .await;
    let as_joiner: Api<CertificateSigningRequest> = Api::all(joiner);
    let client_usages = ["digital signature", "key encipherment", "client auth"];
    let kubelet_client = "kubernetes.io/kube-apiserver-client-kubelet";
    // Not a node's certificate: recognised by no rule, so never approved.
    let (wrong, _) = csr(
        "wrong-subject",
        "admin",
        "system:masters",
        &[],
        kubelet_client,
        &client_usages,
    );
    as_joiner.create(&pp, &wrong).await.unwrap();
    let (good, good_key) = csr(
        "node-csr-foo",
        "system:node:foo",
        "system:nodes",
        &[],
        kubelet_client,
        &client_usages,
    );
    as_joiner.create(&pp, &good).await.unwrap();

    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let approved = eventually("node-csr-foo approved", || async {
        let c = csrs.get("node-csr-foo").await.ok()?;
        let conds = conditions(&c);
        (!conds.is_empty()).then_some(conds)
    })
    .await;
    assert_eq!(
        approved,
        [("Approved".to_string(), "AutoApproved".to_string())]
    );
    let (cn, o, spki) = issued(&csrs, "node-csr-foo", &c.pki.ca.cert).await;
    assert_eq!(
        (cn.as_str(), o.as_str()),
        ("system:node:foo", "system:nodes")
    );
    assert_eq!(spki, good_key, "the certificate is for the requester's key");

    // A node renews its own client certificate; asking for another node's name is not approved.
    let node: Api<CertificateSigningRequest> = Api::all(c.client(&c.node_kubeconfig).await);
    let (other, _) = csr(
        "node-n1-for-n2",
        "system:node:n2",
        "system:nodes",
        &[],
        kubelet_client,
        &client_usages,
    );
    node.create(&pp, &other).await.unwrap();
    let (renewal, _) = csr(
        "node-n1-renewal",
        "system:node:n1",
        "system:nodes",
        &[],
        kubelet_client,
        &client_usages,
    );
    node.create(&pp, &renewal).await.unwrap();
    let (cn, _, _) = issued(&csrs, "node-n1-renewal", &c.pki.ca.cert).await;
    assert_eq!(cn, "system:node:n1");

    // The refused requests, created before the ones that have since been approved and signed,
    // are still Pending.
    for name in ["wrong-subject", "node-n1-for-n2"] {
        let c = csrs.get(name).await.unwrap();
        assert!(conditions(&c).is_empty(), "{name}: {:?}", conditions(&c));
        assert!(c.status.and_then(|s| s.certificate).is_none());
    }

    // A human approves a serving request without any subjectAltName: the signer fails it.
    let (serving, _) = csr(
        "serving-no-san",
        "system:node:foo",
        "system:nodes",
        &[],
        "kubernetes.io/kubelet-serving",
        &["digital signature", "server auth"],
    );
    csrs.create(&pp, &serving).await.unwrap();
    c.kubectl_ok(&["certificate", "approve", "serving-no-san"])
        .await;
    let conds = eventually("serving-no-san failed", || async {
        let c = csrs.get("serving-no-san").await.ok()?;
        let conds = conditions(&c);
        conds.iter().any(|(t, _)| t == "Failed").then_some(conds)
    })
    .await;
    assert!(
        conds.contains(&("Failed".to_string(), "SignerValidationFailure".to_string())),
        "{conds:?}"
    );
    let c2 = csrs.get("serving-no-san").await.unwrap();
    assert!(c2.status.and_then(|s| s.certificate).is_none());
}
