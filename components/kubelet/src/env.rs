//! A container's environment as the kubelet builds it: `envFrom` (ConfigMaps and Secrets, with prefix)
//! first, then `env` in order (later names win), values from literals with `$(VAR)` expansion,
//! `configMapKeyRef`, `secretKeyRef`, `fieldRef` and `resourceFieldRef` ([`crate::env_resources`]), then
//! the Service variables ([`crate::service_env`]) the container's own do not override — `$(VAR)` in a
//! literal may refer to them, as upstream's. The referenced objects are fetched once per container
//! start ([`fetch`]); building the list from them is pure ([`build`]) and tested on values. A missing
//! object or key that is not `optional` is an error whose message is upstream's, shown as the container's
//! `CreateContainerConfigError`.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use crate::env_resources::{self, NodeAllocatable, ResourceError};
use crate::pod_objects::{ObjectError, Payload, PodObjects};
use crate::service_env::ServiceEnvError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum EnvError {
    #[error("configmap {0:?} not found")]
    ConfigMapNotFound(String),
    #[error("secret {0:?} not found")]
    SecretNotFound(String),
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKey {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKey {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("env {name}: {message}")]
    Unsupported { name: String, message: String },
    #[error("env {name}: {source}")]
    Resource {
        name: String,
        #[source]
        source: ResourceError,
    },
    #[error("env {name}: {source}")]
    Objects {
        name: String,
        #[source]
        source: ObjectError,
    },
    #[error(transparent)]
    Services(#[from] ServiceEnvError),
}

/// What `fieldRef` may read besides the pod object itself.
#[derive(Debug, Clone, Default)]
pub struct FieldContext<'a> {
    pub node_name: &'a str,
    pub node_ip: &'a str,
    pub pod_ip: Option<&'a str>,
    /// What `resourceFieldRef` limits read when the container has none.
    pub allocatable: Option<&'a NodeAllocatable>,
}

/// The ConfigMaps and Secrets a container's env refers to, by name (None = does not exist), and the
/// Service variables of its pod ([`crate::service_env::for_pod`]).
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    pub config_maps: HashMap<String, Option<Payload>>,
    pub secrets: HashMap<String, Option<Payload>>,
    pub service_env: Vec<(String, String)>,
}

/// Names of the ConfigMaps and Secrets the container's env and envFrom refer to.
pub fn references(c: &Container) -> (Vec<String>, Vec<String>) {
    let (mut cms, mut secrets) = (Vec::new(), Vec::new());
    for f in c.env_from.iter().flatten() {
        if let Some(r) = &f.config_map_ref {
            cms.push(r.name.clone());
        }
        if let Some(r) = &f.secret_ref {
            secrets.push(r.name.clone());
        }
    }
    for e in c.env.iter().flatten() {
        let Some(from) = &e.value_from else { continue };
        if let Some(r) = &from.config_map_key_ref {
            cms.push(r.name.clone());
        }
        if let Some(r) = &from.secret_key_ref {
            secrets.push(r.name.clone());
        }
    }
    for v in [&mut cms, &mut secrets] {
        v.sort();
        v.dedup();
    }
    (cms, secrets)
}

/// Reads every object the container's env refers to (none when it refers to none).
pub async fn fetch(
    namespace: &str,
    c: &Container,
    objects: Option<&dyn PodObjects>,
) -> Result<Fetched, EnvError> {
    let (cms, secrets) = references(c);
    let mut out = Fetched::default();
    if cms.is_empty() && secrets.is_empty() {
        return Ok(out);
    }
    let err = |source| EnvError::Objects {
        name: c.name.clone(),
        source,
    };
    let objects = objects.ok_or_else(|| err(ObjectError::NoClient))?;
    for name in cms {
        let v = objects.config_map(namespace, &name).await.map_err(err)?;
        out.config_maps.insert(name, v);
    }
    for name in secrets {
        let v = objects.secret(namespace, &name).await.map_err(err)?;
        out.secrets.insert(name, v);
    }
    Ok(out)
}

/// A C identifier-ish env name, as upstream's envFrom accepts (others are skipped).
fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `$(VAR)` → VAR's value when defined earlier, `$$` → `$`; anything else stays as written (upstream's
/// expansion rules).
pub fn expand(input: &str, defined: &[(String, String)]) -> String {
    expand_with(input, &|name| {
        defined
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    })
}

/// [`expand`] with a lookup of its own (the container's variables, then the Service ones; a
/// subPathExpr's, which notes the missing ones).
pub(crate) fn expand_with<'a>(input: &str, lookup: &dyn Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn set(env: &mut Vec<(String, String)>, key: String, value: String) {
    env.retain(|(k, _)| *k != key);
    env.push((key, value));
}

fn field_value(pod: &Pod, ctx: &FieldContext, e: &EnvVar, path: &str) -> Result<String, EnvError> {
    let m = &pod.metadata;
    let label_or_annotation =
        |prefix: &str, map: &Option<std::collections::BTreeMap<String, String>>| {
            let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
            Some(
                map.as_ref()
                    .and_then(|m| m.get(key).cloned())
                    .unwrap_or_default(),
            )
        };
    if let Some(v) = label_or_annotation("metadata.labels['", &m.labels) {
        return Ok(v);
    }
    if let Some(v) = label_or_annotation("metadata.annotations['", &m.annotations) {
        return Ok(v);
    }
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => ctx.node_name.into(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" | "status.hostIPs" => ctx.node_ip.into(),
        "status.podIP" | "status.podIPs" => ctx.pod_ip.unwrap_or_default().into(),
        other => {
            return Err(EnvError::Unsupported {
                name: e.name.clone(),
                message: format!("fieldRef {other:?} is not supported"),
            })
        }
    })
}

fn lookup<'a>(objects: &'a HashMap<String, Option<Payload>>, name: &str) -> Option<&'a Payload> {
    objects.get(name).and_then(Option::as_ref)
}

/// The container's env, in CRI order: envFrom, then env (a later name replaces an earlier one), then the
/// Service variables not defined by either (upstream: the container's own win).
pub fn build(
    pod: &Pod,
    c: &Container,
    ctx: &FieldContext,
    fetched: &Fetched,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env: Vec<(String, String)> = Vec::new();
    for f in c.env_from.iter().flatten() {
        let prefix = f.prefix.as_deref().unwrap_or_default();
        let data = if let Some(r) = &f.config_map_ref {
            match lookup(&fetched.config_maps, &r.name) {
                Some(d) => d,
                None if r.optional == Some(true) => continue,
                None => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
            }
        } else if let Some(r) = &f.secret_ref {
            match lookup(&fetched.secrets, &r.name) {
                Some(d) => d,
                None if r.optional == Some(true) => continue,
                None => return Err(EnvError::SecretNotFound(r.name.clone())),
            }
        } else {
            continue;
        };
        for (k, v) in data {
            let key = format!("{prefix}{k}");
            if valid_env_name(&key) {
                set(&mut env, key, text(v));
            } else {
                tracing::debug!(container = %c.name, key, "envFrom: skipping an invalid variable name");
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = match &e.value_from {
            None => {
                let services = &fetched.service_env;
                let lookup = |name: &str| {
                    env.iter()
                        .rev()
                        .chain(services.iter())
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.as_str())
                };
                expand_with(e.value.as_deref().unwrap_or_default(), &lookup)
            }
            Some(from) => {
                if let Some(r) = &from.config_map_key_ref {
                    match lookup(&fetched.config_maps, &r.name) {
                        Some(d) => match d.get(&r.key) {
                            Some(v) => text(v),
                            None if r.optional == Some(true) => continue,
                            None => {
                                return Err(EnvError::ConfigMapKey {
                                    namespace: ns.into(),
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                })
                            }
                        },
                        None if r.optional == Some(true) => continue,
                        None => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    match lookup(&fetched.secrets, &r.name) {
                        Some(d) => match d.get(&r.key) {
                            Some(v) => text(v),
                            None if r.optional == Some(true) => continue,
                            None => {
                                return Err(EnvError::SecretKey {
                                    namespace: ns.into(),
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                })
                            }
                        },
                        None if r.optional == Some(true) => continue,
                        None => return Err(EnvError::SecretNotFound(r.name.clone())),
                    }
                } else if let Some(f) = &from.field_ref {
                    field_value(pod, ctx, e, &f.field_path)?
                } else if let Some(r) = &from.resource_field_ref {
                    let unknown = NodeAllocatable::default();
                    env_resources::value(pod, c, r, ctx.allocatable.unwrap_or(&unknown)).map_err(
                        |source| EnvError::Resource {
                            name: e.name.clone(),
                            source,
                        },
                    )?
                } else {
                    return Err(EnvError::Unsupported {
                        name: e.name.clone(),
                        message: "valueFrom names no source".into(),
                    });
                }
            }
        };
        set(&mut env, e.name.clone(), value);
    }
    for (k, v) in &fetched.service_env {
        if !env.iter().any(|(have, _)| have == k) {
            env.push((k.clone(), v.clone()));
        }
    }
    Ok(env)
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
