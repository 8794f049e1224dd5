//! The objects a bundle must bring back: namespaces, deployments, services, configmaps and secrets at the
//! snapshot's revision, each with its UID, resourceVersion and the sha256 of its stored bytes. Recorded at
//! save time (`objects.json` in the bundle) so a drill can check a restore without the original cluster.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::store_client::StoreClient;
use super::SnapshotError;

/// (kind, the apiserver's store prefix for it).
pub const KINDS: &[(&str, &str)] = &[
    ("Namespace", "/registry/namespaces/"),
    ("Deployment", "/registry/deployments/"),
    ("Service", "/registry/services/"),
    ("ConfigMap", "/registry/configmaps/"),
    ("Secret", "/registry/secrets/"),
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRecord {
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// sha256 of the object's bytes in the store.
    pub sha256: String,
}

impl ObjectRecord {
    pub fn id(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

fn record(kind: &str, prefix: &str, key: &str, value: &[u8], mod_rev: i64) -> ObjectRecord {
    let rest = key.strip_prefix(prefix).unwrap_or(key);
    let (namespace, name) = match rest.split_once('/') {
        Some((ns, n)) => (ns.to_string(), n.to_string()),
        None => (String::new(), rest.to_string()),
    };
    // Stored objects are JSON; the UID is read from it when it parses (a record without one still
    // compares by content).
    let uid = serde_json::from_slice::<serde_json::Value>(value)
        .ok()
        .and_then(|v| v["metadata"]["uid"].as_str().map(str::to_string))
        .unwrap_or_default();
    ObjectRecord {
        kind: kind.into(),
        namespace,
        name,
        uid,
        resource_version: mod_rev.to_string(),
        sha256: hex::encode(Sha256::digest(value)),
    }
}

/// The objects of [`KINDS`] in the store at `revision`, sorted.
pub async fn collect(
    store: &mut StoreClient,
    revision: i64,
) -> Result<Vec<ObjectRecord>, SnapshotError> {
    let mut out = vec![];
    for (kind, prefix) in KINDS {
        for (key, value, rev) in store.list_prefix(prefix, revision).await? {
            out.push(record(kind, prefix, &key, &value, rev));
        }
    }
    out.sort_by_cached_key(|a| a.id());
    Ok(out)
}

/// Every difference between what the bundle recorded and what a restored store holds: missing objects,
/// and objects whose UID, resourceVersion or content changed. Objects created after the restore are no
/// concern of the bundle and are not reported.
pub fn differences(recorded: &[ObjectRecord], found: &[ObjectRecord]) -> Vec<String> {
    let by_id: std::collections::HashMap<String, &ObjectRecord> =
        found.iter().map(|r| (r.id(), r)).collect();
    let mut out = vec![];
    for want in recorded {
        match by_id.get(&want.id()) {
            None => out.push(format!("{}: missing", want.id())),
            Some(got) if got.uid != want.uid => out.push(format!(
                "{}: uid {} instead of {}",
                want.id(),
                got.uid,
                want.uid
            )),
            Some(got) if got.resource_version != want.resource_version => out.push(format!(
                "{}: resourceVersion {} instead of {}",
                want.id(),
                got.resource_version,
                want.resource_version
            )),
            Some(got) if got.sha256 != want.sha256 => {
                out.push(format!("{}: content differs", want.id()))
            }
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_name_namespace_and_uid_from_the_stored_object() {
        let r = record(
            "ConfigMap",
            "/registry/configmaps/",
            "/registry/configmaps/precious/keepme",
            br#"{"metadata":{"name":"keepme","uid":"u-1"}}"#,
            42,
        );
        assert_eq!(r.id(), "ConfigMap precious/keepme");
        assert_eq!(r.uid, "u-1");
        assert_eq!(r.resource_version, "42");
        let ns = record(
            "Namespace",
            "/registry/namespaces/",
            "/registry/namespaces/precious",
            b"{}",
            3,
        );
        assert_eq!(ns.id(), "Namespace/precious");
    }

    #[test]
    fn differences_name_each_missing_or_changed_object() {
        let a = record(
            "Secret",
            "/registry/secrets/",
            "/registry/secrets/a/s",
            b"{}",
            5,
        );
        let b = record(
            "Secret",
            "/registry/secrets/",
            "/registry/secrets/a/t",
            b"{}",
            6,
        );
        let mut changed = b.clone();
        changed.sha256 = "x".into();
        assert!(differences(&[a.clone(), b.clone()], &[a.clone(), b.clone()]).is_empty());
        let d = differences(&[a.clone(), b.clone()], &[changed]);
        assert_eq!(
            d,
            vec![
                "Secret a/s: missing".to_string(),
                "Secret a/t: content differs".to_string()
            ]
        );
    }
}
