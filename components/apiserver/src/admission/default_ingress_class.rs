//! DefaultIngressClass: an Ingress created without a class (no spec.ingressClassName, no
//! `kubernetes.io/ingress.class` annotation) gets the IngressClass annotated
//! `ingressclass.kubernetes.io/is-default-class: "true"`; with several defaults the newest wins, ties
//! by name, as upstream's plugin. Pure: the caller lists the classes.

use serde_json::{json, Value};

use super::default_storage_class::newest_default;
use crate::registry::networking::DEFAULT_INGRESS_CLASS_ANNOTATION;

/// The annotation older Ingresses name their class with; it counts as a class.
const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

fn is_default(class: &Value) -> bool {
    class["metadata"]["annotations"][DEFAULT_INGRESS_CLASS_ANNOTATION] == "true"
}

/// Fills in the default class; returns the class set, if any.
pub fn admit(ingress: &mut Value, classes: &[Value]) -> Option<String> {
    let has_class = !ingress["spec"]["ingressClassName"].is_null()
        || ingress["metadata"]["annotations"]
            .get(LEGACY_CLASS_ANNOTATION)
            .is_some();
    if has_class {
        return None;
    }
    let class = newest_default(classes, is_default)?;
    if !ingress["spec"].is_object() {
        ingress["spec"] = json!({});
    }
    ingress["spec"]["ingressClassName"] = json!(class);
    Some(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, default: bool, created: &str) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if default {
            c["metadata"]["annotations"] = json!({DEFAULT_INGRESS_CLASS_ANNOTATION: "true"});
        }
        c
    }

    #[test]
    fn the_newest_default_then_the_lower_name_wins() {
        let classes = [
            class("old", true, "2026-01-01T00:00:00Z"),
            class("plain", false, "2026-03-01T00:00:00Z"),
            class("b", true, "2026-02-01T00:00:00Z"),
            class("a", true, "2026-02-01T00:00:00Z"),
        ];
        let mut ing = json!({"metadata": {"name": "i"}, "spec": {}});
        assert_eq!(admit(&mut ing, &classes).as_deref(), Some("a"));
        assert_eq!(ing["spec"]["ingressClassName"], "a");
    }

    #[test]
    fn a_named_or_annotated_class_is_kept_and_no_default_sets_none() {
        let classes = [class("d", true, "2026-01-01T00:00:00Z")];
        let mut named = json!({"spec": {"ingressClassName": "mine"}});
        assert_eq!(admit(&mut named, &classes), None);
        let mut legacy = json!({"metadata": {"annotations": {LEGACY_CLASS_ANNOTATION: "nginx"}}});
        assert_eq!(admit(&mut legacy, &classes), None);
        let mut bare = json!({"spec": {}});
        assert_eq!(
            admit(&mut bare, &[class("x", false, "2026-01-01T00:00:00Z")]),
            None
        );
        assert!(bare["spec"]["ingressClassName"].is_null());
    }
}
