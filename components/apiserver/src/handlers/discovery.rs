//! Discovery (/api, /apis, resource lists with verbs, shortNames, categories) and /version. The
//! aggregated form of /api and /apis is in `discovery_aggregated.rs`, OpenAPI in `openapi.rs`.

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{json, Value};

use crate::registry::ResourceSpec;
use crate::request_path::ApiPath;
use crate::state::AppState;
use crate::status::{ok_json, ApiError};

/// The Kubernetes version this server speaks (k8s-openapi's `v1_33` types).
pub use kiln_common::version::{KUBE_MAJOR, KUBE_MINOR};

/// `/version`: upstream's version.Info, with kiln's build (see kiln_common::version).
pub fn version() -> Value {
    use kiln_common::version as v;
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": v::GIT_VERSION,
        "gitCommit": v::GIT_COMMIT,
        "gitTreeState": v::GIT_TREE_STATE,
        "buildDate": v::BUILD_DATE,
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn group_entry(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions[0],
    })
}

fn resource_entries(spec: &ResourceSpec) -> Vec<Value> {
    let mut main = json!({
        "name": spec.plural,
        "singularName": spec.singular,
        "namespaced": spec.namespaced,
        "kind": spec.kind,
        "verbs": spec.verbs,
    });
    if !spec.short_names.is_empty() {
        main["shortNames"] = json!(spec.short_names);
    }
    if !spec.categories.is_empty() {
        main["categories"] = json!(spec.categories);
    }
    let mut out = vec![main];
    if spec.status_subresource {
        out.push(json!({
            "name": format!("{}/status", spec.plural),
            "singularName": "",
            "namespaced": spec.namespaced,
            "kind": spec.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if spec.scale.is_some() {
        out.push(json!({
            "name": format!("{}/scale", spec.plural),
            "singularName": "",
            "namespaced": spec.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    for action in spec.actions {
        let mut entry = json!({
            "name": format!("{}/{}", spec.plural, action.name),
            "singularName": "",
            "namespaced": spec.namespaced,
            "kind": action.kind,
            "verbs": action.verbs,
        });
        if !action.group.is_empty() {
            entry["group"] = json!(action.group);
            entry["version"] = json!(action.version);
        }
        out.push(entry);
    }
    out
}

pub fn serve(state: &AppState, path: &ApiPath, headers: &HeaderMap) -> Result<Response, ApiError> {
    let registry = &state.registry;
    // Groups only extension servers serve (APIServices with a service) are listed too.
    let backends = state.aggregator.backends();
    let local_groups = registry.groups();
    let is_local = |g: &str| local_groups.iter().any(|(name, _)| *name == g);
    let extra = crate::aggregator::discovery::aggregated_items(&backends, is_local);
    if let Some(aggregated) =
        super::discovery_aggregated::serve_with(registry, path, headers, extra)
    {
        return Ok(aggregated);
    }
    if let ApiPath::Group(group) = path {
        if !is_local(group) {
            return crate::aggregator::discovery::group_document(&backends, group)
                .map(|doc| ok_json(&doc))
                .ok_or_else(ApiError::path_not_found);
        }
    }
    let body = match path {
        ApiPath::CoreRoot => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": state.advertise}],
        }),
        ApiPath::GroupsRoot => json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": local_groups.iter().map(|(g, vs)| group_entry(g, vs))
                .chain(crate::aggregator::discovery::legacy_groups(&backends, is_local))
                .collect::<Vec<_>>(),
        }),
        ApiPath::Group(group) => {
            let (g, versions) = registry
                .groups()
                .into_iter()
                .find(|(g, _)| g == group)
                .ok_or_else(ApiError::path_not_found)?;
            let mut entry = group_entry(g, &versions);
            entry["kind"] = json!("APIGroup");
            entry["apiVersion"] = json!("v1");
            entry
        }
        ApiPath::GroupVersion { group, version } => {
            let specs = registry.in_group_version(group, version);
            if specs.is_empty() {
                return Err(ApiError::path_not_found());
            }
            let group_version = specs[0].api_version();
            json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version,
                "resources": specs.iter().flat_map(|s| resource_entries(s)).collect::<Vec<_>>(),
            })
        }
        ApiPath::Resource(_) => return Err(ApiError::path_not_found()),
    };
    Ok(ok_json(&body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::PODS;

    #[test]
    fn pods_advertise_status_subresource_and_short_name() {
        let e = resource_entries(&PODS);
        assert_eq!(e[0]["shortNames"], json!(["po"]));
        assert_eq!(e[0]["categories"], json!(["all"]));
        assert_eq!(e[1]["name"], "pods/status");
    }
}
