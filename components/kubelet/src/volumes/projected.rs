//! projected volumes (and downwardAPI volumes, a projection with one source): serviceAccountToken from
//! the API server's TokenRequest (bound to the pod, refreshed at 80 % of its lifetime), configMap, secret
//! and downwardAPI sources (fieldRef, and resourceFieldRef read as the env vars read it:
//! [`crate::env_resources`], the node's allocatable standing in for unset limits) merged into one
//! directory. The service-account volume the kubelet adds itself (`kube-api-access`) is one of these:
//! token, ca.crt, namespace.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, DownwardAPIVolumeFile, Pod, ProjectedVolumeSource, SecretProjection,
    VolumeProjection,
};

use super::atomic_writer::{FileSpec, Files};
use super::configmap::key_to_paths;
use super::VolumeError;
use crate::env_resources::{self, NodeAllocatable};
use crate::pod_objects::{IssuedToken, PodObjects, TokenFor};

pub const DEFAULT_MODE: u32 = 0o644;
/// The namespace's CA bundle, published by upstream's root-ca-cert-publisher.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// Upstream's kube-api-access token lifetime (an hour and a bit, so it is recognisably kubelet-made).
pub const SA_TOKEN_SECONDS: i64 = 3607;

/// A token this pod holds, and when it was issued (Unix seconds).
#[derive(Debug, Clone)]
pub struct HeldToken {
    pub token: IssuedToken,
    pub issued_at: i64,
}

impl HeldToken {
    /// Upstream's rule: refresh once 80 % of the lifetime has passed.
    pub fn needs_refresh(&self, now: i64) -> bool {
        let life = (self.token.expires_at - self.issued_at).max(0);
        now >= self.issued_at + life * 4 / 5
    }
}

/// The projection of the service-account volume the kubelet mounts when the pod does not opt out.
pub fn service_account_source() -> ProjectedVolumeSource {
    serde_json::from_value(serde_json::json!({
        "defaultMode": DEFAULT_MODE,
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": SA_TOKEN_SECONDS}},
            {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]
    }))
    .unwrap_or_default()
}

fn map_text(map: Option<&std::collections::BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}\n"))
        .collect()
}

/// One downwardAPI file's contents: a fieldRef of the pod's metadata, or a resourceFieldRef of one of
/// its containers (`node`: the allocatable an unset cpu or memory limit reads).
pub fn downward_value(
    pod: &Pod,
    f: &DownwardAPIVolumeFile,
    node: &NodeAllocatable,
) -> Result<String, VolumeError> {
    let unsupported =
        |what: String| VolumeError::Unsupported(format!("downwardAPI {}: {what}", f.path));
    if let Some(sel) = &f.resource_field_ref {
        return env_resources::volume_value(pod, sel, node).map_err(|e| unsupported(e.to_string()));
    }
    let Some(field) = &f.field_ref else {
        return Err(unsupported(
            "neither fieldRef nor resourceFieldRef is set".into(),
        ));
    };
    let m = &pod.metadata;
    let path = field.field_path.as_str();
    let keyed = |prefix: &str, map: Option<&std::collections::BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key).cloned()).unwrap_or_default())
    };
    if let Some(v) = keyed("metadata.labels['", m.labels.as_ref()) {
        return Ok(v);
    }
    if let Some(v) = keyed("metadata.annotations['", m.annotations.as_ref()) {
        return Ok(v);
    }
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => map_text(m.labels.as_ref()),
        "metadata.annotations" => map_text(m.annotations.as_ref()),
        other => return Err(unsupported(format!("fieldRef {other:?} is not supported"))),
    })
}

pub fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    node: &NodeAllocatable,
) -> Result<Files, VolumeError> {
    let mut out = Files::new();
    for f in items {
        out.insert(
            f.path.clone(),
            FileSpec {
                data: downward_value(pod, f, node)?.into_bytes(),
                mode: f.mode.map(|m| m as u32).unwrap_or(default_mode),
            },
        );
    }
    Ok(out)
}

async fn config_map_files(
    ns: &str,
    src: &ConfigMapProjection,
    mode: u32,
    objects: &dyn PodObjects,
) -> Result<Files, VolumeError> {
    let optional = src.optional == Some(true);
    let data = objects.config_map(ns, &src.name).await?;
    let data = match data {
        Some(d) => d,
        // No root-ca-cert-publisher in this cluster: the CA the kubelet trusts is the cluster's CA.
        None if src.name == ROOT_CA_CONFIGMAP && objects.cluster_ca().is_some() => [(
            "ca.crt".to_string(),
            objects.cluster_ca().unwrap_or_default(),
        )]
        .into(),
        None if optional => return Ok(Files::new()),
        None => {
            return Err(VolumeError::NotFound {
                kind: "configmap",
                name: src.name.clone(),
            })
        }
    };
    key_to_paths(
        "configmap",
        &src.name,
        &data,
        src.items.as_deref(),
        mode,
        optional,
    )
}

async fn secret_files(
    ns: &str,
    src: &SecretProjection,
    mode: u32,
    objects: &dyn PodObjects,
) -> Result<Files, VolumeError> {
    let optional = src.optional == Some(true);
    match objects.secret(ns, &src.name).await? {
        Some(d) => key_to_paths(
            "secret",
            &src.name,
            &d,
            src.items.as_deref(),
            mode,
            optional,
        ),
        None if optional => Ok(Files::new()),
        None => Err(VolumeError::NotFound {
            kind: "secret",
            name: src.name.clone(),
        }),
    }
}

/// The merged files of a projected volume. `tokens` holds this volume's tokens by path across calls;
/// a token is requested only when missing or due for refresh. `node`: see [`downward_value`].
pub async fn files(
    pod: &Pod,
    volume: &str,
    src: &ProjectedVolumeSource,
    objects: &dyn PodObjects,
    tokens: &mut HashMap<String, HeldToken>,
    now: i64,
    node: &NodeAllocatable,
) -> Result<Files, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mode = src.default_mode.map(|m| m as u32).unwrap_or(DEFAULT_MODE);
    let mut out = Files::new();
    for s in src.sources.iter().flatten() {
        let part = match s {
            VolumeProjection {
                service_account_token: Some(t),
                ..
            } => {
                let key = format!("{volume}/{}", t.path);
                let fresh = tokens.get(&key).is_some_and(|h| !h.needs_refresh(now));
                if !fresh {
                    let sa = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.service_account_name.as_deref())
                        .unwrap_or("default");
                    let req = TokenFor {
                        namespace: ns,
                        service_account: sa,
                        audience: t.audience.as_deref().filter(|a| !a.is_empty()),
                        expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                        pod_name: pod.metadata.name.as_deref().unwrap_or_default(),
                        pod_uid: pod.metadata.uid.as_deref().unwrap_or_default(),
                    };
                    let token = objects
                        .token(&req)
                        .await?
                        .ok_or_else(|| VolumeError::NoToken {
                            namespace: ns.into(),
                            service_account: sa.into(),
                        })?;
                    tracing::debug!(volume, service_account = sa, "service-account token issued");
                    tokens.insert(
                        key.clone(),
                        HeldToken {
                            token,
                            issued_at: now,
                        },
                    );
                }
                let token = tokens
                    .get(&key)
                    .map(|h| h.token.token.clone())
                    .unwrap_or_default();
                Files::from([(
                    t.path.clone(),
                    FileSpec {
                        data: token.into_bytes(),
                        mode,
                    },
                )])
            }
            VolumeProjection {
                config_map: Some(c),
                ..
            } => config_map_files(ns, c, mode, objects).await?,
            VolumeProjection {
                secret: Some(sec), ..
            } => secret_files(ns, sec, mode, objects).await?,
            VolumeProjection {
                downward_api: Some(d),
                ..
            } => downward_files(pod, d.items.as_deref().unwrap_or_default(), mode, node)?,
            _ => {
                return Err(VolumeError::Unsupported(format!(
                    "projected volume {volume}: a source kind this kubelet does not know"
                )))
            }
        };
        out.extend(part);
    }
    Ok(out)
}

#[cfg(test)]
#[path = "projected_tests.rs"]
mod tests;
