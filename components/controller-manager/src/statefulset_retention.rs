//! persistentVolumeClaimRetentionPolicy: the ownerReferences a StatefulSet's claims carry so the
//! garbage collector deletes them when the policy says so (upstream's stateful_set_utils.go
//! isClaimOwnerUpToDate / updateClaimOwnerRefForSetAndPod). whenDeleted=Delete makes the set the
//! claims' controller; whenScaled=Delete makes a scaled-down pod (an ordinal outside the set's
//! range) the controller of its claims, so they go with it. Claims someone else controls, or
//! pointing to an earlier set or pod of the same name, are left alone.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::statefulset_plan::ordinal_of;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Policy {
    delete_when_deleted: bool,
    delete_when_scaled: bool,
}

fn policy(set: &StatefulSet) -> Policy {
    let p = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let delete = |v: Option<&String>| v.is_some_and(|v| v == "Delete");
    Policy {
        delete_when_deleted: delete(p.and_then(|p| p.when_deleted.as_ref())),
        delete_when_scaled: delete(p.and_then(|p| p.when_scaled.as_ref())),
    }
}

/// podInOrdinalRange: the pod's ordinal is among the set's replicas.
fn in_range(pod: &Pod, set: &StatefulSet) -> bool {
    let spec = set.spec.as_ref();
    let start = spec
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .unwrap_or(0);
    let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
    ordinal_of(pod).is_some_and(|o| o >= start && o < start + replicas)
}

struct Owner<'a> {
    api_version: &'static str,
    kind: &'static str,
    meta: &'a ObjectMeta,
}

impl Owner<'_> {
    fn uid(&self) -> &str {
        self.meta.uid.as_deref().unwrap_or_default()
    }

    /// matchesRef: same group, kind and name (any UID).
    fn matches(&self, r: &OwnerReference) -> bool {
        let group = |v: &str| {
            v.rsplit_once('/')
                .map(|(g, _)| g.to_string())
                .unwrap_or_default()
        };
        group(&r.api_version) == group(self.api_version)
            && r.kind == self.kind
            && Some(r.name.as_str()) == self.meta.name.as_deref()
    }

    fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.into(),
            kind: self.kind.into(),
            name: self.meta.name.clone().unwrap_or_default(),
            uid: self.uid().into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

fn refs(claim: &PersistentVolumeClaim) -> &[OwnerReference] {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
}

fn has_ref(claim: &PersistentVolumeClaim, owner: &Owner) -> bool {
    refs(claim).iter().any(|r| r.uid == owner.uid())
}

fn has_stale_ref(claim: &PersistentVolumeClaim, owner: &Owner) -> bool {
    refs(claim)
        .iter()
        .find(|r| owner.matches(r))
        .is_some_and(|r| r.uid != owner.uid())
}

fn is_controller(r: &OwnerReference) -> bool {
    r.controller == Some(true)
}

fn has_unexpected_controller(claim: &PersistentVolumeClaim, set: &Owner, pod: &Owner) -> bool {
    refs(claim)
        .iter()
        .any(|r| is_controller(r) && r.uid != set.uid() && r.uid != pod.uid())
}

fn has_non_controller_owner(claim: &PersistentVolumeClaim, set: &Owner, pod: &Owner) -> bool {
    refs(claim)
        .iter()
        .any(|r| (r.uid == set.uid() || r.uid == pod.uid()) && !is_controller(r))
}

fn owners<'a>(set: &'a StatefulSet, pod: &'a Pod) -> (Owner<'a>, Owner<'a>) {
    (
        Owner {
            api_version: "apps/v1",
            kind: "StatefulSet",
            meta: &set.metadata,
        },
        Owner {
            api_version: "v1",
            kind: "Pod",
            meta: &pod.metadata,
        },
    )
}

/// isClaimOwnerUpToDate.
pub fn up_to_date(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    let (s, p) = owners(set, pod);
    if has_stale_ref(claim, &s) || has_stale_ref(claim, &p) {
        // Managed by an earlier set or pod of the same name: not ours to touch.
        return true;
    }
    if has_unexpected_controller(claim, &s, &p) {
        return !(has_ref(claim, &s) || has_ref(claim, &p));
    }
    if has_non_controller_owner(claim, &s, &p) {
        return false;
    }
    let scaled_down = !in_range(pod, set);
    let policy = policy(set);
    let want_set = policy.delete_when_deleted && !(policy.delete_when_scaled && scaled_down);
    let want_pod = policy.delete_when_scaled && scaled_down;
    has_ref(claim, &s) == want_set && has_ref(claim, &p) == want_pod
}

/// updateClaimOwnerRefForSetAndPod: the claim's ownerReferences with ours scrubbed and set again
/// as the policy says.
pub fn owner_refs(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &Pod,
) -> Vec<OwnerReference> {
    let (s, p) = owners(set, pod);
    let unexpected = has_unexpected_controller(claim, &s, &p);
    let mut refs: Vec<OwnerReference> = refs(claim)
        .iter()
        .filter(|r| !s.matches(r) && !p.matches(r))
        .cloned()
        .collect();
    if unexpected {
        return refs;
    }
    let policy = policy(set);
    let scaled_down = !in_range(pod, set);
    if policy.delete_when_scaled && scaled_down {
        refs.push(p.controller_ref());
    } else if policy.delete_when_deleted {
        refs.push(s.controller_ref());
    }
    refs
}

/// The ownerReferences to write, when the claim's are not what the policy wants.
pub fn fix(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &Pod,
) -> Option<Vec<OwnerReference>> {
    (!up_to_date(claim, set, pod)).then(|| owner_refs(claim, set, pod))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(replicas: i32, when_deleted: &str, when_scaled: &str) -> StatefulSet {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {"replicas": replicas, "serviceName": "web", "selector": {"matchLabels": {"app": "w"}},
                "template": {"spec": {"containers": []}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": when_deleted, "whenScaled": when_scaled}}}))
        .unwrap()
    }

    fn pod(ordinal: i32) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": format!("web-{ordinal}"), "namespace": "ns",
            "uid": format!("pod-{ordinal}")}}),
        )
        .unwrap()
    }

    fn claim(refs: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "data-web-1", "namespace": "ns",
            "ownerReferences": refs}}))
        .unwrap()
    }

    fn uids(refs: &[OwnerReference]) -> Vec<(&str, Option<bool>)> {
        refs.iter()
            .map(|r| (r.uid.as_str(), r.controller))
            .collect()
    }

    #[test]
    fn retain_retain_owns_nothing() {
        let s = set(3, "Retain", "Retain");
        assert_eq!(fix(&claim(json!([])), &s, &pod(1)), None);
        let owned = claim(
            json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
            "uid": "set-uid", "controller": true}]),
        );
        assert_eq!(fix(&owned, &s, &pod(1)).map(|r| r.len()), Some(0));
    }

    #[test]
    fn when_deleted_delete_makes_the_set_the_controller() {
        let s = set(3, "Delete", "Retain");
        let refs = fix(&claim(json!([])), &s, &pod(1)).unwrap();
        assert_eq!(uids(&refs), vec![("set-uid", Some(true))]);
        assert_eq!(refs[0].block_owner_deletion, Some(true));
        // A scaled-down pod's claim stays with the set when scaling retains.
        let s = set(1, "Delete", "Retain");
        assert_eq!(
            uids(&fix(&claim(json!([])), &s, &pod(1)).unwrap()),
            vec![("set-uid", Some(true))]
        );
    }

    #[test]
    fn when_scaled_delete_hands_scaled_down_claims_to_their_pod() {
        let s = set(1, "Retain", "Delete");
        let refs = fix(&claim(json!([])), &s, &pod(1)).unwrap();
        assert_eq!(uids(&refs), vec![("pod-1", Some(true))]);
        // In range: no owner.
        let s = set(3, "Retain", "Delete");
        assert_eq!(fix(&claim(json!([])), &s, &pod(1)), None);
        // Delete/Delete: the set in range, the pod once scaled down (the set's ref goes).
        let s = set(3, "Delete", "Delete");
        assert_eq!(
            uids(&fix(&claim(json!([])), &s, &pod(1)).unwrap()),
            vec![("set-uid", Some(true))]
        );
        let s = set(1, "Delete", "Delete");
        let set_owned = claim(
            json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
            "uid": "set-uid", "controller": true, "blockOwnerDeletion": true}]),
        );
        assert_eq!(
            uids(&fix(&set_owned, &s, &pod(1)).unwrap()),
            vec![("pod-1", Some(true))]
        );
    }

    #[test]
    fn foreign_controllers_and_stale_refs_are_left_alone() {
        let s = set(3, "Delete", "Retain");
        let foreign = claim(
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "other", "controller": true}]),
        );
        assert_eq!(fix(&foreign, &s, &pod(1)), None);
        let stale = claim(
            json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "old-set", "controller": true}]),
        );
        assert_eq!(fix(&stale, &s, &pod(1)), None);
        // A plain (non-controller) ref of ours is upgraded; other owners are kept.
        let plain = claim(json!([
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "set-uid"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "cm"}]));
        assert_eq!(
            uids(&fix(&plain, &s, &pod(1)).unwrap()),
            vec![("cm", None), ("set-uid", Some(true))]
        );
    }
}
