//! Merging an applied configuration into the live object, and removing the fields an apply gave up.
//! Objects merge field by field, keyed lists item by item (by `fieldset::list_keys`), set lists as
//! sets; scalars and atomic lists are replaced.

use serde_json::{Map, Value};

use super::fieldset::{is_set_list, key_of, list_keys, Elem, FieldSet, Path};

/// `live` with `applied` merged in (`null` in the configuration removes a field).
pub fn merge_applied(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => merge_object(l, a),
        (live, applied) => *live = applied.clone(),
    }
}

fn merge_object(live: &mut Map<String, Value>, applied: &Map<String, Value>) {
    for (k, av) in applied {
        if av.is_null() {
            live.remove(k);
            continue;
        }
        match (live.get_mut(k), av) {
            (Some(Value::Object(l)), Value::Object(a)) => merge_object(l, a),
            (Some(Value::Array(l)), Value::Array(a)) => merge_list(k, l, a),
            _ => {
                live.insert(k.clone(), av.clone());
            }
        }
    }
}

fn merge_list(field: &str, live: &mut Vec<Value>, applied: &[Value]) {
    if is_set_list(field) {
        for item in applied {
            if !live.contains(item) {
                live.push(item.clone());
            }
        }
        return;
    }
    let keys = list_keys(field, applied).or_else(|| list_keys(field, live));
    let Some(keys) = keys else {
        *live = applied.to_vec();
        return;
    };
    for item in applied {
        let key = key_of(item, keys);
        let existing = key.as_ref().and_then(|k| {
            live.iter()
                .position(|l| key_of(l, keys).as_ref() == Some(k))
        });
        match (existing, item) {
            (Some(i), Value::Object(a)) => match &mut live[i] {
                Value::Object(l) => merge_object(l, a),
                other => *other = item.clone(),
            },
            (Some(i), _) => live[i] = item.clone(),
            (None, _) => live.push(item.clone()),
        }
    }
}

/// Removes every path of `remove` from `obj`, except list items and objects with a path of `keep`
/// beneath them (only their unowned fields go). Containers left empty by a removal are removed
/// too, below the top level (Go's `omitempty` would drop them the same way).
pub fn remove_paths(obj: &mut Value, remove: &FieldSet, keep: &FieldSet) {
    let mut paths: Vec<&Path> = remove.iter().collect();
    // Shallowest first: an item goes with its fields; its fields are then simply not found.
    paths.sort_by_key(|p| p.len());
    for path in paths {
        let kept_below = keep
            .iter()
            .any(|k| k.len() > path.len() && k.starts_with(path));
        if kept_below || is_key_field(path) {
            continue;
        }
        if remove_at(obj, path) {
            prune_empty(obj, path);
        }
    }
}

/// A key field of a list item that stays (removing it would orphan the item).
fn is_key_field(path: &[Elem]) -> bool {
    match path {
        [.., Elem::Key(k), Elem::Field(f)] => {
            serde_json::from_str::<Map<String, Value>>(k).is_ok_and(|m| m.contains_key(f.as_str()))
        }
        _ => false,
    }
}

/// Removes the node a path names; false when it was not there.
fn remove_at(obj: &mut Value, path: &[Elem]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let field = match parent_path.last() {
        Some(Elem::Field(f)) => f.clone(),
        _ => String::new(),
    };
    let Some(parent) = node_mut(obj, parent_path) else {
        return false;
    };
    match (last, parent) {
        (Elem::Field(f), Value::Object(m)) => m.remove(f).is_some(),
        (Elem::Key(k), Value::Array(items)) => {
            let keys = list_keys(&field, items);
            let before = items.len();
            if let Some(keys) = keys {
                items.retain(|i| key_of(i, keys).as_deref() != Some(k.as_str()));
            }
            items.len() != before
        }
        (Elem::Value(v), Value::Array(items)) => {
            let before = items.len();
            let member = serde_json::from_str::<Value>(v).ok();
            items.retain(|i| Some(i) != member.as_ref());
            items.len() != before
        }
        (Elem::Index(n), Value::Array(items)) if *n < items.len() => {
            items.remove(*n);
            true
        }
        _ => false,
    }
}

fn node_mut<'a>(obj: &'a mut Value, path: &[Elem]) -> Option<&'a mut Value> {
    let mut cur = obj;
    let mut field = String::new();
    for e in path {
        cur = match e {
            Elem::Field(f) => {
                field = f.clone();
                cur.get_mut(f.as_str())?
            }
            Elem::Key(k) => {
                let items = cur.as_array_mut()?;
                let keys = list_keys(&field, items)?;
                items
                    .iter_mut()
                    .find(|i| key_of(i, keys).as_deref() == Some(k.as_str()))?
            }
            Elem::Value(v) => cur
                .as_array_mut()?
                .iter_mut()
                .find(|i| i.to_string() == *v)?,
            Elem::Index(n) => cur.as_array_mut()?.get_mut(*n)?,
        };
    }
    Some(cur)
}

/// After a removal at `path`, removes the containers above it that it left empty (depth ≥ 2).
fn prune_empty(obj: &mut Value, path: &[Elem]) {
    for depth in (2..path.len()).rev() {
        let parent = &path[..depth];
        let empty = match node_mut(obj, parent) {
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if !empty || !remove_at(obj, parent) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fieldmanager::fieldset::field_set;
    use serde_json::json;

    #[test]
    fn merges_keyed_lists_by_key_and_replaces_atomic_lists() {
        let mut live = json!({"spec": {"containers": [
            {"name": "a", "image": "1", "args": ["x"], "ports": [{"containerPort": 80, "protocol": "TCP"}]},
            {"name": "b", "image": "2"}]}});
        let applied = json!({"spec": {"containers": [
            {"name": "a", "image": "3", "args": ["y"], "ports": [{"containerPort": 80, "name": "http"}]}]}});
        merge_applied(&mut live, &applied);
        assert_eq!(
            live,
            json!({"spec": {"containers": [
                {"name": "a", "image": "3", "args": ["y"], "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}]},
                {"name": "b", "image": "2"}]}})
        );
    }

    #[test]
    fn removes_given_up_fields_but_keeps_what_others_own() {
        let mut obj = json!({"metadata": {"labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "X", "value": "1"}]}]}});
        let old = field_set(&obj);
        let keep = field_set(&json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}));
        let remove: FieldSet = old.difference(&keep).cloned().collect();
        remove_paths(&mut obj, &remove, &keep);
        assert_eq!(
            obj,
            json!({"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
        );
    }
}
