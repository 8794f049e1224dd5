//! The naming pass (upstream's naming controller): a CRD's requested names are accepted unless
//! another CRD of the same group already holds one of them; then its conditions say so. Pure.

use serde_json::{json, Value};

/// One status condition as the naming pass decides it (lastTransitionTime is the caller's).
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// What the naming pass sets on one CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct Naming {
    /// status.acceptedNames: the requested names when they are free, else the ones held before.
    pub accepted: Value,
    pub names_accepted: Condition,
    pub established: Condition,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Names of `crd` compared with those `others` (the rest of the CRDs) have accepted; a built-in
/// resource of the same group and plural (`builtin_plural`) is a conflict too.
pub fn decide(crd: &Value, others: &[&Value], builtin_plural: bool) -> Naming {
    let group = crd["spec"]["group"].as_str().unwrap_or("");
    let requested = &crd["spec"]["names"];
    let same_group: Vec<&Value> = others
        .iter()
        .copied()
        .filter(|o| o["spec"]["group"].as_str() == Some(group))
        .filter(|o| o["metadata"]["name"] != crd["metadata"]["name"])
        .map(|o| &o["status"]["acceptedNames"])
        .collect();
    let taken = |field: &str, value: &str| {
        !value.is_empty() && same_group.iter().any(|n| n[field].as_str() == Some(value))
    };
    let plural = requested["plural"].as_str().unwrap_or("");
    let singular = requested["singular"].as_str().unwrap_or("");
    let kind = requested["kind"].as_str().unwrap_or("");
    let list_kind = requested["listKind"].as_str().unwrap_or("");
    let shorts = strings(&requested["shortNames"]);
    let conflict = if builtin_plural || taken("plural", plural) || taken("singular", plural) {
        Some(("PluralConflict", format!("{plural:?} is already in use")))
    } else if taken("singular", singular) || taken("plural", singular) {
        Some((
            "SingularConflict",
            format!("{singular:?} is already in use"),
        ))
    } else if let Some(s) = shorts.iter().find(|s| {
        same_group
            .iter()
            .any(|n| strings(&n["shortNames"]).contains(s))
    }) {
        Some(("ShortNamesConflict", format!("{s:?} is already in use")))
    } else if taken("kind", kind) || taken("listKind", kind) {
        Some(("KindConflict", format!("{kind:?} is already in use")))
    } else if taken("listKind", list_kind) || taken("kind", list_kind) {
        Some((
            "ListKindConflict",
            format!("{list_kind:?} is already in use"),
        ))
    } else {
        None
    };
    let held = &crd["status"]["acceptedNames"];
    let was_established = crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    match conflict {
        None => Naming {
            accepted: accepted_names(requested),
            names_accepted: Condition {
                type_: "NamesAccepted",
                status: "True",
                reason: "NoConflicts",
                message: "no conflicts found".into(),
            },
            established: established(),
        },
        Some((reason, message)) => Naming {
            accepted: if held.is_object() {
                held.clone()
            } else {
                json!({"plural": "", "kind": ""})
            },
            names_accepted: Condition {
                type_: "NamesAccepted",
                status: "False",
                reason,
                message,
            },
            established: if was_established {
                established()
            } else {
                Condition {
                    type_: "Established",
                    status: "False",
                    reason: "NotAccepted",
                    message: "not all names are accepted".into(),
                }
            },
        },
    }
}

fn established() -> Condition {
    Condition {
        type_: "Established",
        status: "True",
        reason: "InitialNamesAccepted",
        message: "the initial names have been accepted".into(),
    }
}

/// The accepted-names object as upstream writes it (empty lists omitted).
fn accepted_names(requested: &Value) -> Value {
    let mut out = json!({});
    for field in ["plural", "singular", "kind", "listKind"] {
        if let Some(v) = requested[field].as_str().filter(|v| !v.is_empty()) {
            out[field] = json!(v);
        }
    }
    for field in ["shortNames", "categories"] {
        if requested[field].as_array().is_some_and(|a| !a.is_empty()) {
            out[field] = requested[field].clone();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str, plural: &str, kind: &str, accepted: bool) -> Value {
        let names = json!({"plural": plural, "singular": plural.trim_end_matches('s'), "kind": kind,
                           "listKind": format!("{kind}List"), "shortNames": [&plural[..2]]});
        json!({"metadata": {"name": name}, "spec": {"group": "example.com", "names": names},
               "status": {"acceptedNames": if accepted { names.clone() } else { json!({"plural": "", "kind": ""}) }}})
    }

    #[test]
    fn free_names_are_accepted_and_established() {
        let a = crd("widgets.example.com", "widgets", "Widget", false);
        let n = decide(&a, &[], false);
        assert_eq!(n.accepted["plural"], "widgets");
        assert_eq!(
            (n.names_accepted.status, n.names_accepted.reason),
            ("True", "NoConflicts")
        );
        assert_eq!(
            (n.established.status, n.established.reason),
            ("True", "InitialNamesAccepted")
        );
    }

    #[test]
    fn a_name_another_crd_holds_is_a_conflict() {
        let held = crd("widgets.example.com", "widgets", "Widget", true);
        let b = crd("gadgets.example.com", "gadgets", "Widget", false);
        let n = decide(&b, &[&held], false);
        assert_eq!(n.names_accepted.reason, "KindConflict");
        assert_eq!(n.names_accepted.message, "\"Widget\" is already in use");
        assert_eq!(
            (n.established.status, n.established.reason),
            ("False", "NotAccepted")
        );
        let c = crd("wibbles.example.com", "wibbles", "Wibble", false);
        assert_eq!(
            decide(&c, &[&held], false).names_accepted.reason,
            "ShortNamesConflict"
        );
        assert_eq!(
            decide(&held, &[&held.clone()], false).names_accepted.reason,
            "NoConflicts"
        );
    }
}
