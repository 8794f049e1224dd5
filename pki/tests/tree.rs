//! The certificate tree on disk: created once, complete, chained, private keys 0600, never rotated on re-run.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use kiln_pki::expiry::first_cert_der;
use kiln_pki::{
    ensure_tree, read_cert, read_kubeconfig, CertAuthority, KubeconfigKind, TreeParams, Validity,
    CERT_TREE,
};
use x509_parser::prelude::{FromDer, X509Certificate};

fn params() -> TreeParams {
    let mut p = TreeParams::new("cp1");
    p.host_addresses = vec!["10.1.0.2".into(), "cp1.lab".into()];
    p.control_plane_endpoint = Some("kiln.example:6443".into());
    p
}

fn der(path: &Path) -> Vec<u8> {
    first_cert_der(&fs::read_to_string(path).unwrap(), "test").unwrap()
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = walk(dir)
        .into_iter()
        .map(|p| (p.display().to_string(), fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn tree_is_created_once_and_never_rotated() {
    let dir = tempfile::tempdir().unwrap();
    let first = ensure_tree(dir.path(), &params()).unwrap();
    assert_eq!(first.created.len(), CERT_TREE.len() + 1, "{first:?}");
    assert!(first.existing.is_empty());
    let before = snapshot(dir.path());

    let second = ensure_tree(dir.path(), &params()).unwrap();
    assert!(second.created.is_empty(), "{second:?}");
    assert_eq!(snapshot(dir.path()), before, "re-running changed files");
}

#[test]
fn missing_leaf_is_reissued_from_the_existing_ca() {
    let dir = tempfile::tempdir().unwrap();
    ensure_tree(dir.path(), &params()).unwrap();
    let ca_before = fs::read(dir.path().join("ca.crt")).unwrap();
    fs::remove_file(dir.path().join("apiserver.crt")).unwrap();
    fs::remove_file(dir.path().join("apiserver.key")).unwrap();
    let report = ensure_tree(dir.path(), &params()).unwrap();
    assert_eq!(report.created, vec!["apiserver".to_string()]);
    assert_eq!(fs::read(dir.path().join("ca.crt")).unwrap(), ca_before);
    verify_chain(
        &dir.path().join("apiserver.crt"),
        &dir.path().join("ca.crt"),
    );
}

#[test]
fn half_present_pair_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    ensure_tree(dir.path(), &params()).unwrap();
    fs::remove_file(dir.path().join("store/peer.key")).unwrap();
    let err = ensure_tree(dir.path(), &params()).unwrap_err().to_string();
    assert!(err.contains("store-peer"), "{err}");
}

#[test]
fn a_lost_ca_is_not_silently_replaced() {
    let dir = tempfile::tempdir().unwrap();
    ensure_tree(dir.path(), &params()).unwrap();
    fs::remove_file(dir.path().join("store/ca.crt")).unwrap();
    fs::remove_file(dir.path().join("store/ca.key")).unwrap();
    let err = ensure_tree(dir.path(), &params()).unwrap_err().to_string();
    assert!(err.contains("store-ca is missing"), "{err}");
    assert!(!dir.path().join("store/ca.crt").exists());
}

fn verify_chain(leaf: &Path, ca: &Path) {
    let leaf_der = der(leaf);
    let ca_der = der(ca);
    let (_, leaf_cert) = X509Certificate::from_der(&leaf_der).unwrap();
    let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap();
    assert_eq!(
        leaf_cert.issuer(),
        ca_cert.subject(),
        "{} issuer",
        leaf.display()
    );
    leaf_cert
        .verify_signature(Some(ca_cert.public_key()))
        .unwrap_or_else(|e| panic!("{} not signed by {}: {e}", leaf.display(), ca.display()));
    assert!(!leaf_cert.is_ca());
    assert!(ca_cert.is_ca());
    ca_cert.verify_signature(None).expect("CA is self-signed");
}

#[test]
fn every_certificate_chains_to_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    ensure_tree(dir.path(), &params()).unwrap();
    for spec in CERT_TREE {
        if let Some(ca_name) = spec.ca {
            let ca = kiln_pki::spec(ca_name).unwrap();
            verify_chain(
                &dir.path().join(spec.cert_file()),
                &dir.path().join(ca.cert_file()),
            );
        }
    }
    // The two trees are separate: the apiserver cert is not signed by the store CA.
    let api_der = der(&dir.path().join("apiserver.crt"));
    let (_, leaf) = X509Certificate::from_der(&api_der).unwrap();
    let store_ca_der = der(&dir.path().join("store/ca.crt"));
    let (_, store_ca) = X509Certificate::from_der(&store_ca_der).unwrap();
    assert!(leaf.verify_signature(Some(store_ca.public_key())).is_err());
}

#[test]
fn subjects_sans_and_validity() {
    let dir = tempfile::tempdir().unwrap();
    ensure_tree(dir.path(), &params()).unwrap();
    let api = read_cert(&dir.path().join("apiserver.crt")).unwrap();
    for want in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "10.96.0.1",
        "cp1",
        "cp1.lab",
        "10.1.0.2",
        "127.0.0.1",
        "localhost",
        "kiln.example",
    ] {
        assert!(
            api.sans.iter().any(|s| s == want),
            "apiserver SANs {:?} lack {want}",
            api.sans
        );
    }
    assert_eq!(api.issuer_cn, "kubernetes");
    let leaf_life = api.not_after - api.not_before;
    assert!(leaf_life > time::Duration::days(364) && leaf_life < time::Duration::days(366));

    let ca = read_cert(&dir.path().join("ca.crt")).unwrap();
    assert!(ca.is_ca);
    assert!(ca.not_after - ca.not_before > time::Duration::days(3649));

    let kc = read_cert(&dir.path().join("apiserver-kubelet-client.crt")).unwrap();
    assert_eq!(kc.subject_cn, "kube-apiserver-kubelet-client");
    assert_eq!(kc.organizations, vec!["system:masters".to_string()]);

    let store = read_cert(&dir.path().join("store/server.crt")).unwrap();
    assert_eq!(store.subject_cn, "cp1");
    assert_eq!(store.issuer_cn, "kiln-store-ca");
    assert!(store.sans.contains(&"127.0.0.1".to_string()));

    let all = kiln_pki::expiry(dir.path()).unwrap();
    assert_eq!(all.len(), CERT_TREE.len());
}

#[test]
fn private_keys_are_0600() {
    let dir = tempfile::tempdir().unwrap();
    ensure_tree(dir.path(), &params()).unwrap();
    for p in walk(dir.path()) {
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        if p.extension().is_some_and(|e| e == "key") {
            assert_eq!(mode, 0o600, "{}", p.display());
        }
    }
    let pubkey = fs::read_to_string(dir.path().join("sa.pub")).unwrap();
    assert!(pubkey.contains("BEGIN PUBLIC KEY"));
}

#[test]
fn kubeconfigs_embed_client_identities() {
    let dir = tempfile::tempdir().unwrap();
    ensure_tree(dir.path(), &params()).unwrap();
    let ca = kiln_pki::load_ca(dir.path(), kiln_pki::spec("ca").unwrap()).unwrap();
    let out = dir.path().join("etc");
    let kinds = [
        (
            KubeconfigKind::Admin,
            "kubernetes-admin",
            vec!["system:masters"],
        ),
        (
            KubeconfigKind::Kubelet {
                node_name: "cp1".into(),
            },
            "system:node:cp1",
            vec!["system:nodes"],
        ),
        (KubeconfigKind::Scheduler, "system:kube-scheduler", vec![]),
        (
            KubeconfigKind::ControllerManager,
            "system:kube-controller-manager",
            vec![],
        ),
    ];
    for (kind, cn, groups) in kinds {
        let created = kiln_pki::ensure_kubeconfig(
            &out,
            &ca,
            &kind,
            "kiln",
            "https://10.1.0.2:6443",
            &Validity::default(),
        )
        .unwrap();
        assert!(created);
        let path = out.join(kind.file_name());
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let before = fs::read(&path).unwrap();
        assert!(!kiln_pki::ensure_kubeconfig(
            &out,
            &ca,
            &kind,
            "kiln",
            "https://x:1",
            &Validity::default()
        )
        .unwrap());
        assert_eq!(fs::read(&path).unwrap(), before, "kubeconfig rewritten");

        let kc = read_kubeconfig(&path).unwrap();
        assert_eq!(kc.server().unwrap(), "https://10.1.0.2:6443");
        assert_eq!(
            kc.ca_pem().unwrap(),
            fs::read_to_string(dir.path().join("ca.crt")).unwrap()
        );
        let info = kiln_pki::parse_cert_pem(&kc.client_cert_pem().unwrap(), "kc").unwrap();
        assert_eq!(info.subject_cn, cn);
        assert_eq!(info.organizations, groups);
        let yaml = fs::read_to_string(&path).unwrap();
        assert!(yaml.contains("client-key-data:") && yaml.contains("current-context:"));
    }
}

#[test]
fn loaded_ca_issues_certificates_that_chain() {
    let (ca, pair) = CertAuthority::generate("test-ca", &Validity::default()).unwrap();
    let again = CertAuthority::load(&pair.cert_pem, &pair.key_pem).unwrap();
    let req = kiln_pki::LeafRequest {
        common_name: "x".into(),
        organizations: vec![],
        usages: vec![kiln_pki::Usage::Server],
        sans: vec!["x.example".into()],
    };
    for issuer in [&ca, &again] {
        let leaf = issuer.issue(&req, &Validity::default()).unwrap();
        let leaf_der = first_cert_der(&leaf.cert_pem, "leaf").unwrap();
        let ca_der = first_cert_der(&pair.cert_pem, "ca").unwrap();
        let (_, l) = X509Certificate::from_der(&leaf_der).unwrap();
        let (_, c) = X509Certificate::from_der(&ca_der).unwrap();
        l.verify_signature(Some(c.public_key())).unwrap();
    }
}
