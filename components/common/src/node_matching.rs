//! Label and taint matching, with upstream's rules (component-helpers' nodeaffinity and taints): node
//! selector terms (matchExpressions on labels, matchFields on metadata.name) and tolerations against
//! taints. The scheduler's filters and scores, the daemonset controller (which node gets a pod) and the
//! node lifecycle controller (taint-based eviction) must agree on them, so they live here once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration,
};

fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        // Gt/Lt compare integers; a non-integer label or a malformed value never matches.
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) if req.operator == "Gt" => v > b,
                (Ok(v), Ok(b)) => v < b,
                _ => false,
            }
        }
        _ => false,
    }
}

/// One term: all its requirements must hold; a term with no requirements matches nothing.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.metadata.labels.as_ref();
    let label_ok = exprs
        .iter()
        .all(|r| requirement_matches(r, labels.and_then(|l| l.get(&r.key)).map(String::as_str)));
    let field_ok = fields.iter().all(|r| {
        let value = match r.key.as_str() {
            "metadata.name" => node.metadata.name.as_deref(),
            _ => None,
        };
        requirement_matches(r, value)
    });
    label_ok && field_ok
}

/// Terms are ORed.
pub fn any_term_matches(terms: &[NodeSelectorTerm], node: &Node) -> bool {
    terms.iter().any(|t| term_matches(t, node))
}

/// spec.nodeSelector: every key must be present with exactly that value.
pub fn selector_matches(selector: &BTreeMap<String, String>, node: &Node) -> bool {
    let labels = node.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// v1.Toleration.ToleratesTaint.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref() {
        if !effect.is_empty() && effect != taint.effect {
            return false;
        }
    }
    let key = toleration.key.as_deref().unwrap_or("");
    let op = toleration.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        // An empty key with Exists tolerates everything; an empty key with Equal is invalid.
        return op == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match op {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}})).unwrap()
    }

    fn term(v: serde_json::Value) -> NodeSelectorTerm {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn node_selector_terms() {
        let n = node(json!({"zone": "a", "gen": "5"}));
        let t = |v| term_matches(&term(v), &n);
        assert!(t(
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]})
        ));
        assert!(!t(
            json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})
        ));
        assert!(t(
            json!({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]})
        ));
        assert!(t(
            json!({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]})
        ));
        assert!(!t(
            json!({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]})
        ));
        assert!(t(
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
        ));
        assert!(!t(json!({})), "an empty term matches nothing");
    }

    #[test]
    fn tolerations_follow_upstream_rules() {
        let taint: Taint = serde_json::from_value(
            json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"}),
        )
        .unwrap();
        let tol = |v| tolerates(&serde_json::from_value::<Toleration>(v).unwrap(), &taint);
        assert!(tol(
            json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"})
        ));
        assert!(tol(json!({"key": "dedicated", "operator": "Exists"})));
        assert!(tol(json!({"operator": "Exists"})));
        assert!(!tol(json!({"key": "dedicated", "value": "web"})));
        assert!(!tol(
            json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"})
        ));
        assert!(!tol(json!({"key": "other", "operator": "Exists"})));
    }
}
