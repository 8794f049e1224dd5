//! The objects a bundle must bring back: namespaces, deployments, services, configmaps and secrets at the
//! snapshot's revision, each with its UID, resourceVersion and the sha256 of its stored bytes, read from
//! the bundle's snapshot itself (checked against bundle.json's sha256), so a drill can check a restore
//! without the original cluster. A save only counts while the snapshot arrives (the revision and the
//! /registry/ keys live at it); the records are made when a drill asks, from the same bytes.

use kiln_common::store_snapshot::{self, LiveKeys, Scanner, StoreSnapshotError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::store_client::{StoreClient, REGISTRY_PREFIX};
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

/// The part of a stored object a record needs.
#[derive(Deserialize)]
struct Stored {
    #[serde(default)]
    metadata: StoredMeta,
}

#[derive(Deserialize, Default)]
struct StoredMeta {
    #[serde(default, deserialize_with = "string_or_nothing")]
    uid: Option<String>,
}

/// A uid that is not a string counts as none (the record then compares by content), as before.
fn string_or_nothing<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    })
}

fn record(kind: &str, prefix: &str, key: &str, value: &[u8], mod_rev: i64) -> ObjectRecord {
    let rest = key.strip_prefix(prefix).unwrap_or(key);
    let (namespace, name) = match rest.split_once('/') {
        Some((ns, n)) => (ns.to_string(), n.to_string()),
        None => (String::new(), rest.to_string()),
    };
    // Stored objects are JSON; the UID is read from it when it parses (a record without one still
    // compares by content). Only metadata.uid is decoded: the rest of the object is skipped unparsed.
    let uid = serde_json::from_slice::<Stored>(value)
        .ok()
        .and_then(|o| o.metadata.uid)
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

/// The objects of [`KINDS`] live at the revision of a snapshot whose trailing sha256 was checked, sorted:
/// the same answers as reads at its revision from the store it came from.
pub fn objects_in(data: &[u8]) -> Result<Vec<ObjectRecord>, StoreSnapshotError> {
    // Either format: etcd's bbolt (what kiln-store streams now) or kiln's own (older bundles).
    let (_, live) = store_snapshot::live_at_revision(data, REGISTRY_PREFIX.as_bytes())?;
    let mut objects = vec![];
    for k in &live {
        if let Some((kind, prefix)) = KINDS
            .iter()
            .find(|(_, prefix)| k.key.starts_with(prefix.as_bytes()))
        {
            let key = String::from_utf8_lossy(&k.key);
            objects.push(record(kind, prefix, &key, k.value, k.mod_revision));
        }
    }
    objects.sort_by_cached_key(|a| a.id());
    Ok(objects)
}

/// The revision and the /registry/ count of a snapshot whose trailing sha256 was checked.
pub fn count_snapshot(data: &[u8]) -> Result<Counted, StoreSnapshotError> {
    let (revision, live) = store_snapshot::live_at_revision(data, REGISTRY_PREFIX.as_bytes())?;
    Ok(Counted {
        revision,
        registry_objects: live.len() as i64,
    })
}

/// What a save states of its snapshot in bundle.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// The store revision the snapshot holds.
    pub revision: i64,
    /// Keys under /registry/ at that revision.
    pub registry_objects: i64,
}

/// Counts a snapshot while it arrives, so nothing is left to read once its last byte is in: the records
/// and the live keys are found as bytes come in. [`Counter::finish`] checks the early answer against the
/// whole snapshot and falls back to [`count_snapshot`] wherever it could differ, so the answer is the
/// same either way.
pub struct Counter {
    scanner: Scanner,
    live: LiveKeys<'static>,
    registry_objects: i64,
    /// The store revision the snapshot states (1 until it does, as for a store that never wrote).
    revision: i64,
    /// Something in the bytes did not read as a snapshot: left for [`count_snapshot`] to name, once the
    /// checksum has been checked.
    unreadable: bool,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            scanner: Scanner::default(),
            live: LiveKeys::new(REGISTRY_PREFIX.as_bytes(), None),
            registry_objects: 0,
            revision: 1,
            unreadable: false,
        }
    }
}

impl Counter {
    /// `data`: every byte of the snapshot received so far.
    pub fn feed(&mut self, data: &[u8]) {
        while !self.unreadable {
            let live = match self.scanner.next(data) {
                Ok(Some(r)) => {
                    if let Some(rev) = store_snapshot::revision_in(&r) {
                        self.revision = rev;
                    }
                    self.live.offer(&r)
                }
                Ok(None) => return,
                Err(_) => {
                    self.unreadable = true;
                    return;
                }
            };
            match live {
                Ok(Some(_)) => self.registry_objects += 1,
                Ok(None) => {}
                Err(_) => self.unreadable = true,
            }
        }
    }

    /// The count of the whole snapshot `data` (its trailing sha256 already checked).
    pub fn finish(self, data: &[u8]) -> Result<Counted, StoreSnapshotError> {
        // Everything was read as it arrived (framing checked up to the end marker, which lies before the
        // digest), each key's newest version decided: right when none is newer than the snapshot.
        let whole = self.scanner.ended_before(data.len().saturating_sub(32));
        if self.unreadable || !whole || self.live.newest() > self.revision {
            return count_snapshot(data);
        }
        Ok(Counted {
            revision: self.revision,
            registry_objects: self.registry_objects,
        })
    }
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
    fn the_record_of_a_snapshot_holds_its_live_objects_at_its_revision() {
        use kiln_common::store_snapshot::{encode_kv, kv_record};
        let cm = br#"{"metadata":{"name":"keepme","namespace":"precious","uid":"u-2"}}"#;
        let kv = [
            kv_record(b"/registry/configmaps/precious/keepme", 7, Some(cm)),
            kv_record(b"/registry/configmaps/precious/keepme", 5, Some(b"{}")),
            kv_record(b"/registry/configmaps/precious/gone", 8, None),
            kv_record(b"/registry/configmaps/precious/gone", 6, Some(b"{}")),
            kv_record(b"/registry/leases/kube-system/x", 4, Some(b"{}")),
            kv_record(
                b"/registry/namespaces/precious",
                3,
                Some(br#"{"metadata":{"uid":"u-1"}}"#),
            ),
            kv_record(b"/unrelated", 2, Some(b"x")),
        ];
        let data = encode_kv(&kv, 8);
        let r = count_snapshot(&data).unwrap();
        // Counted while arriving, in pieces: the same.
        let mut early = Counter::default();
        for upto in (0..data.len()).step_by(100).chain([data.len()]) {
            early.feed(&data[..upto]);
        }
        let e = early.finish(&data).unwrap();
        assert_eq!(
            (e.revision, e.registry_objects),
            (r.revision, r.registry_objects)
        );
        assert_eq!(r.revision, 8);
        assert_eq!(r.registry_objects, 3, "keepme, the lease and the namespace");
        let objects = objects_in(&data).unwrap();
        let ids: Vec<_> = objects
            .iter()
            .map(|o| (o.id(), o.uid.as_str(), o.resource_version.as_str()))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("ConfigMap precious/keepme".to_string(), "u-2", "7"),
                ("Namespace/precious".to_string(), "u-1", "3"),
            ]
        );
        assert_eq!(objects[0].sha256, hex::encode(Sha256::digest(cm)));
    }

    #[test]
    fn a_uid_that_is_no_string_or_json_that_is_no_object_records_none() {
        for value in [
            &br#"{"metadata":{"uid":7}}"#[..],
            b"not json",
            b"[1]",
            b"{}",
        ] {
            let r = record(
                "Secret",
                "/registry/secrets/",
                "/registry/secrets/a/s",
                value,
                1,
            );
            assert_eq!(r.uid, "", "{}", String::from_utf8_lossy(value));
        }
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
