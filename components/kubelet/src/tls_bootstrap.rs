//! TLS bootstrap and client-certificate rotation, as the upstream kubelet does them.
//!
//! A node that joins has no client certificate yet, only `bootstrap-kubelet.conf`: the cluster CA (so the
//! API server is verified from the first byte — no insecure discovery) and a short-lived bootstrap token.
//! With it the kubelet makes a key, sends a CertificateSigningRequest for `system:node:<name>` /
//! `system:nodes` to the `kubernetes.io/kube-apiserver-client-kubelet` signer, waits for the
//! controller-manager to approve and sign it, and writes `kubelet.conf` with the key and certificate
//! embedded (atomically, 0600). From then on the token is not needed. Before the certificate expires
//! ([`rotation_due`]: 80 % of its lifetime) the kubelet asks for a new one with its current identity
//! (auto-approved as `selfnodeclient`) and swaps `kubelet.conf` in place.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kiln_pki::Kubeconfig;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig as KubeKubeconfig};
use kube::{Api, Client};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use time::OffsetDateTime;

/// The signer of kubelet client certificates (auto-approved for bootstrap tokens and renewals).
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(
        "{kubeconfig} does not exist and no --bootstrap-kubeconfig was given: this node has no credentials"
    )]
    NoCredentials { kubeconfig: PathBuf },
    #[error("reading {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    BadBootstrapConfig { path: PathBuf, message: String },
    #[error(
        "the API server rejected bootstrap token {token_id} from {path} (expired or deleted?): \
         mint a new one with `kiln token create`, or re-run `kiln join`, which mints one"
    )]
    TokenRejected { token_id: String, path: PathBuf },
    #[error("creating the key or CSR for {node}: {source}")]
    Csr {
        node: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("certificate signing request {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("certificate signing request {name} was {verdict}: {message}")]
    Refused {
        name: String,
        verdict: String,
        message: String,
    },
    #[error(
        "certificate signing request {name} was not signed within {waited:?} \
         (is kiln-controller-manager running with --cluster-signing-cert-file?)"
    )]
    NotSigned { name: String, waited: Duration },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: kiln_pki::files::FileError,
    },
}

/// Where the kubelet's credentials live.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub kubeconfig: PathBuf,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub node_name: String,
    /// How long to wait for the CSR to be signed before starting over with a new one.
    pub sign_timeout: Duration,
}

/// What [`ensure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// `kubelet.conf` exists with a certificate that is still valid.
    Present,
    /// A certificate was obtained with the bootstrap token and `kubelet.conf` written.
    Bootstrapped { csr: String },
}

/// True when a certificate valid from `not_before` to `not_after` should be renewed at `now`: past 80 % of
/// its lifetime (upstream rotates between 70 and 90 %).
pub fn rotation_due(
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    now: OffsetDateTime,
) -> bool {
    let life = not_after - not_before;
    now >= not_before + life * 0.8
}

/// The client certificate validity of an existing `kubelet.conf`, or None when it has none.
pub fn client_cert_window(path: &Path) -> Option<(OffsetDateTime, OffsetDateTime)> {
    let text = std::fs::read_to_string(path).ok()?;
    let kc = Kubeconfig::from_yaml(&text).ok()?;
    let info = kiln_pki::parse_cert_pem(&kc.client_cert_pem().ok()?, "kubelet.conf").ok()?;
    Some((info.not_before, info.not_after))
}

/// The subject the kubelet asks for: CN `system:node:<name>`, O `system:nodes`.
pub fn node_csr(node: &str) -> Result<(String, String), BootstrapError> {
    let err = |source| BootstrapError::Csr {
        node: node.to_string(),
        source,
    };
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "system:nodes");
    dn.push(DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    let csr = params.serialize_request(&key).map_err(err)?;
    Ok((csr.pem().map_err(err)?, key.serialize_pem()))
}

/// Makes sure `kubelet.conf` holds a valid client certificate, bootstrapping one when it does not.
pub async fn ensure(creds: &Credentials) -> Result<Ensured, BootstrapError> {
    if let Some((_, not_after)) = client_cert_window(&creds.kubeconfig) {
        if not_after > OffsetDateTime::now_utc() {
            return Ok(Ensured::Present);
        }
        tracing::warn!(kubeconfig = %creds.kubeconfig.display(), "client certificate expired; bootstrapping again");
    } else if creds.kubeconfig.exists() && creds.bootstrap_kubeconfig.is_none() {
        // A kubeconfig without an embedded client certificate (e.g. token or file references): use it as is.
        return Ok(Ensured::Present);
    }
    let Some(bootstrap) = &creds.bootstrap_kubeconfig else {
        return Err(BootstrapError::NoCredentials {
            kubeconfig: creds.kubeconfig.clone(),
        });
    };
    let bootstrap_kc = read_kubeconfig(bootstrap)?;
    let token = bootstrap_kc
        .users
        .first()
        .and_then(|u| u.user.token.clone())
        .ok_or_else(|| BootstrapError::BadBootstrapConfig {
            path: bootstrap.clone(),
            message: "no bootstrap token in users[0].user.token".into(),
        })?;
    let ca_pem = bootstrap_kc
        .ca_pem()
        .ok()
        .filter(|p| p.contains("BEGIN CERTIFICATE"))
        .ok_or_else(|| BootstrapError::BadBootstrapConfig {
            path: bootstrap.clone(),
            message: "no certificate-authority-data: kiln never talks to an unverified API server"
                .into(),
        })?;
    let client = client_from(bootstrap).await?;
    let token_id = token.split('.').next().unwrap_or_default().to_string();
    let (cert_pem, key_pem, csr) =
        request_certificate(&client, creds)
            .await
            .map_err(|e| match e {
                BootstrapError::Api {
                    source: kube::Error::Api(ref r),
                    ..
                } if r.code == 401 => BootstrapError::TokenRejected {
                    token_id: token_id.clone(),
                    path: bootstrap.clone(),
                },
                e => e,
            })?;
    let server = bootstrap_kc
        .server()
        .map_err(|e| BootstrapError::BadBootstrapConfig {
            path: bootstrap.clone(),
            message: e.to_string(),
        })?
        .to_string();
    write_kubeconfig(creds, &bootstrap_kc, &server, &ca_pem, &cert_pem, &key_pem)?;
    tracing::info!(csr = %csr, kubeconfig = %creds.kubeconfig.display(), "TLS bootstrap done: client certificate issued");
    Ok(Ensured::Bootstrapped { csr })
}

/// Renews the client certificate with the node's current identity when [`rotation_due`]. Returns
/// whether `kubelet.conf` was replaced.
pub async fn rotate_if_due(creds: &Credentials) -> Result<bool, BootstrapError> {
    let Some((not_before, not_after)) = client_cert_window(&creds.kubeconfig) else {
        return Ok(false);
    };
    if !rotation_due(not_before, not_after, OffsetDateTime::now_utc()) {
        return Ok(false);
    }
    renew(creds).await?;
    Ok(true)
}

/// Replaces the client certificate of `kubelet.conf` with a new one requested with the node's current
/// identity (a `selfnodeclient` renewal). Returns the CSR's name.
pub async fn renew(creds: &Credentials) -> Result<String, BootstrapError> {
    let current = read_kubeconfig(&creds.kubeconfig)?;
    let client = client_from(&creds.kubeconfig).await?;
    let (cert_pem, key_pem, csr) = request_certificate(&client, creds).await?;
    let server = current
        .server()
        .map_err(|e| BootstrapError::BadBootstrapConfig {
            path: creds.kubeconfig.clone(),
            message: e.to_string(),
        })?
        .to_string();
    let ca_pem = current
        .ca_pem()
        .map_err(|e| BootstrapError::BadBootstrapConfig {
            path: creds.kubeconfig.clone(),
            message: e.to_string(),
        })?;
    write_kubeconfig(creds, &current, &server, &ca_pem, &cert_pem, &key_pem)?;
    tracing::info!(csr = %csr, "client certificate rotated");
    Ok(csr)
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, BootstrapError> {
    let text = std::fs::read_to_string(path).map_err(|e| BootstrapError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Kubeconfig::from_yaml(&text).map_err(|e| BootstrapError::BadBootstrapConfig {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

async fn client_from(path: &Path) -> Result<Client, BootstrapError> {
    let bad = |message: String| BootstrapError::BadBootstrapConfig {
        path: path.to_path_buf(),
        message,
    };
    let kc = KubeKubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    Client::try_from(config).map_err(|e| bad(e.to_string()))
}

fn csr_object(name: &str, csr_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: KUBELET_CLIENT_SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        status: None,
    }
}

/// Sends a CSR and waits for its certificate: (cert PEM, key PEM, CSR name).
async fn request_certificate(
    client: &Client,
    creds: &Credentials,
) -> Result<(String, String, String), BootstrapError> {
    let (csr_pem, key_pem) = node_csr(&creds.node_name)?;
    let name = format!("node-csr-{}-{:08x}", creds.node_name, rand_suffix());
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let api_err = |source| BootstrapError::Api {
        name: name.clone(),
        source,
    };
    api.create(&PostParams::default(), &csr_object(&name, &csr_pem))
        .await
        .map_err(api_err)?;
    tracing::info!(csr = %name, signer = KUBELET_CLIENT_SIGNER, "certificate signing request sent; waiting for it to be signed");
    let started = tokio::time::Instant::now();
    loop {
        let got = api.get(&name).await.map_err(api_err)?;
        let status = got.status.unwrap_or_default();
        for c in status.conditions.unwrap_or_default() {
            if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
                return Err(BootstrapError::Refused {
                    name: name.clone(),
                    verdict: c.type_.to_lowercase(),
                    message: c.message.or(c.reason).unwrap_or_default(),
                });
            }
        }
        if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
            let cert_pem = String::from_utf8_lossy(&cert.0).into_owned();
            return Ok((cert_pem, key_pem, name));
        }
        if started.elapsed() >= creds.sign_timeout {
            return Err(BootstrapError::NotSigned {
                name,
                waited: creds.sign_timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn rand_suffix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // Unique enough for a name: time and PID; the CSR's content is what matters.
    t.subsec_nanos() ^ std::process::id().rotate_left(16)
}

fn write_kubeconfig(
    creds: &Credentials,
    template: &Kubeconfig,
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<(), BootstrapError> {
    let cluster = template
        .clusters
        .first()
        .map(|c| c.name.clone())
        .unwrap_or_else(|| "kiln".into());
    let user = format!("system:node:{}", creds.node_name);
    let kc = Kubeconfig::new(
        &cluster,
        server,
        ca_pem,
        &user,
        Kubeconfig::client_cert_user(cert_pem, key_pem),
    );
    let yaml = kc
        .to_yaml()
        .map_err(|e| BootstrapError::BadBootstrapConfig {
            path: creds.kubeconfig.clone(),
            message: e.to_string(),
        })?;
    kiln_pki::files::write_atomic(
        &creds.kubeconfig,
        yaml.as_bytes(),
        kiln_pki::files::SECRET_MODE,
    )
    .map_err(|source| BootstrapError::Write {
        path: creds.kubeconfig.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::FromDer;

    #[test]
    fn rotation_is_due_after_eighty_percent() {
        let nb = OffsetDateTime::UNIX_EPOCH;
        let na = nb + time::Duration::days(100);
        assert!(!rotation_due(nb, na, nb + time::Duration::days(79)));
        assert!(rotation_due(nb, na, nb + time::Duration::days(80)));
        assert!(rotation_due(nb, na, na + time::Duration::days(1)));
    }

    #[test]
    fn csr_names_the_node_and_group() {
        let (pem, key) = node_csr("host2").unwrap();
        assert!(key.contains("PRIVATE KEY"));
        let der = rustls_pemfile_like(&pem);
        let (_, req) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        let subject = req.certification_request_info.subject.to_string();
        assert!(subject.contains("CN=system:node:host2"), "{subject}");
        assert!(subject.contains("O=system:nodes"), "{subject}");
        req.verify_signature().unwrap();
    }

    fn rustls_pemfile_like(pem: &str) -> Vec<u8> {
        use base64::Engine as _;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    }

    #[tokio::test]
    async fn missing_kubeconfig_without_bootstrap_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let creds = Credentials {
            kubeconfig: dir.path().join("kubelet.conf"),
            bootstrap_kubeconfig: None,
            node_name: "n".into(),
            sign_timeout: Duration::from_secs(1),
        };
        let e = ensure(&creds).await.unwrap_err().to_string();
        assert!(e.contains("kubelet.conf does not exist"), "{e}");
    }

    #[tokio::test]
    async fn bootstrap_config_without_ca_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bootstrap-kubelet.conf");
        let mut kc = Kubeconfig::new(
            "kiln",
            "https://127.0.0.1:1",
            "",
            "tls-bootstrap-token-user",
            kiln_pki::kubeconfig::User {
                token: Some("abcdef.0123456789abcdef".into()),
                ..Default::default()
            },
        );
        kc.clusters[0].cluster.certificate_authority_data = String::new();
        std::fs::write(&path, kc.to_yaml().unwrap()).unwrap();
        let creds = Credentials {
            kubeconfig: dir.path().join("kubelet.conf"),
            bootstrap_kubeconfig: Some(path),
            node_name: "n".into(),
            sign_timeout: Duration::from_secs(1),
        };
        let e = ensure(&creds).await.unwrap_err().to_string();
        assert!(e.contains("no certificate-authority-data"), "{e}");
    }
}
