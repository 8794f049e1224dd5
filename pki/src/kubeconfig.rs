//! Standard kubeconfig files with embedded certificate data, so `kubectl --kubeconfig /etc/kiln/admin.conf`
//! and kube-rs read them as they are.

use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::files::{read_string, write_atomic, FileError, SECRET_MODE};
use crate::issue::{CertAuthority, IssueError, LeafRequest};
use crate::tree::Usage;
use crate::validity::Validity;

#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("issuing the client certificate for {user}: {source}")]
    Issue {
        user: String,
        #[source]
        source: IssueError,
    },
    #[error("kubeconfig YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
    #[error("kubeconfig has no {0}")]
    Missing(&'static str),
    #[error("base64 in kubeconfig field {0}: {1}")]
    Base64(&'static str, base64::DecodeError),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub clusters: Vec<NamedCluster>,
    pub contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    pub current_context: String,
    #[serde(default)]
    pub preferences: serde_json::Map<String, serde_json::Value>,
    pub users: Vec<NamedUser>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCluster {
    pub name: String,
    pub cluster: Cluster,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    #[serde(rename = "certificate-authority-data")]
    pub certificate_authority_data: String,
    pub server: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedContext {
    pub name: String,
    pub context: Context,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub cluster: String,
    pub user: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedUser {
    pub name: String,
    pub user: User,
}

/// A user with a client certificate, or a bearer token (bootstrap-kubelet.conf).
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct User {
    #[serde(
        rename = "client-certificate-data",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub client_certificate_data: Option<String>,
    #[serde(
        rename = "client-key-data",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub client_key_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub token: Option<String>,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("client_certificate_data", &self.client_certificate_data)
            .field(
                "client_key_data",
                &self.client_key_data.as_ref().map(|_| "<redacted>"),
            )
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Kubeconfig {
    /// A kubeconfig with one cluster, one user and one context.
    pub fn new(
        cluster_name: &str,
        server: &str,
        ca_pem: &str,
        user_name: &str,
        user: User,
    ) -> Self {
        let context = format!("{user_name}@{cluster_name}");
        Kubeconfig {
            api_version: "v1".into(),
            kind: "Config".into(),
            clusters: vec![NamedCluster {
                name: cluster_name.into(),
                cluster: Cluster {
                    certificate_authority_data: B64.encode(ca_pem),
                    server: server.into(),
                },
            }],
            contexts: vec![NamedContext {
                name: context.clone(),
                context: Context {
                    cluster: cluster_name.into(),
                    user: user_name.into(),
                },
            }],
            current_context: context,
            preferences: Default::default(),
            users: vec![NamedUser {
                name: user_name.into(),
                user,
            }],
        }
    }

    pub fn client_cert_user(cert_pem: &str, key_pem: &str) -> User {
        User {
            client_certificate_data: Some(B64.encode(cert_pem)),
            client_key_data: Some(B64.encode(key_pem)),
            token: None,
        }
    }

    pub fn to_yaml(&self) -> Result<String, KubeconfigError> {
        Ok(serde_norway::to_string(self)?)
    }

    pub fn from_yaml(text: &str) -> Result<Self, KubeconfigError> {
        Ok(serde_norway::from_str(text)?)
    }

    /// The server URL of the current context's cluster.
    pub fn server(&self) -> Result<&str, KubeconfigError> {
        Ok(&self.current_cluster()?.server)
    }

    fn current_cluster(&self) -> Result<&Cluster, KubeconfigError> {
        let ctx = self
            .contexts
            .iter()
            .find(|c| c.name == self.current_context)
            .ok_or(KubeconfigError::Missing("current context"))?;
        self.clusters
            .iter()
            .find(|c| c.name == ctx.context.cluster)
            .map(|c| &c.cluster)
            .ok_or(KubeconfigError::Missing("cluster of the current context"))
    }

    /// The decoded CA PEM of the current cluster.
    pub fn ca_pem(&self) -> Result<String, KubeconfigError> {
        let data = &self.current_cluster()?.certificate_authority_data;
        let bytes = B64
            .decode(data)
            .map_err(|e| KubeconfigError::Base64("certificate-authority-data", e))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The decoded client certificate PEM of the first user.
    pub fn client_cert_pem(&self) -> Result<String, KubeconfigError> {
        let data = self
            .users
            .first()
            .and_then(|u| u.user.client_certificate_data.as_ref())
            .ok_or(KubeconfigError::Missing("client-certificate-data"))?;
        let bytes = B64
            .decode(data)
            .map_err(|e| KubeconfigError::Base64("client-certificate-data", e))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// The kubeconfigs kiln writes, each a client identity (CN = user, O = groups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeconfigKind {
    Admin,
    Kubelet {
        node_name: String,
    },
    Scheduler,
    ControllerManager,
    /// kiln-proxy on every node (upstream's kube-proxy identity, bound to system:node-proxier).
    Proxy,
    /// kiln-dns on every node (bound to system:kiln-dns: list/watch Services and EndpointSlices).
    Dns,
}

impl KubeconfigKind {
    pub fn file_name(&self) -> &'static str {
        match self {
            KubeconfigKind::Admin => "admin.conf",
            KubeconfigKind::Kubelet { .. } => "kubelet.conf",
            KubeconfigKind::Scheduler => "scheduler.conf",
            KubeconfigKind::ControllerManager => "controller-manager.conf",
            KubeconfigKind::Proxy => "proxy.conf",
            KubeconfigKind::Dns => "dns.conf",
        }
    }

    pub fn user(&self) -> String {
        match self {
            KubeconfigKind::Admin => "kubernetes-admin".into(),
            KubeconfigKind::Kubelet { node_name } => format!("system:node:{node_name}"),
            KubeconfigKind::Scheduler => "system:kube-scheduler".into(),
            KubeconfigKind::ControllerManager => "system:kube-controller-manager".into(),
            KubeconfigKind::Proxy => "system:kube-proxy".into(),
            KubeconfigKind::Dns => "system:kiln-dns".into(),
        }
    }

    pub fn groups(&self) -> Vec<String> {
        match self {
            KubeconfigKind::Admin => vec!["system:masters".into()],
            KubeconfigKind::Kubelet { .. } => vec!["system:nodes".into()],
            KubeconfigKind::Scheduler
            | KubeconfigKind::ControllerManager
            | KubeconfigKind::Proxy
            | KubeconfigKind::Dns => {
                vec![]
            }
        }
    }
}

/// Issues a client certificate from `ca` for `kind` and wraps it in a kubeconfig.
pub fn build_kubeconfig(
    ca: &CertAuthority,
    kind: &KubeconfigKind,
    cluster_name: &str,
    server: &str,
    validity: &Validity,
) -> Result<Kubeconfig, KubeconfigError> {
    let user = kind.user();
    let req = LeafRequest {
        common_name: user.clone(),
        organizations: kind.groups(),
        usages: vec![Usage::Client],
        sans: vec![],
    };
    let pair = ca
        .issue(&req, validity)
        .map_err(|source| KubeconfigError::Issue {
            user: user.clone(),
            source,
        })?;
    Ok(Kubeconfig::new(
        cluster_name,
        server,
        &ca.cert_pem,
        &user,
        Kubeconfig::client_cert_user(&pair.cert_pem, &pair.key_pem),
    ))
}

/// Writes `<dir>/<kind file>` (0600) unless it exists. Returns true when it was created.
pub fn ensure_kubeconfig(
    dir: &Path,
    ca: &CertAuthority,
    kind: &KubeconfigKind,
    cluster_name: &str,
    server: &str,
    validity: &Validity,
) -> Result<bool, KubeconfigError> {
    let path = dir.join(kind.file_name());
    if path.exists() {
        return Ok(false);
    }
    let kc = build_kubeconfig(ca, kind, cluster_name, server, validity)?;
    write_atomic(&path, kc.to_yaml()?.as_bytes(), SECRET_MODE)?;
    Ok(true)
}

/// Reads a kubeconfig file.
pub fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
    Kubeconfig::from_yaml(&read_string(path)?)
}
