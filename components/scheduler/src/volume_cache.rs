//! The scheduler's view of storage: PersistentVolumeClaims, PersistentVolumes and StorageClasses from
//! the watches, with the bindings this scheduler assumed on top (upstream's AssumeCache): once a pod is
//! reserved, its chosen static PV reads as claimed and its claim as having a selected node, so the next
//! cycles do not hand the same PV to another claim before the API writes come back in the watch.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

/// "namespace/name" of a claim.
pub type ClaimKey = String;

pub fn claim_key(namespace: &str, name: &str) -> ClaimKey {
    format!("{namespace}/{name}")
}

pub fn claim_key_of(claim: &PersistentVolumeClaim) -> ClaimKey {
    claim_key(
        claim.metadata.namespace.as_deref().unwrap_or("default"),
        claim.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// An assumed object, and the resourceVersion of the watched one it was made from: a newer watched
/// version (the API write, or anything else that changed it) replaces the assumption.
#[derive(Debug, Clone)]
struct Assumed<T> {
    base_version: Option<String>,
    object: Arc<T>,
}

#[derive(Debug, Default)]
pub struct VolumeCache {
    claims: HashMap<ClaimKey, Arc<PersistentVolumeClaim>>,
    /// By name, so candidate PVs come in a reproducible order.
    volumes: BTreeMap<String, Arc<PersistentVolume>>,
    classes: HashMap<String, Arc<StorageClass>>,
    assumed_claims: HashMap<ClaimKey, Assumed<PersistentVolumeClaim>>,
    assumed_volumes: HashMap<String, Assumed<PersistentVolume>>,
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

impl VolumeCache {
    pub fn upsert_claim(&mut self, claim: PersistentVolumeClaim) {
        let key = claim_key_of(&claim);
        let version = claim.metadata.resource_version.clone();
        if self
            .assumed_claims
            .get(&key)
            .is_some_and(|a| a.base_version != version)
        {
            self.assumed_claims.remove(&key);
        }
        self.claims.insert(key, Arc::new(claim));
    }

    pub fn remove_claim(&mut self, key: &str) {
        self.claims.remove(key);
        self.assumed_claims.remove(key);
    }

    pub fn upsert_volume(&mut self, volume: PersistentVolume) {
        let name = name_of(&volume.metadata);
        let version = volume.metadata.resource_version.clone();
        if self
            .assumed_volumes
            .get(&name)
            .is_some_and(|a| a.base_version != version)
        {
            self.assumed_volumes.remove(&name);
        }
        self.volumes.insert(name, Arc::new(volume));
    }

    pub fn remove_volume(&mut self, name: &str) {
        self.volumes.remove(name);
        self.assumed_volumes.remove(name);
    }

    pub fn upsert_class(&mut self, class: StorageClass) {
        self.classes
            .insert(name_of(&class.metadata), Arc::new(class));
    }

    pub fn remove_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// Keeps only the claims, volumes and classes a relist returned.
    pub fn retain_claims(&mut self, keep: impl Fn(&str) -> bool) {
        self.claims.retain(|k, _| keep(k));
        self.assumed_claims.retain(|k, _| keep(k));
    }

    pub fn retain_volumes(&mut self, keep: impl Fn(&str) -> bool) {
        self.volumes.retain(|k, _| keep(k));
        self.assumed_volumes.retain(|k, _| keep(k));
    }

    pub fn retain_classes(&mut self, keep: impl Fn(&str) -> bool) {
        self.classes.retain(|k, _| keep(k));
    }

    /// The claim as the scheduler should see it (assumed version first).
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let key = claim_key(namespace, name);
        self.assumed_claims
            .get(&key)
            .map(|a| a.object.clone())
            .or_else(|| self.claims.get(&key).cloned())
    }

    pub fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.assumed_volumes
            .get(name)
            .map(|a| a.object.clone())
            .or_else(|| self.volumes.get(name).cloned())
    }

    pub fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(name).cloned()
    }

    /// Every PV, assumed versions first, in name order.
    pub fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.volumes
            .keys()
            .filter_map(|name| self.volume(name))
            .collect()
    }

    /// Reserve: the PV reads as claimed until the watch shows a newer version (or it is reverted).
    pub fn assume_volume(&mut self, volume: PersistentVolume) {
        let name = name_of(&volume.metadata);
        let base_version = self
            .volumes
            .get(&name)
            .and_then(|v| v.metadata.resource_version.clone());
        self.assumed_volumes.insert(
            name,
            Assumed {
                base_version,
                object: Arc::new(volume),
            },
        );
    }

    pub fn assume_claim(&mut self, claim: PersistentVolumeClaim) {
        let key = claim_key_of(&claim);
        let base_version = self
            .claims
            .get(&key)
            .and_then(|c| c.metadata.resource_version.clone());
        self.assumed_claims.insert(
            key,
            Assumed {
                base_version,
                object: Arc::new(claim),
            },
        );
    }

    /// Unreserve: back to the watched versions.
    pub fn revert_volume(&mut self, name: &str) {
        self.assumed_volumes.remove(name);
    }

    pub fn revert_claim(&mut self, key: &str) {
        self.assumed_claims.remove(key);
    }

    pub fn is_volume_assumed(&self, name: &str) -> bool {
        self.assumed_volumes.contains_key(name)
    }

    pub fn is_claim_assumed(&self, key: &str) -> bool {
        self.assumed_claims.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(name: &str, version: &str, claim: Option<&str>) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": name, "resourceVersion": version},
            "spec": {"claimRef": claim.map(|c| json!({"namespace": "default", "name": c}))}
        }))
        .unwrap()
    }

    #[test]
    fn an_assumption_holds_until_the_watch_shows_a_newer_version() {
        let mut cache = VolumeCache::default();
        cache.upsert_volume(pv("pv1", "5", None));
        cache.assume_volume(pv("pv1", "5", Some("data")));
        assert!(cache
            .volume("pv1")
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .claim_ref
            .is_some());
        // The same version again (a relist) keeps the assumption.
        cache.upsert_volume(pv("pv1", "5", None));
        assert!(cache.is_volume_assumed("pv1"));
        // The written version replaces it.
        cache.upsert_volume(pv("pv1", "6", Some("data")));
        assert!(!cache.is_volume_assumed("pv1"));
        assert_eq!(cache.volumes().len(), 1);
    }

    #[test]
    fn revert_returns_to_the_watched_object() {
        let mut cache = VolumeCache::default();
        cache.upsert_volume(pv("pv1", "5", None));
        cache.assume_volume(pv("pv1", "5", Some("data")));
        cache.revert_volume("pv1");
        assert!(cache
            .volume("pv1")
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .claim_ref
            .is_none());
    }

    #[test]
    fn claims_are_found_by_namespace_and_name() {
        let mut cache = VolumeCache::default();
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "db", "resourceVersion": "1"}
        }))
        .unwrap();
        cache.upsert_claim(claim.clone());
        assert!(cache.claim("db", "data").is_some());
        assert!(cache.claim("default", "data").is_none());
        let mut selected = claim;
        selected.metadata.annotations = Some(
            [(
                "volume.kubernetes.io/selected-node".to_string(),
                "n1".to_string(),
            )]
            .into(),
        );
        cache.assume_claim(selected);
        assert!(cache.is_claim_assumed("db/data"));
        cache.remove_claim("db/data");
        assert!(cache.claim("db", "data").is_none());
        assert!(!cache.is_claim_assumed("db/data"));
    }
}
