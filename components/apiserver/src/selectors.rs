//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and field selectors (`=`, `==`,
//! `!=` over a kind's selectable fields), parsed once per request and matched against JSON objects.

use serde_json::Value;

/// The fields a kind can be selected by (`metadata.name`, `spec.nodeName`, ...), as JSON pointers.
/// A trait so selectors sit below the registry, whose `ResourceSpec` implements it.
pub trait SelectableFields {
    /// The pointer a field selector's field reads, or None when the kind cannot be selected by it.
    fn field_pointer(&self, field: &str) -> Option<&'static str>;
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Parse(String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

#[derive(Debug, Clone, PartialEq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// Splits on commas that are not inside a `( ... )` value set.
fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '(' => {
                depth += 1;
                cur.push(ch)
            }
            ')' => {
                depth -= 1;
                cur.push(ch)
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(ch),
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn value_set(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Parse(whole.to_string()))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(s) {
            let err = || SelectorError::Parse(part.clone());
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::NotExists,
                }
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelRequirement {
                    key: k.trim().to_string(),
                    op: LabelOp::NotIn(vec![v.trim().to_string()]),
                }
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                LabelRequirement {
                    key: k.trim().to_string(),
                    op: LabelOp::In(vec![v.trim().to_string()]),
                }
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelRequirement {
                    key: k.trim().to_string(),
                    op: LabelOp::NotIn(value_set(rest, &part)?),
                }
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelRequirement {
                    key: k.trim().to_string(),
                    op: LabelOp::In(value_set(rest, &part)?),
                }
            } else {
                LabelRequirement {
                    key: part.clone(),
                    op: LabelOp::Exists,
                }
            };
            if !valid_key(&req.key) {
                return Err(err());
            }
            requirements.push(req);
        }
        Ok(LabelSelector { requirements })
    }

    /// No requirements: matches every object.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.requirements.iter().all(|r| {
            let v = labels.get(&r.key).and_then(Value::as_str);
            match &r.op {
                LabelOp::Exists => v.is_some(),
                LabelOp::NotExists => v.is_none(),
                LabelOp::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::NotIn(set) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
struct FieldRequirement {
    pointer: &'static str,
    value: String,
    equal: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// A field's value as the selector compares it: strings as is, bools/numbers in their text form,
/// a missing field as "". A pointer `a|b` reads `b` where `a` is empty or missing (an event's
/// `source` is its reporting controller when it has no source component, as upstream); `a|=text`
/// falls back to the literal `text` (upstream formats a Go bool's zero value: a node without
/// spec.unschedulable matches `spec.unschedulable=false`).
fn field_text(obj: &Value, pointer: &str) -> String {
    pointer
        .split('|')
        .map(|p| match p.strip_prefix('=') {
            Some(literal) => literal.to_string(),
            None => match obj.pointer(p) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            },
        })
        .find(|v| !v.is_empty())
        .unwrap_or_default()
}

impl FieldSelector {
    pub fn parse(s: &str, spec: &impl SelectableFields) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(s) {
            let (field, value, equal) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, v, true)
            } else {
                return Err(SelectorError::Parse(part.clone()));
            };
            let field = field.trim();
            let pointer = spec
                .field_pointer(field)
                .ok_or_else(|| SelectorError::UnsupportedField(field.to_string()))?;
            requirements.push(FieldRequirement {
                pointer,
                value: value.trim().to_string(),
                equal,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// No requirements: matches every object.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_text(obj, r.pointer) == r.value) == r.equal)
    }
}

/// A metav1.LabelSelector object in string form, as upstream's `metav1.FormatLabelSelector`
/// (Scale's `status.selector`, kubectl's SELECTOR column).
pub fn label_selector_string(selector: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = selector["matchLabels"].as_object() {
        let mut pairs: Vec<(&String, &Value)> = m.iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        parts.extend(
            pairs
                .into_iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))),
        );
    }
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or("");
        let mut values: Vec<&str> = e["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        values.sort_unstable();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::{NODES, PODS};
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web,db)"));
        assert!(m("!missing"));
        assert!(!m("missing"));
        assert!(m("missing notin (x)"));
        assert!(m(""));
    }

    #[test]
    fn bad_label_selector_is_an_error() {
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors_per_kind() {
        let o = obj(json!({}));
        let m = |s: &str| FieldSelector::parse(s, &PODS).unwrap().matches(&o);
        assert!(m("spec.nodeName=n1"));
        assert!(m("metadata.name=a,metadata.namespace=ns"));
        assert!(!m("spec.nodeName!=n1"));
        assert!(m("status.phase==Running"));
        // A node without spec.unschedulable is schedulable: `false`, as upstream's FormatBool.
        let node = |n: Value| move |s: &str| FieldSelector::parse(s, &NODES).unwrap().matches(&n);
        let plain = node(json!({"metadata": {"name": "n"}, "spec": {}}));
        assert!(plain("spec.unschedulable=false") && !plain("spec.unschedulable=true"));
        let cordoned = node(json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}));
        assert!(cordoned("spec.unschedulable==true") && !cordoned("spec.unschedulable=false"));
        assert_eq!(
            FieldSelector::parse("spec.nodeName=x", &NODES),
            Err(SelectorError::UnsupportedField("spec.nodeName".into()))
        );
    }
}
