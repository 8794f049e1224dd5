//! metav1.LabelSelector matching (matchLabels and matchExpressions: In, NotIn, Exists, DoesNotExist).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// An empty selector matches everything (upstream semantics for a non-nil empty selector); a missing
/// one matches nothing — controllers with no selector own nothing.
pub fn matches(
    selector: Option<&LabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let get = |k: &str| labels.and_then(|l| l.get(k));
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// `a=b,c=d` for list calls and kubectl-like messages.
pub fn to_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        let l =
            |v: serde_json::Value| serde_json::from_value::<BTreeMap<String, String>>(v).unwrap();
        assert!(matches(
            Some(&sel),
            Some(&l(json!({"app": "web", "tier": "a"})))
        ));
        assert!(!matches(
            Some(&sel),
            Some(&l(json!({"app": "web", "tier": "c"})))
        ));
        assert!(!matches(
            Some(&sel),
            Some(&l(json!({"app": "web", "tier": "a", "canary": "1"})))
        ));
        assert!(!matches(None, Some(&l(json!({"app": "web"})))));
        assert!(matches(Some(&LabelSelector::default()), None));
        assert_eq!(to_string(&sel), "app=web,tier in (a,b),!canary");
    }
}
