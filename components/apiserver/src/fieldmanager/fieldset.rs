//! Field sets: which fields of an object a manager owns, as paths, and their `fieldsV1` encoding
//! (`f:<field>`, `k:<key fields as JSON>`, `v:<set member as JSON>`, `i:<index>`, `.` = the node
//! itself). Lists are keyed by the built-in kinds' list-map keys from `list_keys`, by schema path,
//! as structured merge diff does with the OpenAPI schema; a list with no known key is atomic (one
//! leaf).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::list_keys::{apply_list, field_path, item_path, ApplyList, KeyField};

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Elem {
    Field(String),
    /// An item of a keyed list: its key fields as canonical JSON (`{"name":"app"}`).
    Key(String),
    /// A member of a set list (finalizers), as JSON.
    Value(String),
    Index(usize),
}

pub type Path = Vec<Elem>;
pub type FieldSet = BTreeSet<Path>;

/// The schema path (`list_keys`' notation) of a field-set path: `.spec.containers[name="a"].ports`
/// → `spec.containers[].ports`.
pub fn schema_path(path: &[Elem]) -> String {
    let mut s = String::new();
    for e in path {
        match e {
            Elem::Field(f) => s = field_path(&s, f),
            Elem::Key(_) | Elem::Value(_) | Elem::Index(_) => s = item_path(&s),
        }
    }
    s
}

/// The key fields of the keyed list at `path` (with the default a key field takes when an item
/// omits it); `None` = not a keyed list.
pub fn list_keys(path: &[Elem]) -> Option<&'static [KeyField]> {
    match apply_list(&schema_path(path)) {
        ApplyList::Map(keys) => Some(keys),
        ApplyList::Atomic | ApplyList::Set => None,
    }
}

/// Is the list at `path` a set of scalars?
pub fn is_set_list(path: &[Elem]) -> bool {
    apply_list(&schema_path(path)) == ApplyList::Set
}

/// An item's key (canonical JSON of its key fields), if it has every key field or its default.
pub fn key_of(item: &Value, keys: &[KeyField]) -> Option<String> {
    let mut m = Map::new();
    for (k, default) in keys {
        match (item.get(*k), default) {
            (Some(v), _) if !v.is_null() => {
                m.insert((*k).to_string(), v.clone());
            }
            (_, Some(d)) => {
                m.insert((*k).to_string(), Value::String((*d).to_string()));
            }
            _ => return None,
        }
    }
    Some(Value::Object(m).to_string())
}

/// The set of fields an object sets: leaves (scalars, nulls, empty objects, atomic lists), keyed
/// list items themselves (and their fields), and set members.
pub fn field_set(obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    if let Value::Object(m) = obj {
        walk_object(m, &mut Vec::new(), &mut out);
    }
    out
}

fn walk_object(m: &Map<String, Value>, path: &mut Path, out: &mut FieldSet) {
    for (k, v) in m {
        path.push(Elem::Field(k.clone()));
        match v {
            Value::Object(child) if !child.is_empty() => walk_object(child, path, out),
            Value::Array(items) => walk_list(items, path, out),
            _ => {
                out.insert(path.clone());
            }
        }
        path.pop();
    }
}

fn walk_list(items: &[Value], path: &mut Path, out: &mut FieldSet) {
    if is_set_list(path) && items.iter().all(|i| !i.is_object() && !i.is_array()) {
        for i in items {
            path.push(Elem::Value(i.to_string()));
            out.insert(path.clone());
            path.pop();
        }
        return;
    }
    if let Some(keys) = list_keys(path) {
        let keyed: Option<Vec<String>> = items.iter().map(|i| key_of(i, keys)).collect();
        if let Some(keyed) = keyed.filter(|_| items.iter().all(Value::is_object)) {
            for (item, key) in items.iter().zip(keyed) {
                path.push(Elem::Key(key));
                out.insert(path.clone());
                if let Value::Object(m) = item {
                    walk_object(m, path, out);
                }
                path.pop();
            }
            return;
        }
    }
    out.insert(path.clone());
}

/// The value a path names in an object, if present.
pub fn value_at<'a>(obj: &'a Value, path: &[Elem]) -> Option<&'a Value> {
    let mut cur = obj;
    for (i, e) in path.iter().enumerate() {
        cur = match e {
            Elem::Field(f) => cur.get(f.as_str())?,
            Elem::Key(k) => {
                let items = cur.as_array()?;
                let keys = list_keys(&path[..i])?;
                items
                    .iter()
                    .find(|i| key_of(i, keys).as_deref() == Some(k.as_str()))?
            }
            Elem::Value(v) => cur.as_array()?.iter().find(|i| i.to_string() == *v)?,
            Elem::Index(n) => cur.as_array()?.get(*n)?,
        };
    }
    Some(cur)
}

fn encode(e: &Elem) -> String {
    match e {
        Elem::Field(f) => format!("f:{f}"),
        Elem::Key(k) => format!("k:{k}"),
        Elem::Value(v) => format!("v:{v}"),
        Elem::Index(i) => format!("i:{i}"),
    }
}

/// Canonical JSON (sorted keys) of a `k:`/`v:` payload.
fn canonical(json: &str) -> Option<String> {
    serde_json::from_str::<Value>(json)
        .ok()
        .map(|v| v.to_string())
}

fn decode(s: &str) -> Option<Elem> {
    let (kind, rest) = s.split_at_checked(2)?;
    Some(match kind {
        "f:" => Elem::Field(rest.to_string()),
        "k:" => Elem::Key(canonical(rest)?),
        "v:" => Elem::Value(canonical(rest)?),
        "i:" => Elem::Index(rest.parse().ok()?),
        _ => return None,
    })
}

/// The `fieldsV1` object of a set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        insert_path(&mut root, path);
    }
    collapse(&mut root);
    Value::Object(root)
}

fn insert_path(node: &mut Map<String, Value>, path: &[Elem]) {
    match path.split_first() {
        None => {
            node.insert(".".into(), Value::Object(Map::new()));
        }
        Some((e, rest)) => {
            let child = node
                .entry(encode(e))
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = child {
                insert_path(m, rest);
            }
        }
    }
}

/// `{".": {}}` alone is a leaf, written `{}`.
fn collapse(node: &mut Map<String, Value>) {
    for child in node.values_mut() {
        if let Value::Object(m) = child {
            collapse(m);
            if m.len() == 1 && m.contains_key(".") {
                m.clear();
            }
        }
    }
}

/// The set a `fieldsV1` object encodes; unreadable elements are skipped.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(m: &Map<String, Value>, path: &mut Path, out: &mut FieldSet) {
        for (k, child) in m {
            if k == "." {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                continue;
            }
            let Some(e) = decode(k) else { continue };
            path.push(e);
            match child {
                Value::Object(c) if !c.is_empty() => walk(c, path, out),
                _ => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    if let Value::Object(m) = v {
        walk(m, &mut Vec::new(), &mut out);
    }
    out
}

/// A path as upstream prints it in conflicts: `.spec.containers[name="app"].image`.
pub fn path_string(path: &[Elem]) -> String {
    let mut s = String::new();
    for e in path {
        match e {
            Elem::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Elem::Key(k) => {
                let fields: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                s.push_str(&format!("[{}]", fields.join(",")));
            }
            Elem::Value(v) => s.push_str(&format!("[={v}]")),
            Elem::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Does `path` end in a list item or set member (whose presence, not value, is owned)?
pub fn is_item(path: &[Elem]) -> bool {
    matches!(path.last(), Some(Elem::Key(_) | Elem::Value(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> Elem {
        Elem::Field(s.into())
    }

    #[test]
    fn field_set_keys_lists_and_encodes_like_upstream() {
        let d = json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "app", "image": "i:1", "ports": [{"containerPort": 80}], "args": ["a"]}]}}}});
        let set = field_set(&d);
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"app\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn value_at_follows_keys_and_paths_print_like_upstream() {
        let d = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let p = vec![
            f("spec"),
            f("containers"),
            Elem::Key(r#"{"name":"b"}"#.into()),
            f("image"),
        ];
        assert_eq!(value_at(&d, &p), Some(&json!("y")));
        assert_eq!(path_string(&p), ".spec.containers[name=\"b\"].image");
        let fin = json!({"metadata": {"finalizers": ["x"]}});
        let set = field_set(&fin);
        assert!(set.contains(&vec![
            f("metadata"),
            f("finalizers"),
            Elem::Value("\"x\"".into())
        ]));
    }

    #[test]
    fn field_sets_follow_upstream_list_types() {
        // Taints, EndpointSlice ports, a Namespace's spec.finalizers and a ServiceAccount's
        // imagePullSecrets are atomic lists (one leaf), not keyed or set lists as guessed by
        // field name before; a ServiceAccount's secrets are keyed by name.
        let v1 = to_fields_v1(&field_set(&json!({
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "finalizers": ["kubernetes"]},
            "ports": [{"port": 80}],
            "imagePullSecrets": [{"name": "p"}],
            "secrets": [{"name": "s"}]})));
        assert_eq!(
            v1,
            json!({"f:spec": {"f:taints": {}, "f:finalizers": {}}, "f:ports": {},
                "f:imagePullSecrets": {},
                "f:secrets": {"k:{\"name\":\"s\"}": {".": {}, "f:name": {}}}})
        );
        // A Service's ports are keyed by port and protocol (defaulted), a Node's podCIDRs a set.
        let v1 = to_fields_v1(&field_set(&json!({
            "spec": {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53}], "podCIDRs": ["a"]}})));
        assert_eq!(
            v1,
            json!({"f:spec": {"f:podCIDRs": {"v:\"a\"": {}}, "f:ports": {
                "k:{\"port\":53,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}},
                "k:{\"port\":53,\"protocol\":\"UDP\"}": {".": {}, "f:port": {}, "f:protocol": {}}}}})
        );
    }
}
