//! Discovery (/api, /apis, resource lists with verbs, shortNames, categories), /version, and the
//! minimal OpenAPI v3 kubectl needs: PATCH operations per kind that declare `fieldValidation`, so
//! `kubectl apply` hands validation to the server instead of demanding a full schema.

use axum::response::Response;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::path::ApiPath;
use super::{ok_json, AppState};
use crate::registry::ResourceSpec;
use crate::status::ApiError;

/// The Kubernetes version this server speaks (k8s-openapi's `v1_33` types).
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "33";

pub fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-kiln.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
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

pub fn serve(state: &AppState, path: &ApiPath) -> Result<Response, ApiError> {
    let registry = &state.registry;
    let body = match path {
        ApiPath::CoreRoot => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": state.advertise}],
        }),
        ApiPath::GroupsRoot => json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": registry.groups().iter().map(|(g, vs)| group_entry(g, vs)).collect::<Vec<_>>(),
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

/// `api/v1` or `apis/<group>/<version>`: the OpenAPI v3 index key of a group-version.
fn gv_path(spec: &ResourceSpec) -> String {
    if spec.group.is_empty() {
        format!("api/{}", spec.version)
    } else {
        format!("apis/{}/{}", spec.group, spec.version)
    }
}

fn patch_operation(spec: &ResourceSpec) -> Value {
    json!({
        "operationId": format!("patch{}", spec.kind),
        "parameters": [
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": spec.group, "version": spec.version, "kind": spec.kind},
    })
}

fn gv_document(specs: &[&ResourceSpec]) -> Value {
    let mut paths = serde_json::Map::new();
    for spec in specs {
        let base = format!("/{}", gv_path(spec));
        let item = if spec.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", spec.plural)
        } else {
            format!("{base}/{}/{{name}}", spec.plural)
        };
        paths.insert(item, json!({"patch": patch_operation(spec)}));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

fn hash(doc: &Value) -> String {
    let digest = Sha256::digest(doc.to_string().as_bytes());
    hex::encode(&digest[..16]).to_uppercase()
}

/// /openapi/v3 and /openapi/v3/<gv>; /openapi/v2 is absent (404), which kubectl tolerates when v3
/// answers.
pub fn openapi(state: &AppState, path: &str) -> Result<Response, ApiError> {
    let registry = &state.registry;
    let mut gvs: Vec<(String, Vec<&ResourceSpec>)> = Vec::new();
    for spec in registry.all() {
        let key = gv_path(spec);
        match gvs.iter_mut().find(|(k, _)| *k == key) {
            Some((_, specs)) => specs.push(spec),
            None => gvs.push((key, vec![spec])),
        }
    }
    let rest = path.trim_end_matches('/');
    if rest == "/openapi/v3" {
        let mut index = serde_json::Map::new();
        for (key, specs) in &gvs {
            let doc = gv_document(specs);
            index.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", hash(&doc))}),
            );
        }
        return Ok(ok_json(&json!({ "paths": index })));
    }
    let wanted = rest
        .strip_prefix("/openapi/v3/")
        .ok_or_else(ApiError::path_not_found)?;
    let (_, specs) = gvs
        .iter()
        .find(|(k, _)| k == wanted)
        .ok_or_else(ApiError::path_not_found)?;
    Ok(ok_json(&gv_document(specs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::{LEASES, PODS};

    #[test]
    fn pods_advertise_status_subresource_and_short_name() {
        let e = resource_entries(&PODS);
        assert_eq!(e[0]["shortNames"], json!(["po"]));
        assert_eq!(e[0]["categories"], json!(["all"]));
        assert_eq!(e[1]["name"], "pods/status");
    }

    #[test]
    fn openapi_patch_path_declares_field_validation() {
        let doc = gv_document(&[&LEASES]);
        let op = &doc["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]
            ["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Lease");
        assert!(op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
    }
}
