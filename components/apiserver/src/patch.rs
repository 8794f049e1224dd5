//! PATCH bodies: JSON merge patch (RFC 7386) and strategic merge patch. The strategic merge knows the
//! built-in kinds' merge keys by schema path from `list_keys` (containers by `name`, conditions by
//! `type`, ...), which is what kubectl's and the kubelet's patches rely on; other lists are replaced
//! as in a merge patch.
//! JSON patch (RFC 6902) operations apply in order; any failure rejects the whole patch.

use serde_json::{Map, Value};

use crate::list_keys::{field_path, item_path, patch_list, PatchList};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    #[error("unsupported patch type {0:?}")]
    Unsupported(String),
    #[error("invalid patch: {0}")]
    Invalid(String),
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Result<Self, PatchError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/json-patch+json" => Ok(PatchType::Json),
            other => Err(PatchError::Unsupported(other.to_string())),
        }
    }
}

pub fn apply(kind: PatchType, target: &Value, patch: &Value) -> Result<Value, PatchError> {
    if kind == PatchType::Json {
        return json_patch(target, patch);
    }
    if !patch.is_object() {
        return Err(PatchError::Invalid("a patch must be a JSON object".into()));
    }
    let mut out = target.clone();
    match kind {
        PatchType::Merge => merge(&mut out, patch),
        PatchType::Strategic => strategic(&mut out, patch, "")?,
        PatchType::Json => {}
    }
    Ok(out)
}

/// RFC 7386.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Strategic merge of `patch` into `target`, the object at schema path `path`.
fn strategic(target: &mut Value, patch: &Value, path: &str) -> Result<(), PatchError> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = p.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue; // ordering hints and directives already handled
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = t.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let child = field_path(path, k);
        match (v, t.get_mut(k)) {
            (Value::Array(items), Some(Value::Array(existing))) => match patch_list(&child) {
                PatchList::MergeKey(key) => {
                    let order = p
                        .get(&format!("$setElementOrder/{k}"))
                        .and_then(Value::as_array);
                    merge_list(existing, items, key, &child, order)?
                }
                PatchList::MergeSet => {
                    for item in items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                }
                PatchList::Replace => *existing = strip_directives(items),
            },
            (Value::Object(_), Some(existing)) => strategic(existing, v, &child)?,
            (Value::Array(items), _) => {
                t.insert(k.clone(), Value::Array(strip_directives(items)));
            }
            (_, _) => {
                let mut fresh = Value::Null;
                strategic(&mut fresh, v, &child)?;
                t.insert(k.clone(), fresh);
            }
        }
    }
    Ok(())
}

/// A patch list's elements without `$patch: delete` entries (for lists with no stored counterpart).
fn strip_directives(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .filter(|i| i.get("$patch").is_none())
        .cloned()
        .collect()
}

/// Merges `items` into the list at schema path `list` by its merge key, then orders the result as
/// upstream's normalizeElementOrder: the patch's items in the patch's (or `$setElementOrder`'s)
/// order, the server-only items in their stored order, interleaved by the stored order where both
/// are known — so an item new to the list goes before the server-only item it meets.
fn merge_list(
    existing: &mut Vec<Value>,
    items: &[Value],
    key: &str,
    list: &str,
    set_order: Option<&Vec<Value>>,
) -> Result<(), PatchError> {
    let server_order: Vec<Value> = existing
        .iter()
        .filter_map(|e| e.get(key).cloned())
        .collect();
    merge_items(existing, items, key, list)?;
    let patch_order: Vec<Value> = match set_order {
        Some(order) => order.iter().filter_map(|e| e.get(key).cloned()).collect(),
        None => items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .filter_map(|i| i.get(key).cloned())
            .collect(),
    };
    let index = |order: &[Value], item: &Value| {
        item.get(key)
            .and_then(|id| order.iter().position(|o| o == id))
    };
    let (mut patched, server_only): (Vec<Value>, Vec<Value>) = std::mem::take(existing)
        .into_iter()
        .partition(|e| index(&patch_order, e).is_some());
    patched.sort_by_key(|e| index(&patch_order, e));
    // mergeSortedSlice(left = server-only, right = patched, by the stored order).
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        patched.into_iter().peekable(),
    );
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
            (Some(l), Some(r)) => matches!(
                (index(&server_order, l), index(&server_order, r)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        existing.extend(next);
    }
    Ok(())
}

fn merge_items(
    existing: &mut Vec<Value>,
    items: &[Value],
    key: &str,
    list: &str,
) -> Result<(), PatchError> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *existing = strip_directives(items);
        return Ok(());
    }
    let item_at = item_path(list);
    for item in items {
        let Some(id) = item.get(key) else {
            return Err(PatchError::Invalid(format!(
                "map in a list with merge key {key:?} has no {key:?} field"
            )));
        };
        let pos = existing.iter().position(|e| e.get(key) == Some(id));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic(&mut existing[i], item, &item_at)?,
            (None, false) => {
                let mut fresh = Value::Null;
                strategic(&mut fresh, item, &item_at)?;
                existing.push(fresh);
            }
        }
    }
    Ok(())
}

/// RFC 6901 pointer → unescaped tokens.
fn tokens(pointer: &str) -> Result<Vec<String>, PatchError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or_else(|| PatchError::Invalid(format!("invalid JSON pointer {pointer:?}")))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn invalid(msg: String) -> PatchError {
    PatchError::Invalid(msg)
}

/// The container addressed by all but the last token, and that last token.
fn parent<'a>(doc: &'a mut Value, path: &str) -> Result<(&'a mut Value, String), PatchError> {
    let mut toks = tokens(path)?;
    let last = toks
        .pop()
        .ok_or_else(|| invalid("the root cannot be the target of this operation".into()))?;
    let mut cur = doc;
    for t in &toks {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(move |i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| invalid(format!("path {path:?} does not exist")))?;
    }
    Ok((cur, last))
}

/// Tokens back into a pointer serde_json reads (re-escaped the RFC 6901 way).
fn escaped(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn get_at(doc: &Value, path: &str) -> Result<Value, PatchError> {
    doc.pointer(&escaped(&tokens(path)?))
        .cloned()
        .ok_or_else(|| invalid(format!("path {path:?} does not exist")))
}

/// Whether the object or array holding `path`'s last member exists.
fn parent_exists(doc: &Value, path: &str) -> Result<bool, PatchError> {
    let toks = tokens(path)?;
    let Some((_, up)) = toks.split_last() else {
        return Ok(true);
    };
    Ok(doc
        .pointer(&escaped(up))
        .is_some_and(|v| v.is_object() || v.is_array()))
}

fn add_at(doc: &mut Value, path: &str, value: Value) -> Result<(), PatchError> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (container, last) = parent(doc, path)?;
    match container {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| invalid(format!("array index out of range in {path:?}")))?
            };
            a.insert(i, value);
        }
        _ => return Err(invalid(format!("path {path:?} does not exist"))),
    }
    Ok(())
}

fn remove_at(doc: &mut Value, path: &str) -> Result<Value, PatchError> {
    let (container, last) = parent(doc, path)?;
    let removed = match container {
        Value::Object(m) => m.remove(&last),
        Value::Array(a) => last
            .parse::<usize>()
            .ok()
            .filter(|i| *i < a.len())
            .map(|i| a.remove(i)),
        _ => None,
    };
    removed.ok_or_else(|| invalid(format!("path {path:?} does not exist")))
}

fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| invalid("a JSON patch must be a list of operations".into()))?;
    let mut doc = target.clone();
    for op in ops {
        let path = op["path"]
            .as_str()
            .ok_or_else(|| invalid("operation without a path".into()))?;
        let from = || {
            op["from"]
                .as_str()
                .ok_or_else(|| invalid("operation without from".into()))
        };
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| invalid("operation without value".into()))
        };
        match op["op"].as_str().unwrap_or("") {
            "add" => add_at(&mut doc, path, value()?)?,
            "remove" => {
                remove_at(&mut doc, path)?;
            }
            "replace" => {
                remove_at(&mut doc, path)?;
                add_at(&mut doc, path, value()?)?;
            }
            "move" => {
                let v = remove_at(&mut doc, from()?)?;
                add_at(&mut doc, path, v)?;
            }
            "copy" => {
                let v = get_at(&doc, from()?)?;
                add_at(&mut doc, path, v)?;
            }
            "test" => {
                // A missing member tests equal to null when its parent exists, as upstream's json-patch
                // applies it: kube-runtime's finalizer() sends `test /metadata/finalizers null` first.
                let want = value()?;
                let got = match get_at(&doc, path) {
                    Ok(v) => v,
                    Err(e) if want.is_null() && parent_exists(&doc, path)? => {
                        tracing::trace!(%e, "test of an absent member against null");
                        Value::Null
                    }
                    Err(e) => return Err(e),
                };
                if got != want {
                    return Err(invalid(format!("test failed at {path:?}")));
                }
            }
            other => return Err(invalid(format!("unknown operation {other:?}"))),
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_test_of_an_absent_member_equals_null_only() {
        let t = json!({"metadata": {"name": "a"}});
        let null_test = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                               {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]);
        let out = apply(PatchType::Json, &t, &null_test).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
        let value_test = json!([{"op": "test", "path": "/metadata/finalizers", "value": []}]);
        assert!(apply(PatchType::Json, &t, &value_test).is_err());
        let no_parent = json!([{"op": "test", "path": "/spec/x", "value": null}]);
        assert!(apply(PatchType::Json, &t, &no_parent).is_err());
        let present = json!([{"op": "test", "path": "/metadata/name", "value": null}]);
        assert!(apply(PatchType::Json, &t, &present).is_err());
    }

    #[test]
    fn merge_patch_replaces_lists_and_deletes_nulls() {
        let t = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        let out = apply(PatchType::Merge, &t, &json!({"b": {"c": null}, "l": [3]})).unwrap();
        assert_eq!(out, json!({"a": 1, "b": {"d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_merges_conditions_by_type() {
        let t = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "x"},
            {"type": "MemoryPressure", "status": "False"}]}});
        let p = json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}],
            "conditions": [{"type": "Ready", "status": "True"}]}});
        let out = apply(PatchType::Strategic, &t, &p).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True", "reason": "x"},
                   {"type": "MemoryPressure", "status": "False"}])
        );
    }

    #[test]
    fn strategic_deletes_and_appends_by_key() {
        let t = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}});
        let p = json!({"spec": {"containers": [
            {"name": "b", "$patch": "delete"}, {"name": "c", "image": "3"}]}});
        let out = apply(PatchType::Strategic, &t, &p).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            // Upstream's order: the patch's new item before the server-only one.
            json!([{"name": "c", "image": "3"}, {"name": "a", "image": "1"}])
        );
    }

    #[test]
    fn strategic_finalizers_merge_as_set() {
        let t = json!({"metadata": {"finalizers": ["a"]}});
        let out = apply(
            PatchType::Strategic,
            &t,
            &json!({"metadata": {"finalizers": ["a", "b"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        let out = apply(
            PatchType::Strategic,
            &out,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn json_patch_operations() {
        let t = json!({"metadata": {"labels": {"a/b": "1"}}, "spec": {"l": [1, 2]}});
        let p = json!([
            {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
            {"op": "add", "path": "/spec/l/-", "value": 3},
            {"op": "replace", "path": "/spec/l/0", "value": 0},
            {"op": "remove", "path": "/metadata/labels/a~1b"},
            {"op": "copy", "from": "/spec/l", "path": "/spec/m"},
        ]);
        let out = apply(PatchType::Json, &t, &p).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"labels": {}}, "spec": {"l": [0, 2, 3], "m": [0, 2, 3]}})
        );
        let bad = json!([{"op": "remove", "path": "/nope"}]);
        assert!(apply(PatchType::Json, &t, &bad).is_err());
    }

    #[test]
    fn apply_patch_is_reported_unsupported() {
        assert!(PatchType::from_content_type("application/apply-patch+yaml").is_err());
    }

    fn smp(target: Value, patch: Value) -> Value {
        apply(PatchType::Strategic, &target, &patch).unwrap()
    }

    // Lists the strategic merge used to merge by a field-name guess but upstream replaces.

    #[test]
    fn strategic_replaces_node_taints() {
        let t = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}});
        let p = json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}});
        assert_eq!(
            smp(t, p)["spec"]["taints"],
            json!([{"key": "b", "effect": "NoExecute"}])
        );
    }

    #[test]
    fn strategic_replaces_endpoint_slice_ports() {
        let t = json!({"kind": "EndpointSlice", "ports": [{"port": 80, "name": "http"}]});
        let p = json!({"ports": [{"port": 443, "name": "https"}]});
        assert_eq!(smp(t, p)["ports"], json!([{"port": 443, "name": "https"}]));
    }

    #[test]
    fn strategic_replaces_namespace_spec_finalizers() {
        let t = json!({"spec": {"finalizers": ["kubernetes"]}});
        let out = smp(t, json!({"spec": {"finalizers": ["other"]}}));
        assert_eq!(out["spec"]["finalizers"], json!(["other"]));
    }

    #[test]
    fn strategic_replaces_service_account_image_pull_secrets() {
        let t = json!({"kind": "ServiceAccount", "imagePullSecrets": [{"name": "a"}]});
        let out = smp(t, json!({"imagePullSecrets": [{"name": "b"}]}));
        assert_eq!(out["imagePullSecrets"], json!([{"name": "b"}]));
    }

    // Lists upstream merges that the strategic merge used to replace.

    #[test]
    fn strategic_merges_service_account_secrets_by_name() {
        let t = json!({"kind": "ServiceAccount", "secrets": [{"name": "a"}]});
        let out = smp(t, json!({"secrets": [{"name": "b"}]}));
        assert_eq!(out["secrets"], json!([{"name": "b"}, {"name": "a"}]));
    }

    #[test]
    fn strategic_merges_topology_spread_constraints_by_topology_key() {
        let tsc = |key: &str, skew: i64| json!({"topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": skew});
        let t = json!({"spec": {"template": {"spec": {"topologySpreadConstraints": [
            tsc("zone", 1), tsc("host", 1)]}}}});
        let p = json!({"spec": {"template": {"spec": {"topologySpreadConstraints": [
            {"topologyKey": "zone", "maxSkew": 2}]}}}});
        assert_eq!(
            smp(t, p)["spec"]["template"]["spec"]["topologySpreadConstraints"],
            json!([tsc("zone", 2), tsc("host", 1)])
        );
    }

    #[test]
    fn strategic_merges_pod_spec_lists_by_name() {
        let t = json!({"spec": {
            "schedulingGates": [{"name": "a"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}]}});
        let p = json!({"spec": {
            "schedulingGates": [{"name": "a", "$patch": "delete"}, {"name": "b"}],
            "resourceClaims": [{"name": "fpga", "resourceClaimName": "c2"}]}});
        let out = smp(t, p);
        assert_eq!(out["spec"]["schedulingGates"], json!([{"name": "b"}]));
        assert_eq!(
            out["spec"]["resourceClaims"],
            // Upstream's normalizeElementOrder: an item new to the list goes first.
            json!([{"name": "fpga", "resourceClaimName": "c2"},
                   {"name": "gpu", "resourceClaimName": "c1"}])
        );
        // With kubectl apply's $setElementOrder, its order wins.
        let out = smp(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
                "containers": [{"name": "c", "image": "x"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a"}, {"name": "b"}, {"name": "c", "image": "x"}])
        );
    }

    #[test]
    fn strategic_merges_pod_status_ip_lists_by_ip() {
        let t = json!({"status": {"podIPs": [{"ip": "10.0.0.1"}], "hostIPs": [{"ip": "192.168.0.1"}],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c1"}]}});
        let p = json!({"status": {"podIPs": [{"ip": "fd00::1"}], "hostIPs": [{"ip": "fd01::1"}],
            "resourceClaimStatuses": [{"name": "fpga", "resourceClaimName": "c2"}]}});
        let out = smp(t, p);
        assert_eq!(
            out["status"]["podIPs"],
            json!([{"ip": "fd00::1"}, {"ip": "10.0.0.1"}])
        );
        assert_eq!(
            out["status"]["hostIPs"],
            json!([{"ip": "fd01::1"}, {"ip": "192.168.0.1"}])
        );
        assert_eq!(
            out["status"]["resourceClaimStatuses"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn strategic_merges_node_pod_cidrs_as_set() {
        let t = json!({"spec": {"podCIDRs": ["10.244.1.0/24"]}});
        let out = smp(t, json!({"spec": {"podCIDRs": ["fd00:1::/64"]}}));
        assert_eq!(
            out["spec"]["podCIDRs"],
            json!(["10.244.1.0/24", "fd00:1::/64"])
        );
    }

    #[test]
    fn strategic_merges_container_ports_on_container_port_alone() {
        // Upstream's patchMergeKey is containerPort only (server-side apply also keys on
        // protocol): a UDP port patched onto the same TCP port number merges into that item.
        let t = json!({"spec": {"containers": [{"name": "dns",
            "ports": [{"containerPort": 53, "protocol": "TCP"}]}]}});
        let p = json!({"spec": {"containers": [{"name": "dns",
            "ports": [{"containerPort": 53, "protocol": "UDP"}]}]}});
        assert_eq!(
            smp(t, p)["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 53, "protocol": "UDP"}])
        );
    }
}
