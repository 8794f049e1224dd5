//! `kube-system/extension-apiserver-authentication`: where extension API servers read the CAs and
//! header names to trust (client-ca-file for client certificates, requestheader-* for the
//! front-proxy identity kiln sends), written at start as upstream's cluster authentication trust
//! controller does. The requestheader keys are there only when a front-proxy CA is configured.

use serde_json::{json, Map, Value};

use super::AggregatorError;
use crate::registry::lifecycle::{from_stored, prepare_create, to_stored, FieldValidation};
use crate::registry::resources::CONFIGMAPS;
use crate::storage::{Store, StoreError};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";

/// The flags the ConfigMap publishes.
#[derive(Debug, Clone, Default)]
pub struct AuthenticationInfo {
    /// PEM of `--client-ca-file`.
    pub client_ca: Option<String>,
    /// PEM of `--requestheader-client-ca-file`.
    pub requestheader_ca: Option<String>,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefix: Vec<String>,
}

impl AuthenticationInfo {
    /// Reads the CA files the flags name.
    pub fn from_flags(
        client_ca_file: Option<&str>,
        requestheader_client_ca_file: Option<&str>,
        allowed_names: &[String],
        username_headers: &[String],
        group_headers: &[String],
        extra_headers_prefix: &[String],
    ) -> Result<AuthenticationInfo, AggregatorError> {
        let read = |path: Option<&str>| -> Result<Option<String>, AggregatorError> {
            path.map(|p| {
                std::fs::read_to_string(p).map_err(|source| AggregatorError::ReadFile {
                    path: p.to_string(),
                    source,
                })
            })
            .transpose()
        };
        Ok(AuthenticationInfo {
            client_ca: read(client_ca_file)?,
            requestheader_ca: read(requestheader_client_ca_file)?,
            allowed_names: allowed_names.to_vec(),
            username_headers: username_headers.to_vec(),
            group_headers: group_headers.to_vec(),
            extra_headers_prefix: extra_headers_prefix.to_vec(),
        })
    }

    /// The ConfigMap's data; list values are JSON arrays, as upstream writes them.
    pub fn data(&self) -> Map<String, Value> {
        let mut data = Map::new();
        if let Some(ca) = &self.client_ca {
            data.insert("client-ca-file".into(), json!(ca));
        }
        if let Some(ca) = &self.requestheader_ca {
            let list = |v: &[String]| json!(serde_json::to_string(v).unwrap_or_default());
            data.insert("requestheader-client-ca-file".into(), json!(ca));
            data.insert(
                "requestheader-allowed-names".into(),
                list(&self.allowed_names),
            );
            data.insert(
                "requestheader-username-headers".into(),
                list(&self.username_headers),
            );
            data.insert(
                "requestheader-group-headers".into(),
                list(&self.group_headers),
            );
            data.insert(
                "requestheader-extra-headers-prefix".into(),
                list(&self.extra_headers_prefix),
            );
        }
        data
    }
}

/// Creates or replaces the ConfigMap's data with this server's.
pub async fn publish(store: &Store, info: &AuthenticationInfo) -> Result<(), AggregatorError> {
    let data = Value::Object(info.data());
    let key = CONFIGMAPS.key(Some(NAMESPACE), NAME);
    for _ in 0..5 {
        match store.get(&key).await? {
            None => {
                let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": NAME, "namespace": NAMESPACE}, "data": data});
                let obj =
                    prepare_create(&CONFIGMAPS, Some(NAMESPACE), obj, FieldValidation::Strict)
                        .map_err(|e| AggregatorError::Invalid {
                            what: format!("ConfigMap {NAMESPACE}/{NAME}"),
                            message: e.message,
                        })?;
                match store.create(&key, to_stored(&obj)).await {
                    Ok(_) => return Ok(()),
                    Err(StoreError::AlreadyExists) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Some(current) => {
                let mut obj = from_stored(&current.value, current.mod_revision).map_err(|e| {
                    AggregatorError::Invalid {
                        what: format!("ConfigMap {NAMESPACE}/{NAME}"),
                        message: e.message,
                    }
                })?;
                if obj["data"] == data {
                    return Ok(());
                }
                obj["data"] = data.clone();
                match store
                    .update(&key, to_stored(&obj), current.mod_revision)
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(StoreError::Conflict | StoreError::NotFound) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requestheader_keys_appear_only_with_a_front_proxy_ca() {
        let mut info = AuthenticationInfo {
            client_ca: Some("CA".into()),
            ..Default::default()
        };
        assert_eq!(info.data().keys().collect::<Vec<_>>(), ["client-ca-file"]);
        info.requestheader_ca = Some("FP".into());
        info.allowed_names = vec!["front-proxy-client".into()];
        info.username_headers = vec!["X-Remote-User".into()];
        info.group_headers = vec!["X-Remote-Group".into()];
        info.extra_headers_prefix = vec!["X-Remote-Extra-".into()];
        let data = info.data();
        assert_eq!(data["requestheader-client-ca-file"], "FP");
        assert_eq!(
            data["requestheader-allowed-names"],
            "[\"front-proxy-client\"]"
        );
        assert_eq!(
            data["requestheader-username-headers"],
            "[\"X-Remote-User\"]"
        );
        assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
        assert_eq!(
            data["requestheader-extra-headers-prefix"],
            "[\"X-Remote-Extra-\"]"
        );
    }
}
