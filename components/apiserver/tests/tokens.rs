//! Joining and identities: `kubectl create token` (TokenRequest, ES256 JWTs signed with sa.key)
//! and those tokens as bearer credentials; bootstrap tokens from kube-system secrets (expiry,
//! wrong secret); CSRs created with a bootstrap token, approved with `kubectl certificate approve`,
//! issued through /status.

use base64::Engine;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kiln_testkit::{rows, Cluster};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

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

/// A cluster whose apiserver signs service-account tokens with an ECDSA P-256 PKCS#8 sa.key.
async fn cluster(keys: &tempfile::TempDir) -> Cluster {
    let key = rcgen::KeyPair::generate().unwrap();
    let sa_key = keys.path().join("sa.key");
    let sa_pub = keys.path().join("sa.pub");
    std::fs::write(&sa_key, key.serialize_pem()).unwrap();
    std::fs::write(&sa_pub, key.public_key_pem()).unwrap();
    Cluster::start_with(&[
        &format!("--service-account-signing-key-file={}", sa_key.display()),
        &format!("--service-account-key-file={}", sa_pub.display()),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_and_use_it() {
    let keys = tempfile::tempdir().unwrap();
    let c = cluster(&keys).await;
    c.kubectl_ok(&["create", "serviceaccount", "robot"]).await;
    let token = c
        .kubectl_ok(&["create", "token", "robot"])
        .await
        .trim()
        .to_string();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.split('.').next().unwrap())
        .unwrap();
    let header: serde_json::Value = serde_json::from_slice(&header).unwrap();
    assert_eq!(header["alg"], "ES256");

    let robot = token_kubeconfig(&c, "robot", &token);
    let (ok, out, err) = c.kubectl(&robot, &["auth", "whoami"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("system:serviceaccount:default:robot"), "{out}");
    assert!(out.contains("system:serviceaccounts:default"), "{out}");
    let (ok, _, err) = c.kubectl(&robot, &["get", "pods"]).await;
    assert!(!ok);
    assert!(
        err.contains("User \"system:serviceaccount:default:robot\" cannot list resource \"pods\""),
        "{err}"
    );
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "robot-view",
        "--clusterrole=view",
        "--serviceaccount=default:robot",
    ])
    .await;
    let (ok, _, err) = c.kubectl(&robot, &["get", "pods"]).await;
    assert!(ok, "{err}");

    // Issuer discovery: any service account reads the provider configuration and the key set, and
    // the token verifies with the published key (what an external OIDC consumer does).
    let (ok, config, err) = c
        .kubectl(
            &robot,
            &["get", "--raw", "/.well-known/openid-configuration"],
        )
        .await;
    assert!(ok, "{err}");
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        config["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(
        config["jwks_uri"],
        "https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
    );
    let (ok, jwks, err) = c
        .kubectl(&robot, &["get", "--raw", "/openid/v1/jwks"])
        .await;
    assert!(ok, "{err}");
    let jwks: serde_json::Value = serde_json::from_str(&jwks).unwrap();
    let jwk = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == header["kid"])
        .unwrap_or_else(|| panic!("the token's kid in {jwks}"))
        .clone();
    assert_eq!(
        (
            jwk["kty"].as_str(),
            jwk["crv"].as_str(),
            jwk["alg"].as_str()
        ),
        (Some("EC"), Some("P-256"), Some("ES256"))
    );
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut point = vec![4u8];
    point.extend(b64.decode(jwk["x"].as_str().unwrap()).unwrap());
    point.extend(b64.decode(jwk["y"].as_str().unwrap()).unwrap());
    let (signed, signature) = token.rsplit_once('.').unwrap();
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point)
        .verify(signed.as_bytes(), &b64.decode(signature).unwrap())
        .expect("the token verifies with the published key");

    // Too short a lifetime is 422; a tampered token is 401.
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "token", "robot", "--duration=5m"],
        )
        .await;
    assert!(
        !ok && err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    let bad = token_kubeconfig(&c, "forged", &forged);
    let (ok, _, err) = c.kubectl(&bad, &["get", "pods"]).await;
    assert!(!ok && err.contains("Unauthorized"), "{err}");

    // Deleting the service account invalidates its tokens.
    c.kubectl_ok(&["delete", "serviceaccount", "robot"]).await;
    let (ok, _, err) = c.kubectl(&robot, &["get", "pods"]).await;
    assert!(!ok && err.contains("Unauthorized"), "{err}");
}

fn bootstrap_secret(id: &str, secret: &str, expiration: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": {"token-id": id, "token-secret": secret, "expiration": expiration,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_tokens_and_csr_approval() {
    let keys = tempfile::tempdir().unwrap();
    let c = cluster(&keys).await;
    let dir = c.dir.path();
    let good = dir.join("good.json");
    std::fs::write(
        &good,
        bootstrap_secret("abcdef", "0123456789abcdef", "2099-01-01T00:00:00Z").to_string(),
    )
    .unwrap();
    let old = dir.join("old.json");
    std::fs::write(
        &old,
        bootstrap_secret("oldold", "0123456789abcdef", "2020-01-01T00:00:00Z").to_string(),
    )
    .unwrap();
    c.kubectl_ok(&[
        "apply",
        "-f",
        good.to_str().unwrap(),
        "-f",
        old.to_str().unwrap(),
    ])
    .await;

    let joiner = token_kubeconfig(&c, "joiner", "abcdef.0123456789abcdef");
    let (ok, out, err) = c.kubectl(&joiner, &["auth", "whoami"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("system:bootstrap:abcdef"), "{out}");
    assert!(
        out.contains("system:bootstrappers:kubeadm:default-node-token"),
        "{out}"
    );
    for (name, token) in [
        ("expired", "oldold.0123456789abcdef"),
        ("wrong", "abcdef.0123456789abcdeX"),
        ("absent", "zzzzzz.0123456789abcdef"),
    ] {
        let kc = token_kubeconfig(&c, name, token);
        let (ok, _, err) = c.kubectl(&kc, &["auth", "whoami"]).await;
        assert!(!ok && err.contains("Unauthorized"), "{name}: {err}");
    }

    // The joining kubelet asks for a client certificate.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:n2");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"generateName": "node-csr-"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                 "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["digital signature", "client auth"],
                 "username": "someone-else", "groups": ["system:masters"]},
    }))
    .unwrap();
    let as_joiner: Api<CertificateSigningRequest> = Api::all(c.client(&joiner).await);
    let created = as_joiner
        .create(&PostParams::default(), &csr)
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    let spec = created.spec;
    assert_eq!(
        spec.username.as_deref(),
        Some("system:bootstrap:abcdef"),
        "the server records the requester"
    );
    assert!(!spec.groups.unwrap().contains(&"system:masters".to_string()));

    let listed = rows(&c.kubectl_ok(&["get", "csr"]).await);
    assert_eq!(
        listed[0],
        [
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ]
    );
    assert_eq!(listed[1][5], "Pending");
    let out = c.kubectl_ok(&["certificate", "approve", &name]).await;
    assert!(out.contains("approved"), "{out}");
    let listed = rows(&c.kubectl_ok(&["get", "csr", &name]).await);
    assert_eq!(listed[1][5], "Approved");

    // The signer (controller-manager) writes the certificate through /status.
    c.kubectl_ok(&[
        "patch",
        "csr",
        &name,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"certificate":"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="}}"#,
    ])
    .await;
    let listed = rows(&c.kubectl_ok(&["get", "csr", &name]).await);
    assert_eq!(listed[1][5], "Approved,Issued");
    // Annotations change through /approval and /status too (upstream's CSR strategies keep only
    // the spec, and /approval the certificate, as stored).
    let admin: Api<CertificateSigningRequest> = Api::all(c.client(&c.admin_kubeconfig).await);
    for (sub, key) in [("approval", "via-approval"), ("status", "via-status")] {
        let patch = json!({"metadata": {"annotations": {key: "true"}}});
        admin
            .patch_subresource(sub, &name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
    let annotated = admin.get(&name).await.unwrap();
    let annotations = annotated.metadata.annotations.unwrap_or_default();
    for key in ["via-approval", "via-status"] {
        assert_eq!(
            annotations.get(key).map(String::as_str),
            Some("true"),
            "{key}"
        );
    }
    assert!(annotated.status.and_then(|s| s.certificate).is_some());
    // The joiner may read its request back but not approve it.
    let (ok, _, err) = c
        .kubectl(&joiner, &["certificate", "approve", "--force", &name])
        .await;
    assert!(!ok && err.contains("forbidden"), "{err}");
}
