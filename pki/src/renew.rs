//! Renewing leaf certificates with the CA that issued them, like `kubeadm certs renew`: the existing
//! certificate is the source of truth for its subject (CN, O) and SANs, so a renewal never changes who a
//! certificate names, only its validity, key and serial. CA files are read, never written.

use std::path::Path;

use crate::expiry::{parse_cert_pem, ExpiryError};
use crate::files::{read_string, write_atomic, FileError, PUBLIC_MODE, SECRET_MODE};
use crate::issue::{CertAndKey, CertAuthority, IssueError, LeafRequest};
use crate::kubeconfig::{Kubeconfig, KubeconfigError};
use crate::tree::{CertSpec, Usage};
use crate::validity::Validity;

#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Read(#[from] ExpiryError),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error("{what}: {source}")]
    Issue {
        what: String,
        #[source]
        source: IssueError,
    },
    #[error("{what} is a CA certificate: renewing a CA would invalidate everything it issued")]
    IsCa { what: String },
    #[error("{what} was issued by {found:?}, not by the CA {expected:?} that would renew it")]
    OtherIssuer {
        what: String,
        found: String,
        expected: String,
    },
}

/// A new certificate (fresh key, new serial, new validity) with the subject and SANs of `existing_pem`,
/// signed by `ca`. `usages` are the extended key usages the certificate is for (from the tree).
pub fn reissue(
    ca: &CertAuthority,
    existing_pem: &str,
    usages: &[Usage],
    validity: &Validity,
    what: &str,
) -> Result<CertAndKey, RenewError> {
    let old = parse_cert_pem(existing_pem, what)?;
    if old.is_ca {
        return Err(RenewError::IsCa { what: what.into() });
    }
    let ca_info = parse_cert_pem(&ca.cert_pem, "CA")?;
    if old.issuer_cn != ca_info.subject_cn {
        return Err(RenewError::OtherIssuer {
            what: what.into(),
            found: old.issuer_cn,
            expected: ca_info.subject_cn,
        });
    }
    let req = LeafRequest {
        common_name: old.subject_cn,
        organizations: old.organizations,
        usages: usages.to_vec(),
        sans: old.sans,
    };
    ca.issue(&req, validity)
        .map_err(|source| RenewError::Issue {
            what: what.into(),
            source,
        })
}

/// Renews `<dir>/<spec.base>.{crt,key}` with `ca` (the spec's issuer). Both files are written to temp
/// files first and then renamed, key before certificate, so a reader never sees a half-written file.
pub fn renew_cert(
    dir: &Path,
    spec: &CertSpec,
    ca: &CertAuthority,
    validity: &Validity,
) -> Result<CertAndKey, RenewError> {
    let crt = dir.join(spec.cert_file());
    let existing = read_string(&crt)?;
    let pair = reissue(
        ca,
        &existing,
        spec.usages,
        validity,
        &crt.display().to_string(),
    )?;
    write_atomic(
        &dir.join(spec.key_file()),
        pair.key_pem.as_bytes(),
        SECRET_MODE,
    )?;
    write_atomic(&crt, pair.cert_pem.as_bytes(), PUBLIC_MODE)?;
    Ok(pair)
}

/// Renews the client certificate embedded in the kubeconfig at `path`: same user (CN) and groups (O),
/// same server, cluster and context names; only the certificate and key change. Written atomically, 0600.
pub fn renew_kubeconfig(
    path: &Path,
    ca: &CertAuthority,
    validity: &Validity,
) -> Result<CertAndKey, RenewError> {
    let mut kc = Kubeconfig::from_yaml(&read_string(path)?)?;
    let what = path.display().to_string();
    let pair = reissue(
        ca,
        &kc.client_cert_pem()?,
        &[Usage::Client],
        validity,
        &what,
    )?;
    let user = kc
        .users
        .first_mut()
        .ok_or(KubeconfigError::Missing("users"))?;
    let new = Kubeconfig::client_cert_user(&pair.cert_pem, &pair.key_pem);
    user.user.client_certificate_data = new.client_certificate_data;
    user.user.client_key_data = new.client_key_data;
    write_atomic(path, kc.to_yaml()?.as_bytes(), SECRET_MODE)?;
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ensure::{ensure_tree, load_ca};
    use crate::expiry::{read_cert, spki_der};
    use crate::kubeconfig::{ensure_kubeconfig, read_kubeconfig, KubeconfigKind};
    use crate::tree::{spec, TreeParams};
    use std::os::unix::fs::PermissionsExt;

    fn serial(pem: &str) -> Vec<u8> {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let der = crate::expiry::first_cert_der(pem, "t").unwrap();
        let (_, c) = X509Certificate::from_der(&der).unwrap();
        c.raw_serial().to_vec()
    }

    /// The certificate's signature verifies with the CA's public key.
    fn signed_by(leaf_pem: &str, ca_pem: &str) {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let leaf_der = crate::expiry::first_cert_der(leaf_pem, "leaf").unwrap();
        let ca_der = crate::expiry::first_cert_der(ca_pem, "ca").unwrap();
        let (_, leaf) = X509Certificate::from_der(&leaf_der).unwrap();
        let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
        assert_eq!(leaf.issuer(), ca.subject());
        leaf.verify_signature(Some(ca.public_key())).unwrap();
    }

    fn tree() -> (tempfile::TempDir, TreeParams) {
        let dir = tempfile::tempdir().unwrap();
        let mut p = TreeParams::new("cp1");
        p.host_addresses = vec!["10.0.0.5".into()];
        p.control_plane_endpoint = Some("k8s.example:6443".into());
        p.validity = Validity::from_days(None, Some(10));
        ensure_tree(dir.path(), &p).unwrap();
        (dir, p)
    }

    #[test]
    fn a_renewed_leaf_keeps_subject_and_sans_and_the_ca_is_untouched() {
        let (dir, _) = tree();
        let d = dir.path();
        let api = spec("apiserver").unwrap();
        let before_pem = std::fs::read_to_string(d.join("apiserver.crt")).unwrap();
        let before = read_cert(&d.join("apiserver.crt")).unwrap();
        let ca_before = std::fs::read(d.join("ca.crt")).unwrap();
        let ca_key_before = std::fs::read(d.join("ca.key")).unwrap();
        let old_key = std::fs::read(d.join("apiserver.key")).unwrap();

        let ca = load_ca(d, spec("ca").unwrap()).unwrap();
        renew_cert(d, api, &ca, &Validity::default()).unwrap();

        let after_pem = std::fs::read_to_string(d.join("apiserver.crt")).unwrap();
        let after = read_cert(&d.join("apiserver.crt")).unwrap();
        assert_eq!(after.subject_cn, before.subject_cn);
        assert_eq!(after.organizations, before.organizations);
        assert_eq!(after.sans, before.sans);
        assert!(after.sans.contains(&"k8s.example".to_string()));
        assert_eq!(after.issuer_cn, "kubernetes");
        signed_by(&after_pem, &String::from_utf8(ca_before.clone()).unwrap());
        assert_ne!(serial(&after_pem), serial(&before_pem));
        // 10 days before, the default year now.
        assert!(after.not_after - before.not_after > time::Duration::days(300));
        assert_ne!(std::fs::read(d.join("apiserver.key")).unwrap(), old_key);
        assert_eq!(std::fs::read(d.join("ca.crt")).unwrap(), ca_before);
        assert_eq!(std::fs::read(d.join("ca.key")).unwrap(), ca_key_before);
        let mode = std::fs::metadata(d.join("apiserver.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // The new key belongs to the new certificate.
        let key =
            rcgen::KeyPair::from_pem(&std::fs::read_to_string(d.join("apiserver.key")).unwrap())
                .unwrap();
        assert_eq!(
            spki_der(&after_pem, "t").unwrap(),
            rcgen::PublicKeyData::subject_public_key_info(&key)
        );
    }

    #[test]
    fn store_certs_renew_with_the_store_ca_and_refuse_another_ca() {
        let (dir, _) = tree();
        let d = dir.path();
        let store_ca = load_ca(d, spec("store-ca").unwrap()).unwrap();
        let peer = spec("store-peer").unwrap();
        renew_cert(d, peer, &store_ca, &Validity::default()).unwrap();
        assert_eq!(
            read_cert(&d.join("store/peer.crt")).unwrap().subject_cn,
            "cp1"
        );

        let cluster_ca = load_ca(d, spec("ca").unwrap()).unwrap();
        let err = renew_cert(d, peer, &cluster_ca, &Validity::default()).unwrap_err();
        assert!(matches!(err, RenewError::OtherIssuer { .. }), "{err}");
    }

    #[test]
    fn a_ca_is_never_renewed() {
        let (dir, _) = tree();
        let d = dir.path();
        let ca = load_ca(d, spec("ca").unwrap()).unwrap();
        let err = renew_cert(d, spec("ca").unwrap(), &ca, &Validity::default()).unwrap_err();
        assert!(matches!(err, RenewError::IsCa { .. }), "{err}");
    }

    #[test]
    fn a_renewed_kubeconfig_keeps_user_server_and_context() {
        let (dir, _) = tree();
        let d = dir.path();
        let ca = load_ca(d, spec("ca").unwrap()).unwrap();
        let short = Validity::from_days(None, Some(5));
        ensure_kubeconfig(
            d,
            &ca,
            &KubeconfigKind::Admin,
            "c",
            "https://a:6443",
            &short,
        )
        .unwrap();
        let path = d.join("admin.conf");
        let before = read_kubeconfig(&path).unwrap();
        renew_kubeconfig(&path, &ca, &Validity::default()).unwrap();
        let after = read_kubeconfig(&path).unwrap();
        assert_eq!(after.server().unwrap(), "https://a:6443");
        assert_eq!(after.current_context, before.current_context);
        assert_eq!(after.users[0].name, before.users[0].name);
        let (old, new) = (
            parse_cert_pem(&before.client_cert_pem().unwrap(), "old").unwrap(),
            parse_cert_pem(&after.client_cert_pem().unwrap(), "new").unwrap(),
        );
        assert_eq!(new.subject_cn, "kubernetes-admin");
        assert_eq!(new.organizations, old.organizations);
        assert!(new.not_after > old.not_after);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
