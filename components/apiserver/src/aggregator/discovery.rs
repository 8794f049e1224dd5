//! Discovery entries for the aggregated groups: `/apis` lists them beside kiln's own, `/apis/<group>`
//! is answered here (as upstream's aggregator does), and the aggregated document carries each
//! version's resources from the extension server's own `/apis/<group>/<version>` (fetched by the
//! availability check), `Stale` while it is unavailable.

use serde_json::{json, Value};

use super::Backend;

/// Groups in upstream's order: higher groupPriorityMinimum first, then by name; versions by
/// versionPriority, highest (preferred) first.
fn grouped(backends: &[Backend]) -> Vec<(String, Vec<&Backend>)> {
    let mut out: Vec<(String, Vec<&Backend>)> = Vec::new();
    for b in backends.iter().filter(|b| !b.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == b.group) {
            Some((_, versions)) => versions.push(b),
            None => out.push((b.group.clone(), vec![b])),
        }
    }
    for (_, versions) in &mut out {
        versions.sort_by(|a, b| {
            b.version_priority
                .cmp(&a.version_priority)
                .then_with(|| a.version.cmp(&b.version))
        });
    }
    let priority = |vs: &[&Backend]| vs.iter().map(|b| b.group_priority).max().unwrap_or(0);
    out.sort_by(|(ga, va), (gb, vb)| priority(vb).cmp(&priority(va)).then_with(|| ga.cmp(gb)));
    out
}

fn api_group(name: &str, versions: &[&Backend]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|b| json!({"groupVersion": format!("{name}/{}", b.version), "version": b.version}))
        .collect();
    json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
}

/// `APIGroup` entries for `/apis`, leaving out groups kiln serves itself.
pub fn legacy_groups(backends: &[Backend], is_local: impl Fn(&str) -> bool) -> Vec<Value> {
    grouped(backends)
        .iter()
        .filter(|(g, _)| !is_local(g))
        .map(|(g, vs)| api_group(g, vs))
        .collect()
}

/// The `APIGroup` document for `/apis/<group>`.
pub fn group_document(backends: &[Backend], group: &str) -> Option<Value> {
    let (name, versions) = grouped(backends).into_iter().find(|(g, _)| g == group)?;
    let mut doc = api_group(&name, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// An `APIResourceList` → `APIResourceDiscovery` entries (subresources folded into their parent).
pub fn resources_from_list(group: &str, version: &str, list: &Value) -> Vec<Value> {
    let items = list["resources"].as_array().cloned().unwrap_or_default();
    let kind_of = |r: &Value| {
        json!({
            "group": r["group"].as_str().filter(|g| !g.is_empty()).unwrap_or(group),
            "version": r["version"].as_str().filter(|v| !v.is_empty()).unwrap_or(version),
            "kind": r["kind"],
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for r in items
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").contains('/'))
    {
        let mut entry = json!({
            "resource": r["name"],
            "responseKind": kind_of(r),
            "scope": if r["namespaced"] == true { "Namespaced" } else { "Cluster" },
            "singularResource": r["singularName"].as_str().unwrap_or(""),
            "verbs": r["verbs"].as_array().cloned().unwrap_or_default(),
        });
        for field in ["shortNames", "categories"] {
            if r[field].as_array().is_some_and(|a| !a.is_empty()) {
                entry[field] = r[field].clone();
            }
        }
        out.push(entry);
    }
    for r in &items {
        let Some((parent, sub)) = r["name"].as_str().and_then(|n| n.split_once('/')) else {
            continue;
        };
        if let Some(entry) = out.iter_mut().find(|e| e["resource"] == parent) {
            let subs = entry["subresources"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut subs = subs;
            subs.push(json!({
                "subresource": sub,
                "responseKind": kind_of(r),
                "verbs": r["verbs"].as_array().cloned().unwrap_or_default(),
            }));
            entry["subresources"] = Value::Array(subs);
        }
    }
    out
}

/// `APIGroupDiscovery` items for the aggregated `/apis` document.
pub fn aggregated_items(backends: &[Backend], is_local: impl Fn(&str) -> bool) -> Vec<Value> {
    grouped(backends)
        .iter()
        .filter(|(g, _)| !is_local(g))
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|b| match (&b.resources, b.available) {
                    (Some(list), true) => json!({
                        "version": b.version,
                        "resources": resources_from_list(g, &b.version, list),
                        "freshness": "Current",
                    }),
                    _ => json!({"version": b.version, "resources": [], "freshness": "Stale"}),
                })
                .collect();
            json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": versions})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::ServiceRef;

    fn backend(group: &str, version: &str, gp: i64, vp: i64) -> Backend {
        Backend {
            name: format!("{version}.{group}"),
            group: group.into(),
            version: version.into(),
            group_priority: gp,
            version_priority: vp,
            service: ServiceRef {
                namespace: "ns".into(),
                name: "svc".into(),
                port: 443,
            },
            ca_bundle: Vec::new(),
            insecure: false,
            available: true,
            resources: None,
        }
    }

    #[test]
    fn groups_sort_by_priority_and_prefer_the_highest_version() {
        let bs = vec![
            backend("b.example.com", "v1", 100, 10),
            backend("a.example.com", "v1beta1", 1000, 5),
            backend("a.example.com", "v1", 1000, 15),
        ];
        let groups = legacy_groups(&bs, |_| false);
        assert_eq!(groups[0]["name"], "a.example.com");
        assert_eq!(groups[0]["preferredVersion"]["version"], "v1");
        assert_eq!(groups[1]["name"], "b.example.com");
        assert!(legacy_groups(&bs, |g| g == "a.example.com").len() == 1);
        let doc = group_document(&bs, "a.example.com").unwrap();
        assert_eq!(doc["kind"], "APIGroup");
        assert_eq!(doc["versions"][1]["groupVersion"], "a.example.com/v1beta1");
    }

    #[test]
    fn resource_lists_become_aggregated_entries() {
        let list = json!({"kind": "APIResourceList", "groupVersion": "metrics.example.com/v1beta1",
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "PodMetrics",
             "verbs": ["get", "list"], "shortNames": ["pm"]},
            {"name": "pods/status", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get"]},
        ]});
        let mut b = backend("metrics.example.com", "v1beta1", 100, 100);
        b.resources = Some(list);
        let items = aggregated_items(std::slice::from_ref(&b), |_| false);
        let v = &items[0]["versions"][0];
        assert_eq!(v["freshness"], "Current");
        let pods = &v["resources"][1];
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["shortNames"], json!(["pm"]));
        assert_eq!(pods["responseKind"]["group"], "metrics.example.com");
        assert_eq!(pods["subresources"][0]["subresource"], "status");
        assert_eq!(v["resources"][0]["scope"], "Cluster");
        b.available = false;
        let items = aggregated_items(&[b], |_| false);
        assert_eq!(items[0]["versions"][0]["freshness"], "Stale");
    }
}
