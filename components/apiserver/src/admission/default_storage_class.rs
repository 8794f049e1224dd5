//! DefaultStorageClass: a claim created without any class (no spec.storageClassName, no beta
//! annotation) gets the default StorageClass. Several defaults: the newest wins, ties by name, as
//! upstream's GetDefaultClass since 1.28; none: the claim stays classless (the PV controller may
//! assign one later, RetroactiveDefaultStorageClass). Pure: the caller lists the classes.

use serde_json::{json, Value};

use crate::registry::storage::BETA_STORAGE_CLASS;
use crate::registry::storage_classes::is_default_class;

/// helper.PersistentVolumeClaimHasClass: an explicit "" counts as a class (it means "no class").
pub fn has_class(pvc: &Value) -> bool {
    !pvc["spec"]["storageClassName"].is_null()
        || pvc["metadata"]["annotations"]
            .get(BETA_STORAGE_CLASS)
            .is_some()
}

/// The default class's name among `classes`, if any class is marked default.
pub fn default_class(classes: &[Value]) -> Option<String> {
    newest_default(classes, is_default_class)
}

/// Among the classes `is_default` marks, the newest by creationTimestamp, ties by lower name:
/// how upstream picks a default StorageClass and a default IngressClass alike.
pub fn newest_default(classes: &[Value], is_default: fn(&Value) -> bool) -> Option<String> {
    let created = |c: &Value| {
        c["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|s| {
                time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
            })
            .map(|t| t.unix_timestamp_nanos())
            .unwrap_or(0)
    };
    let name = |c: &Value| c["metadata"]["name"].as_str().unwrap_or("").to_string();
    classes
        .iter()
        .filter(|c| is_default(c))
        .min_by(|a, b| {
            created(b)
                .cmp(&created(a))
                .then_with(|| name(a).cmp(&name(b)))
        })
        .map(name)
}

/// Fills in the default class; returns the class set, if any.
pub fn admit(pvc: &mut Value, classes: &[Value]) -> Option<String> {
    if has_class(pvc) {
        return None;
    }
    let class = default_class(classes)?;
    if !pvc["spec"].is_object() {
        pvc["spec"] = json!({});
    }
    pvc["spec"]["storageClassName"] = json!(class);
    Some(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(name: &str, default: bool, created: &str) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if default {
            c["metadata"]["annotations"] =
                json!({"storageclass.kubernetes.io/is-default-class": "true"});
        }
        c
    }

    #[test]
    fn a_classless_claim_gets_the_default() {
        let classes = [
            sc("fast", false, "2026-01-01T00:00:00Z"),
            sc("local-path", true, "2026-01-01T00:00:00Z"),
        ];
        let mut pvc = json!({"spec": {"accessModes": ["ReadWriteOnce"]}});
        assert_eq!(admit(&mut pvc, &classes).as_deref(), Some("local-path"));
        assert_eq!(pvc["spec"]["storageClassName"], "local-path");
    }

    #[test]
    fn an_explicit_class_or_annotation_is_kept() {
        let classes = [sc("local-path", true, "2026-01-01T00:00:00Z")];
        let mut empty = json!({"spec": {"storageClassName": ""}});
        assert_eq!(admit(&mut empty, &classes), None);
        assert_eq!(empty["spec"]["storageClassName"], "");
        let mut beta =
            json!({"metadata": {"annotations": {BETA_STORAGE_CLASS: "old"}}, "spec": {}});
        assert_eq!(admit(&mut beta, &classes), None);
        assert!(beta["spec"]["storageClassName"].is_null());
    }

    #[test]
    fn the_newest_default_wins_then_the_first_name() {
        let classes = [
            sc("b", true, "2026-01-02T00:00:00Z"),
            sc("old", true, "2026-01-01T00:00:00Z"),
            sc("a", true, "2026-01-02T00:00:00Z"),
        ];
        assert_eq!(default_class(&classes).as_deref(), Some("a"));
        let beta = json!({"metadata": {"name": "beta", "creationTimestamp": "2026-02-01T00:00:00Z",
            "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "true"}}});
        assert_eq!(
            default_class(&[classes[0].clone(), beta]).as_deref(),
            Some("beta")
        );
    }

    #[test]
    fn no_default_leaves_the_claim_classless() {
        let mut pvc = json!({"spec": {}});
        assert_eq!(
            admit(&mut pvc, &[sc("fast", false, "2026-01-01T00:00:00Z")]),
            None
        );
        assert!(pvc["spec"]["storageClassName"].is_null());
    }
}
