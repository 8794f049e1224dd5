//! Merging an applied configuration into the live object, and removing the fields an apply gave up.
//! Objects merge field by field, keyed lists item by item (by the keys `list_keys` gives their
//! schema path), set lists as sets; scalars and atomic lists are replaced.

use serde_json::{Map, Value};

use super::fieldset::{key_of, list_keys, Elem, FieldSet, Path};
use crate::list_keys::{apply_list, field_path, item_path, ApplyList};

/// `live` with `applied` merged in (`null` in the configuration removes a field).
pub fn merge_applied(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => merge_object(l, a, ""),
        (live, applied) => *live = applied.clone(),
    }
}

/// Merges `applied` into `live`, the object at schema path `path`.
fn merge_object(live: &mut Map<String, Value>, applied: &Map<String, Value>, path: &str) {
    for (k, av) in applied {
        if av.is_null() {
            live.remove(k);
            continue;
        }
        let child = field_path(path, k);
        match (live.get_mut(k), av) {
            (Some(Value::Object(l)), Value::Object(a)) => merge_object(l, a, &child),
            (Some(Value::Array(l)), Value::Array(a)) => merge_list(&child, l, a),
            _ => {
                live.insert(k.clone(), av.clone());
            }
        }
    }
}

/// Merges `applied` into `live`, the list at schema path `path`.
fn merge_list(path: &str, live: &mut Vec<Value>, applied: &[Value]) {
    let keys = match apply_list(path) {
        ApplyList::Set => {
            for item in applied {
                if !live.contains(item) {
                    live.push(item.clone());
                }
            }
            return;
        }
        ApplyList::Atomic => {
            *live = applied.to_vec();
            return;
        }
        ApplyList::Map(keys) => keys,
    };
    let item_at = item_path(path);
    for item in applied {
        let key = key_of(item, keys);
        let existing = key.as_ref().and_then(|k| {
            live.iter()
                .position(|l| key_of(l, keys).as_ref() == Some(k))
        });
        match (existing, item) {
            (Some(i), Value::Object(a)) => match &mut live[i] {
                Value::Object(l) => merge_object(l, a, &item_at),
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
    let Some(parent) = node_mut(obj, parent_path) else {
        return false;
    };
    match (last, parent) {
        (Elem::Field(f), Value::Object(m)) => m.remove(f).is_some(),
        (Elem::Key(k), Value::Array(items)) => {
            let keys = list_keys(parent_path);
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
    for (i, e) in path.iter().enumerate() {
        cur = match e {
            Elem::Field(f) => cur.get_mut(f.as_str())?,
            Elem::Key(k) => {
                let items = cur.as_array_mut()?;
                let keys = list_keys(&path[..i])?;
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

    fn merged(mut live: Value, applied: Value) -> Value {
        merge_applied(&mut live, &applied);
        live
    }

    // Lists an apply used to merge by a field-name guess but upstream treats as atomic.

    #[test]
    fn apply_replaces_node_taints() {
        let live = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}});
        let cfg = json!({"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}});
        assert_eq!(
            merged(live, cfg)["spec"]["taints"],
            json!([{"key": "b", "effect": "NoSchedule"}])
        );
    }

    #[test]
    fn apply_replaces_endpoint_slice_ports() {
        let live = json!({"ports": [{"port": 80, "protocol": "TCP"}]});
        let cfg = json!({"ports": [{"port": 443, "protocol": "TCP"}]});
        assert_eq!(
            merged(live, cfg)["ports"],
            json!([{"port": 443, "protocol": "TCP"}])
        );
    }

    #[test]
    fn apply_replaces_namespace_spec_finalizers() {
        let live = json!({"spec": {"finalizers": ["kubernetes"]}});
        let cfg = json!({"spec": {"finalizers": ["other"]}});
        assert_eq!(merged(live, cfg)["spec"]["finalizers"], json!(["other"]));
    }

    #[test]
    fn apply_replaces_service_account_image_pull_secrets() {
        let live = json!({"imagePullSecrets": [{"name": "a"}]});
        let cfg = json!({"imagePullSecrets": [{"name": "b"}]});
        assert_eq!(
            merged(live, cfg)["imagePullSecrets"],
            json!([{"name": "b"}])
        );
    }

    // Lists upstream keys that an apply used to replace.

    #[test]
    fn apply_merges_service_account_secrets_and_pod_spec_lists_by_name() {
        let live = json!({"secrets": [{"name": "a"}], "spec": {
            "schedulingGates": [{"name": "g1"}],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]}});
        let cfg = json!({"secrets": [{"name": "b"}], "spec": {
            "schedulingGates": [{"name": "g2"}],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "fpga"}]}}]}});
        let out = merged(live, cfg);
        assert_eq!(out["secrets"], json!([{"name": "a"}, {"name": "b"}]));
        assert_eq!(
            out["spec"]["schedulingGates"],
            json!([{"name": "g1"}, {"name": "g2"}])
        );
        assert_eq!(
            out["spec"]["containers"][0]["resources"]["claims"],
            json!([{"name": "gpu"}, {"name": "fpga"}])
        );
    }

    #[test]
    fn apply_merges_node_addresses_by_type_and_pod_ips_by_ip() {
        let live = json!({"status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "podIPs": [{"ip": "10.244.0.5"}],
            "hostIPs": [{"ip": "10.0.0.1"}]}});
        let cfg = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "n1"}],
            "podIPs": [{"ip": "fd00::5"}],
            "hostIPs": [{"ip": "fd01::1"}]}});
        let out = merged(live, cfg);
        assert_eq!(out["status"]["addresses"].as_array().unwrap().len(), 2);
        assert_eq!(
            out["status"]["podIPs"],
            json!([{"ip": "10.244.0.5"}, {"ip": "fd00::5"}])
        );
        // hostIPs merge by ip in a strategic merge patch but are atomic in an apply.
        assert_eq!(out["status"]["hostIPs"], json!([{"ip": "fd01::1"}]));
    }

    #[test]
    fn apply_merges_node_pod_cidrs_as_a_set() {
        let live = json!({"spec": {"podCIDRs": ["10.244.1.0/24"]}});
        let cfg = json!({"spec": {"podCIDRs": ["fd00:1::/64"]}});
        assert_eq!(
            merged(live, cfg)["spec"]["podCIDRs"],
            json!(["10.244.1.0/24", "fd00:1::/64"])
        );
    }
}
