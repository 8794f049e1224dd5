//! The API objects a workload pod refers to — ConfigMaps, Secrets, service-account tokens, the cluster
//! CA — as a trait, so env resolution and volumes are tested with an in-memory fake; [`ApiObjects`] reads
//! them from the API server with the kubelet's own credentials (the Node authorizer lets it read them in
//! namespaces where its pods run).

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, PostParams};
use kube::Client;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ObjectError {
    #[error("{kind} {namespace}/{name}: {message}")]
    Api {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    #[error("this kubelet has no API client for pod objects")]
    NoClient,
}

/// Keys to bytes, as a ConfigMap's data + binaryData or a Secret's data.
pub type Payload = BTreeMap<String, Vec<u8>>;

/// A token issued by TokenRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    /// Unix seconds.
    pub expires_at: i64,
}

/// What a service-account token is requested for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFor<'a> {
    pub namespace: &'a str,
    pub service_account: &'a str,
    pub audience: Option<&'a str>,
    pub expiration_seconds: i64,
    pub pod_name: &'a str,
    pub pod_uid: &'a str,
}

#[async_trait]
pub trait PodObjects: Send + Sync {
    /// None: no such ConfigMap.
    async fn config_map(&self, namespace: &str, name: &str)
        -> Result<Option<Payload>, ObjectError>;
    /// None: no such Secret.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Payload>, ObjectError>;
    /// A Secret with its `type` (image pull secrets are read by type); None: no such Secret. Sources
    /// that do not know types report "" (no pull secret type matches it).
    async fn secret_with_type(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(String, Payload)>, ObjectError> {
        Ok(self
            .secret(namespace, name)
            .await?
            .map(|p| (String::new(), p)))
    }
    /// None: the API server does not issue tokens (no signing key) or the service account is missing.
    async fn token(&self, req: &TokenFor<'_>) -> Result<Option<IssuedToken>, ObjectError>;
    /// The cluster CA bundle (PEM) for `ca.crt` when the namespace has no kube-root-ca.crt ConfigMap.
    fn cluster_ca(&self) -> Option<Vec<u8>>;
    /// None: no such claim (persistentVolumeClaim and ephemeral volumes).
    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, ObjectError>;
    /// None: no such PersistentVolume.
    async fn persistent_volume(&self, name: &str) -> Result<Option<PersistentVolume>, ObjectError>;
    /// The handler of a RuntimeClass; None: no such class.
    async fn runtime_handler(&self, class: &str) -> Result<Option<String>, ObjectError>;
}

pub struct ApiObjects {
    client: Client,
    cluster_ca: Option<Vec<u8>>,
}

impl ApiObjects {
    pub fn new(client: Client, cluster_ca: Option<Vec<u8>>) -> Self {
        ApiObjects { client, cluster_ca }
    }
}

/// The CA of the kubeconfig's first cluster (inline data or file), as PEM.
pub fn kubeconfig_ca(kubeconfig: &Path) -> Option<Vec<u8>> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).ok()?;
    let cluster = kc.clusters.first()?.cluster.as_ref()?;
    if let Some(data) = &cluster.certificate_authority_data {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok();
    }
    let path = cluster.certificate_authority.as_ref()?;
    std::fs::read(path).ok()
}

fn api_err(kind: &'static str, ns: &str, name: &str, e: kube::Error) -> ObjectError {
    ObjectError::Api {
        kind,
        namespace: ns.into(),
        name: name.into(),
        message: e.to_string(),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[async_trait]
impl PodObjects for ApiObjects {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Payload>, ObjectError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(cm) => {
                let mut out: Payload = cm
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                for (k, v) in cm.binary_data.unwrap_or_default() {
                    out.insert(k, v.0);
                }
                Ok(Some(out))
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(api_err("configmap", namespace, name, e)),
        }
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Payload>, ObjectError> {
        Ok(self
            .secret_with_type(namespace, name)
            .await?
            .map(|(_, data)| data))
    }

    async fn secret_with_type(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(String, Payload)>, ObjectError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(s) => {
                let type_ = s.type_.clone().unwrap_or_else(|| "Opaque".into());
                let mut out: Payload = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                // stringData is write-only upstream; a server that kept it still means the same bytes.
                for (k, v) in s.string_data.unwrap_or_default() {
                    out.entry(k).or_insert_with(|| v.into_bytes());
                }
                Ok(Some((type_, out)))
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(api_err("secret", namespace, name, e)),
        }
    }

    async fn token(&self, req: &TokenFor<'_>) -> Result<Option<IssuedToken>, ObjectError> {
        let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), req.namespace);
        let body = k8s_openapi::api::authentication::v1::TokenRequest {
            metadata: Default::default(),
            spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                audiences: req
                    .audience
                    .map(|a| vec![a.to_string()])
                    .unwrap_or_default(),
                expiration_seconds: Some(req.expiration_seconds),
                bound_object_ref: Some(
                    k8s_openapi::api::authentication::v1::BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(req.pod_name.into()),
                        uid: Some(req.pod_uid.into()),
                    },
                ),
            },
            status: None,
        };
        match api
            .create_token_request(req.service_account, &PostParams::default(), &body)
            .await
        {
            Ok(tr) => match tr.status {
                Some(st) => Ok(Some(IssuedToken {
                    token: st.token,
                    expires_at: st.expiration_timestamp.0.as_second(),
                })),
                None => Err(ObjectError::Api {
                    kind: "serviceaccount",
                    namespace: req.namespace.into(),
                    name: req.service_account.into(),
                    message: "TokenRequest answered without a token".into(),
                }),
            },
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(api_err(
                "serviceaccount",
                req.namespace,
                req.service_account,
                e,
            )),
        }
    }

    fn cluster_ca(&self) -> Option<Vec<u8>> {
        self.cluster_ca.clone()
    }

    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, ObjectError> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(api_err("persistentvolumeclaim", namespace, name, e)),
        }
    }

    async fn persistent_volume(&self, name: &str) -> Result<Option<PersistentVolume>, ObjectError> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.get(name).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(api_err("persistentvolume", "", name, e)),
        }
    }

    async fn runtime_handler(&self, class: &str) -> Result<Option<String>, ObjectError> {
        let api: Api<RuntimeClass> = Api::all(self.client.clone());
        match api.get(class).await {
            Ok(rc) => Ok(Some(rc.handler)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(api_err("runtimeclass", "", class, e)),
        }
    }
}

/// In-memory objects for tests.
#[cfg(test)]
#[derive(Default)]
pub struct FakeObjects {
    pub config_maps: std::sync::Mutex<BTreeMap<(String, String), Payload>>,
    pub secrets: std::sync::Mutex<BTreeMap<(String, String), Payload>>,
    pub token: std::sync::Mutex<Option<IssuedToken>>,
    pub token_requests: std::sync::Mutex<u32>,
    pub claims: std::sync::Mutex<BTreeMap<(String, String), PersistentVolumeClaim>>,
    pub volumes: std::sync::Mutex<BTreeMap<String, PersistentVolume>>,
    /// RuntimeClass name to handler.
    pub runtime_classes: std::sync::Mutex<BTreeMap<String, String>>,
    /// Secret types by (namespace, name); unlisted secrets are Opaque.
    pub secret_types: std::sync::Mutex<BTreeMap<(String, String), String>>,
}

#[cfg(test)]
impl FakeObjects {
    pub fn put_config_map(&self, ns: &str, name: &str, kv: &[(&str, &str)]) {
        self.config_maps.lock().unwrap().insert(
            (ns.into(), name.into()),
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        );
    }

    pub fn put_typed_secret(&self, ns: &str, name: &str, type_: &str, kv: &[(&str, &str)]) {
        self.put_secret(ns, name, kv);
        self.secret_types
            .lock()
            .unwrap()
            .insert((ns.into(), name.into()), type_.into());
    }

    pub fn put_secret(&self, ns: &str, name: &str, kv: &[(&str, &str)]) {
        self.secrets.lock().unwrap().insert(
            (ns.into(), name.into()),
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        );
    }
}

#[cfg(test)]
#[async_trait]
impl PodObjects for FakeObjects {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Payload>, ObjectError> {
        Ok(self
            .config_maps
            .lock()
            .unwrap()
            .get(&(namespace.into(), name.into()))
            .cloned())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Payload>, ObjectError> {
        Ok(self
            .secrets
            .lock()
            .unwrap()
            .get(&(namespace.into(), name.into()))
            .cloned())
    }

    async fn secret_with_type(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(String, Payload)>, ObjectError> {
        let key = (namespace.to_string(), name.to_string());
        let type_ = self.secret_types.lock().unwrap().get(&key).cloned();
        Ok(self
            .secrets
            .lock()
            .unwrap()
            .get(&key)
            .cloned()
            .map(|p| (type_.unwrap_or_else(|| "Opaque".into()), p)))
    }

    async fn token(&self, _req: &TokenFor<'_>) -> Result<Option<IssuedToken>, ObjectError> {
        *self.token_requests.lock().unwrap() += 1;
        Ok(self.token.lock().unwrap().clone())
    }

    fn cluster_ca(&self) -> Option<Vec<u8>> {
        Some(b"CA-FROM-KUBECONFIG\n".to_vec())
    }

    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, ObjectError> {
        Ok(self
            .claims
            .lock()
            .unwrap()
            .get(&(namespace.into(), name.into()))
            .cloned())
    }

    async fn persistent_volume(&self, name: &str) -> Result<Option<PersistentVolume>, ObjectError> {
        Ok(self.volumes.lock().unwrap().get(name).cloned())
    }

    async fn runtime_handler(&self, class: &str) -> Result<Option<String>, ObjectError> {
        Ok(self.runtime_classes.lock().unwrap().get(class).cloned())
    }
}
