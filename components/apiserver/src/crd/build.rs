//! A CRD's served versions as `ResourceSpec`s. The registry holds `&'static` specs (built-in kinds
//! are statics), so a custom spec is leaked once per distinct definition and reused while the CRD is
//! unchanged: memory grows only with the number of distinct CRD revisions an apiserver ever serves.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::custom_resource::{CustomResource, CustomScale, PrinterColumn};
use crate::registry::strategy::{ScaleSpec, SelectableField, ALL_VERBS};
use crate::registry::ResourceSpec;

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_list(v: &Value) -> &'static [&'static str] {
    let items: Vec<&'static str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(leak)
        .collect();
    Box::leak(items.into_boxed_slice())
}

/// `.spec.replicas` → `/spec/replicas` (the dotted subset scale paths and selectable fields use).
pub fn dotted_to_pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |mut acc, part| {
            acc.push('/');
            acc.push_str(&part.replace('~', "~0").replace('/', "~1"));
            acc
        })
}

/// Kubernetes' version priority: GA > beta > alpha, higher numbers first, then other names
/// alphabetically — the order discovery lists a group's versions in (the first is preferred).
pub fn version_priority(a: &str, b: &str) -> std::cmp::Ordering {
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        for (tag, rank) in [("beta", 2u8), ("alpha", 1u8)] {
            if let Some(n) = tail.strip_prefix(tag) {
                return Some((rank, major, n.parse().ok()?));
            }
        }
        None
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Leaked specs by the JSON of what they were built from.
static CACHE: Mutex<Option<HashMap<String, &'static ResourceSpec>>> = Mutex::new(None);

/// Every served version of `crd`, highest priority first. `terminating`: the CRD is being deleted.
pub fn specs(crd: &Value, terminating: bool) -> Vec<&'static ResourceSpec> {
    let spec = &crd["spec"];
    let mut versions: Vec<&Value> = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .collect();
    versions.sort_by(|a, b| {
        version_priority(
            a["name"].as_str().unwrap_or(""),
            b["name"].as_str().unwrap_or(""),
        )
    });
    let storage = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or("")
        .to_string();
    let names = accepted_names(crd);
    versions
        .into_iter()
        .map(|v| {
            let key = serde_json::json!([
                crd["metadata"]["name"],
                // A spec change bumps generation: A -> B -> A builds afresh, with a new
                // `defaults_since`, instead of reusing A's first build.
                crd["metadata"]["generation"],
                spec["group"],
                spec["scope"],
                spec["conversion"],
                names,
                v,
                storage,
                terminating
            ])
            .to_string();
            let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
            let cache = cache.get_or_insert_with(HashMap::new);
            *cache.entry(key).or_insert_with(|| {
                Box::leak(Box::new(version_spec(
                    crd,
                    &names,
                    v,
                    &storage,
                    terminating,
                )))
            })
        })
        .collect()
}

/// The names the CRD is served under: status.acceptedNames once the naming pass accepted them.
fn accepted_names(crd: &Value) -> Value {
    let accepted = &crd["status"]["acceptedNames"];
    if accepted["plural"].as_str().is_some_and(|p| !p.is_empty()) {
        accepted.clone()
    } else {
        crd["spec"]["names"].clone()
    }
}

fn version_spec(
    crd: &Value,
    names: &Value,
    v: &Value,
    storage: &str,
    terminating: bool,
) -> ResourceSpec {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = names["plural"].as_str().unwrap_or("");
    let kind = names["kind"].as_str().unwrap_or("");
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let list_kind = names["listKind"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let subresources = &v["subresources"];
    let scale = subresources
        .get("scale")
        .filter(|s| s.is_object())
        .map(|s| CustomScale {
            spec_replicas: dotted_to_pointer(
                s["specReplicasPath"].as_str().unwrap_or(".spec.replicas"),
            ),
            status_replicas: dotted_to_pointer(
                s["statusReplicasPath"]
                    .as_str()
                    .unwrap_or(".status.replicas"),
            ),
            label_selector: s["labelSelectorPath"].as_str().map(dotted_to_pointer),
        });
    let printer_columns = v["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| PrinterColumn {
            name: c["name"].as_str().unwrap_or("").to_string(),
            type_: c["type"].as_str().unwrap_or("string").to_string(),
            format: c["format"].as_str().unwrap_or("").to_string(),
            description: c["description"].as_str().unwrap_or("").to_string(),
            priority: c["priority"].as_u64().unwrap_or(0).min(255) as u8,
            json_path: c["jsonPath"].as_str().unwrap_or("").to_string(),
        })
        .collect();
    let version = v["name"].as_str().unwrap_or("");
    let deprecation = (v["deprecated"].as_bool() == Some(true)).then(|| {
        v["deprecationWarning"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{group}/{version} {kind} is deprecated"))
    });
    let custom = CustomResource {
        crd_name: crd["metadata"]["name"].as_str().unwrap_or("").to_string(),
        schema: v["schema"].get("openAPIV3Schema").cloned(),
        storage_version: storage.to_string(),
        printer_columns,
        scale: scale.clone(),
        deprecation,
        terminating,
        defaults_since: crd["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(i64::MAX),
        conversion_webhook: (spec["conversion"]["strategy"] == "Webhook")
            .then(|| spec["conversion"]["webhook"].clone()),
        has_defaults: v["schema"]
            .get("openAPIV3Schema")
            .is_some_and(crate::custom_resource::defaulting::declares_defaults),
    };
    let fields: Vec<SelectableField> = v["selectableFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["jsonPath"].as_str())
        .map(|p| SelectableField {
            name: leak(p.trim_start_matches('.')),
            pointer: leak(&dotted_to_pointer(p)),
        })
        .collect();
    ResourceSpec {
        group: leak(group),
        version: leak(version),
        plural: leak(plural),
        singular: leak(&singular),
        kind: leak(kind),
        list_kind: leak(&list_kind),
        namespaced: spec["scope"].as_str() != Some("Cluster"),
        short_names: leak_list(&names["shortNames"]),
        categories: leak_list(&names["categories"]),
        verbs: ALL_VERBS,
        status_subresource: subresources.get("status").is_some_and(Value::is_object),
        generation: true,
        fields: Box::leak(fields.into_boxed_slice()),
        scale: scale.map(|s| ScaleSpec {
            selector: s.label_selector.as_deref().map(leak).unwrap_or(""),
            spec_replicas: leak(&s.spec_replicas),
            status_replicas: leak(&s.status_replicas),
        }),
        custom: Some(Box::leak(Box::new(custom))),
        key_root: Some(leak(&format!("/registry/{group}/{plural}"))),
        ..ResourceSpec::BASE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                        "versions": [
                            {"name": "v1beta1", "served": true, "storage": false,
                             "schema": {"openAPIV3Schema": {"type": "object"}}},
                            {"name": "v1", "served": true, "storage": true,
                             "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size",
                                 "statusReplicasPath": ".status.size", "labelSelectorPath": ".status.selector"}},
                             "selectableFields": [{"jsonPath": ".spec.color"}],
                             "schema": {"openAPIV3Schema": {"type": "object"}}},
                            {"name": "v0", "served": false, "storage": false}]}})
    }

    #[test]
    fn served_versions_become_specs_in_priority_order() {
        let specs = specs(&crd(), false);
        assert_eq!(
            specs.iter().map(|s| s.version).collect::<Vec<_>>(),
            vec!["v1", "v1beta1"]
        );
        let v1 = specs[0];
        assert_eq!(
            (v1.group, v1.plural, v1.singular, v1.list_kind),
            ("example.com", "widgets", "widget", "WidgetList")
        );
        assert_eq!(v1.short_names, &["wd"]);
        assert!(v1.status_subresource && v1.namespaced && v1.generation);
        assert_eq!(
            v1.key_prefix(Some("ns")),
            "/registry/example.com/widgets/ns/"
        );
        let scale = v1.scale.as_ref().unwrap();
        assert_eq!(
            (scale.spec_replicas, scale.status_replicas, scale.selector),
            ("/spec/size", "/status/size", "/status/selector")
        );
        assert_eq!(v1.field_pointer("spec.color"), Some("/spec/color"));
        assert_eq!(v1.custom.unwrap().storage_version, "v1");
        // The same definition is built (and leaked) once.
        assert!(std::ptr::eq(specs[0], super::specs(&crd(), false)[0]));
    }

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v2", "foo", "v1", "v2beta1", "v1beta2", "v10"];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            vec!["v10", "v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]
        );
    }
}
