//! `spec.store.external` (kubeadm's external etcd): how kiln reaches the store — kiln-store on the
//! controllers or the operator's etcd cluster — and phase `external-etcd`, the preflight of the
//! endpoints with the given certificates plus the copies of those files for the controllers.
//!
//! The copies live in each controller's PKI tree in the state directory (`etcd/ca.crt`,
//! `apiserver-etcd-client.{crt,key}`, kubeadm's names under its pki dir), so `push` installs them under
//! /etc/kiln/pki with the key at 0600, `kiln reset` removes them with /etc/kiln, and bundles carry them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use super::{Outcome, KILN_ETC};
use crate::bootstrap::{BootstrapError, Context};
use crate::config::external_etcd::{endpoint_host_port, ExternalEtcd};
use crate::config::ClusterFile;

pub const PHASE: &str = "external-etcd";

/// The copies, relative to a controller's PKI directory (state directory and /etc/kiln/pki alike).
pub const CA: &str = "etcd/ca.crt";
pub const CERT: &str = "apiserver-etcd-client.crt";
pub const KEY: &str = "apiserver-etcd-client.key";

/// Bound on connecting to an endpoint and on each call.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StoreAccessError {
    #[error("reading {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{endpoint}: {message}")]
    Endpoint { endpoint: String, message: String },
}

/// One way into the store: an endpoint and the TLS material a client presents there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreAccess {
    /// Who answers there, as reports name it: a controller's name, or the endpoint's `host:port`.
    pub name: String,
    pub endpoint: String,
    /// The server name the endpoint's certificate is checked against.
    pub domain: String,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl StoreAccess {
    /// kiln-store on a controller (`addr`:2379) with the store CA and the API server's store client
    /// certificate under `pki` (the operator's per-host PKI directory, or /etc/kiln/pki on the host).
    pub fn kiln_store(name: &str, addr: &str, pki: &Path) -> StoreAccess {
        let host = if addr.contains(':') {
            format!("[{addr}]")
        } else {
            addr.to_string()
        };
        StoreAccess {
            name: name.to_string(),
            endpoint: format!("https://{host}:2379"),
            domain: addr.to_string(),
            ca: pki.join("store/ca.crt"),
            cert: pki.join("apiserver-store-client.crt"),
            key: pki.join("apiserver-store-client.key"),
        }
    }

    /// Each endpoint of an external etcd with the given files.
    pub fn external(ext: &ExternalEtcd, ca: &Path, cert: &Path, key: &Path) -> Vec<StoreAccess> {
        ext.endpoints
            .iter()
            .map(|e| {
                let (host, port) = endpoint_host_port(e).unwrap_or((e.as_str(), 0));
                StoreAccess {
                    name: if host.contains(':') {
                        format!("[{host}]:{port}")
                    } else {
                        format!("{host}:{port}")
                    },
                    endpoint: e.trim_end_matches('/').to_string(),
                    domain: host.to_string(),
                    ca: ca.to_path_buf(),
                    cert: cert.to_path_buf(),
                    key: key.to_path_buf(),
                }
            })
            .collect()
    }

    /// The external etcd's endpoints with the operator's files (cluster.yaml's paths, resolved).
    pub fn external_from_operator(cluster: &ClusterFile) -> Option<Vec<StoreAccess>> {
        let ext = cluster.config.spec.store.external.as_ref()?;
        Some(Self::external(
            ext,
            &cluster.resolve(&ext.ca_file),
            &cluster.resolve(&ext.cert_file),
            &cluster.resolve(&ext.key_file),
        ))
    }

    /// The external etcd's endpoints with a controller's copies under `pki` (/etc/kiln/pki there).
    pub fn external_from_pki(ext: &ExternalEtcd, pki: &Path) -> Vec<StoreAccess> {
        Self::external(ext, &pki.join(CA), &pki.join(CERT), &pki.join(KEY))
    }

    /// The store of this cluster as the operator reaches it: the external endpoints, else every
    /// controller's kiln-store member.
    pub fn for_cluster(ctx: &Context) -> Vec<StoreAccess> {
        Self::external_from_operator(&ctx.cluster).unwrap_or_else(|| {
            ctx.cluster
                .config
                .controllers()
                .map(|h| Self::kiln_store(&h.name, &h.node_address(), &ctx.pki_dir(&h.name)))
                .collect()
        })
    }

    fn read(&self, what: &'static str, p: &Path) -> Result<Vec<u8>, StoreAccessError> {
        std::fs::read(p).map_err(|source| StoreAccessError::Read {
            what,
            path: p.to_path_buf(),
            source,
        })
    }

    /// etcd-client's TLS options for this access.
    pub fn tls(&self) -> Result<TlsOptions, StoreAccessError> {
        Ok(TlsOptions::new()
            .domain_name(self.domain.clone())
            .ca_certificate(Certificate::from_pem(self.read("the CA", &self.ca)?))
            .identity(Identity::from_pem(
                self.read("the client certificate", &self.cert)?,
                self.read("the client key", &self.key)?,
            )))
    }

    /// A client bounded by `timeout` per call (and for connecting).
    pub async fn connect(&self, timeout: Duration) -> Result<Client, StoreAccessError> {
        let opts = ConnectOptions::new()
            .with_tls(self.tls()?)
            .with_connect_timeout(timeout.min(CALL_TIMEOUT))
            .with_timeout(timeout);
        let fail = |message: String| StoreAccessError::Endpoint {
            endpoint: self.endpoint.clone(),
            message,
        };
        tokio::time::timeout(
            timeout.min(CALL_TIMEOUT) + Duration::from_secs(1),
            Client::connect([self.endpoint.clone()], Some(opts)),
        )
        .await
        .map_err(|_| fail(format!("no answer within {:?}", timeout.min(CALL_TIMEOUT))))?
        .map_err(|e| fail(e.to_string()))
    }
}

/// Preflight checks that do not apply with an external etcd (kubeadm leaves its etcd port and data
/// directory checks out then): kiln-store's ports, which an etcd member on the controller may hold.
pub fn skipped_checks(cfg: &crate::config::ClusterConfig) -> &'static [&'static str] {
    if cfg.spec.store.external.is_some() {
        &["Port-2379", "Port-2380"]
    } else {
        &[]
    }
}

/// What one endpoint says of itself (Maintenance Status), or why it said nothing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EndpointHealth {
    pub endpoint: String,
    pub healthy: bool,
    /// `etcd 3.4.23, leader 8e9e05c52164694d, db 20 kB, revision 412`, or the error.
    pub detail: String,
}

/// Status and a linearizable read on every endpoint (what `etcdctl endpoint health/status` do): a
/// member that answers Status but cannot reach a quorum is not healthy.
pub async fn health(access: &[StoreAccess]) -> Vec<EndpointHealth> {
    let checks = access.iter().map(|a| async move {
        let r: Result<String, String> = async {
            let mut c = a.connect(CALL_TIMEOUT).await.map_err(|e| e.to_string())?;
            let s = tokio::time::timeout(CALL_TIMEOUT, c.status())
                .await
                .map_err(|_| format!("Status: no answer within {CALL_TIMEOUT:?}"))?
                .map_err(|e| e.to_string())?;
            let g = tokio::time::timeout(CALL_TIMEOUT, c.get("health", None))
                .await
                .map_err(|_| format!("a linearizable read: no answer within {CALL_TIMEOUT:?}"))?
                .map_err(|e| format!("a linearizable read failed (no quorum?): {e}"))?;
            if s.leader() == 0 {
                return Err("the member knows no leader".into());
            }
            Ok(format!(
                "etcd {}, leader {:x}, db {} bytes, revision {}",
                s.version(),
                s.leader(),
                s.db_size(),
                g.header().map_or(0, |h| h.revision())
            ))
        }
        .await;
        match r {
            Ok(detail) => EndpointHealth {
                endpoint: a.endpoint.clone(),
                healthy: true,
                detail,
            },
            Err(detail) => EndpointHealth {
                endpoint: a.endpoint.clone(),
                healthy: false,
                detail,
            },
        }
    });
    futures::future::join_all(checks).await
}

/// The API server's `--etcd-*` flags' values for the manifest: the external endpoints and the
/// copies under /etc/kiln/pki, else the host's own kiln-store member.
pub fn insert_apiserver_context(ctx: &Context, c: &mut tera::Context) {
    let pki = format!("{KILN_ETC}/pki");
    let (servers, ca, cert, key) = match &ctx.cluster.config.spec.store.external {
        Some(ext) => (
            ext.endpoints
                .iter()
                .map(|e| e.trim_end_matches('/'))
                .collect::<Vec<_>>()
                .join(","),
            format!("{pki}/{CA}"),
            format!("{pki}/{CERT}"),
            format!("{pki}/{KEY}"),
        ),
        None => (
            "https://127.0.0.1:2379".to_string(),
            format!("{pki}/store/ca.crt"),
            format!("{pki}/apiserver-store-client.crt"),
            format!("{pki}/apiserver-store-client.key"),
        ),
    };
    c.insert("etcd_servers", &servers);
    c.insert("etcd_cafile", &ca);
    c.insert("etcd_certfile", &cert);
    c.insert("etcd_keyfile", &key);
}

/// Checks done before the endpoints are asked: each file is there and is PEM of the right kind, so
/// the error names the field and the file rather than a TLS handshake failure.
fn check_files(cluster: &ClusterFile, ext: &ExternalEtcd) -> Result<(), String> {
    for (field, p) in ext.files() {
        let path = cluster.resolve(p);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "spec.store.external.{field}: cannot read {}: {e}",
                path.display()
            )
        })?;
        let want = if field == "keyFile" {
            "PRIVATE KEY-----"
        } else {
            "-----BEGIN CERTIFICATE-----"
        };
        if !text.contains(want) {
            return Err(format!(
                "spec.store.external.{field}: {} holds no PEM {}",
                path.display(),
                if field == "keyFile" {
                    "private key"
                } else {
                    "certificate"
                }
            ));
        }
    }
    Ok(())
}

/// Phase external-etcd: the files are there, every endpoint answers Status and a linearizable read
/// with them (an endpoint that does not is an error: kiln-apiserver would be pointed at it), and each
/// controller's PKI tree gets the copies.
pub(super) async fn external_etcd(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let fail = |m: String| BootstrapError::phase(PHASE, "local", m);
    let Some(ext) = &ctx.cluster.config.spec.store.external else {
        return Ok(Outcome::Skipped("spec.store.external is not set".into()));
    };
    check_files(&ctx.cluster, ext).map_err(fail)?;
    let access = StoreAccess::external_from_operator(&ctx.cluster).unwrap_or_default();
    let report = health(&access).await;
    let bad: Vec<String> = report
        .iter()
        .filter(|h| !h.healthy)
        .map(|h| format!("{}: {}", h.endpoint, h.detail))
        .collect();
    if !bad.is_empty() {
        return Err(fail(format!(
            "the external etcd does not answer with spec.store.external's certificates: {}",
            bad.join("; ")
        )));
    }
    let versions = report
        .first()
        .map(|h| h.detail.split(',').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    if ctx.plan.is_some() {
        return Ok(Outcome::Done(format!(
            "{} endpoint(s) healthy ({versions}); would copy the CA and client certificate",
            report.len()
        )));
    }
    let mut copied = 0;
    for h in ctx.cluster.config.controllers() {
        let dir = ctx.pki_dir(&h.name);
        for ((_, from), (to, mode)) in
            ext.files()
                .into_iter()
                .zip([(CA, 0o644), (CERT, 0o644), (KEY, 0o600)])
        {
            let from = ctx.cluster.resolve(from);
            let to = dir.join(to);
            let data = std::fs::read(&from).map_err(|source| BootstrapError::Io {
                what: "reading",
                path: from.clone(),
                source,
            })?;
            if std::fs::read(&to).ok().as_deref() == Some(&data[..]) {
                continue;
            }
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(|source| BootstrapError::Io {
                    what: "creating",
                    path: parent.to_path_buf(),
                    source,
                })?;
            }
            kiln_pki::files::write_atomic(&to, &data, mode).map_err(super::pki::pki_err)?;
            copied += 1;
        }
    }
    let health = format!("{} endpoint(s) healthy ({versions})", report.len());
    Ok(if copied == 0 {
        Outcome::Skipped(format!("{health}; certificates up to date"))
    } else {
        Outcome::Done(format!("{health}; {copied} certificate file(s) copied"))
    })
}

/// Phase external-etcd-data (reset): kiln leaves the external etcd's data alone, as kubeadm's reset
/// does ("manually reset etcd"); it says so and how.
pub(super) fn external_etcd_data(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let Some(ext) = &ctx.cluster.config.spec.store.external else {
        return Ok(Outcome::Skipped("spec.store.external is not set".into()));
    };
    Ok(Outcome::Skipped(format!(
        "the external etcd ({}) is not kiln's: its data stays; to reuse it for a new cluster, \
         delete the API's keys there (etcdctl del --prefix /registry/)",
        ext.endpoints.join(",")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_name_their_endpoints_and_files() {
        let ext = ExternalEtcd {
            endpoints: vec![
                "https://10.250.0.12:2379/".into(),
                "https://[fd00::3]:2379".into(),
            ],
            ca_file: "ca".into(),
            cert_file: "c".into(),
            key_file: "k".into(),
        };
        let a = StoreAccess::external_from_pki(&ext, Path::new("/etc/kiln/pki"));
        assert_eq!(a[0].endpoint, "https://10.250.0.12:2379");
        assert_eq!(a[0].domain, "10.250.0.12");
        assert_eq!(a[0].name, "10.250.0.12:2379");
        assert_eq!(
            a[0].key,
            PathBuf::from("/etc/kiln/pki/apiserver-etcd-client.key")
        );
        assert_eq!(a[1].domain, "fd00::3");
        assert_eq!(a[1].name, "[fd00::3]:2379");
        let k = StoreAccess::kiln_store("host1", "10.250.0.11", Path::new("/p"));
        assert_eq!(k.endpoint, "https://10.250.0.11:2379");
        assert_eq!(k.ca, PathBuf::from("/p/store/ca.crt"));
    }

    #[test]
    fn an_endpoint_that_does_not_answer_is_unhealthy_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (crt, key) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        std::fs::write(&crt, ca.cert.pem()).unwrap();
        std::fs::write(&key, ca.signing_key.serialize_pem()).unwrap();
        // A port nothing listens on: refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ext = ExternalEtcd {
            endpoints: vec![format!("https://127.0.0.1:{port}")],
            ca_file: crt.clone(),
            cert_file: crt.clone(),
            key_file: key.clone(),
        };
        let access = StoreAccess::external(&ext, &crt, &crt, &key);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let h = rt.block_on(health(&access));
        assert_eq!(h.len(), 1);
        assert!(!h[0].healthy);
        assert_eq!(h[0].endpoint, format!("https://127.0.0.1:{port}"));
        assert!(!h[0].detail.is_empty());
    }
}
