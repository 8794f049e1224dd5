//! Aggregated discovery (apidiscovery.k8s.io v2 and v2beta1): `/api` and `/apis` answer every
//! group, version and resource in one `APIGroupDiscoveryList` when the client's Accept asks for it,
//! so kubectl (1.26+) discovers the whole server in two requests instead of one per group-version.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::registry::{Registry, ResourceSpec};
use crate::request_path::ApiPath;

/// The apidiscovery.k8s.io version a client accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V2,
    V2beta1,
}

impl Version {
    fn name(self) -> &'static str {
        match self {
            Version::V2 => "v2",
            Version::V2beta1 => "v2beta1",
        }
    }

    /// The Content-Type upstream answers with, which client-go checks to pick its decoder.
    fn content_type(self) -> String {
        format!(
            "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
            self.name()
        )
    }
}

/// The aggregated format the Accept header asks for first, if any. Media ranges are taken in
/// the order given (client-go lists its preference first); one we cannot serve (protobuf, or an
/// unknown version) is skipped, and a plain JSON or wildcard range first means the legacy
/// documents.
pub fn negotiate(headers: &HeaderMap) -> Option<Version> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let mut group = None;
        let mut version = None;
        let mut kind = None;
        for param in parts {
            match param.split_once('=') {
                Some(("g", v)) => group = Some(v),
                Some(("v", v)) => version = Some(v),
                Some(("as", v)) => kind = Some(v),
                _ => {}
            }
        }
        let aggregated = group == Some("apidiscovery.k8s.io")
            && kind == Some("APIGroupDiscoveryList")
            && media == "application/json";
        match version {
            Some("v2") if aggregated => return Some(Version::V2),
            Some("v2beta1") if aggregated => return Some(Version::V2beta1),
            _ if group.is_none() && matches!(media, "application/json" | "*/*") => return None,
            _ => {}
        }
    }
    None
}

fn response_kind(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn subresources(spec: &ResourceSpec) -> Vec<Value> {
    let own_kind = || response_kind(spec.group, spec.version, spec.kind);
    let mut out = Vec::new();
    if spec.scale.is_some() {
        out.push(json!({
            "subresource": "scale",
            "responseKind": response_kind("autoscaling", "v1", "Scale"),
            "verbs": ["get", "patch", "update"],
        }));
    }
    if spec.status_subresource {
        out.push(json!({
            "subresource": "status",
            "responseKind": own_kind(),
            "verbs": ["get", "patch", "update"],
        }));
    }
    for action in spec.actions {
        // An action without a group of its own answers in its parent's group-version.
        let (group, version) = if action.group.is_empty() && action.version.is_empty() {
            (spec.group, spec.version)
        } else {
            (action.group, action.version)
        };
        out.push(json!({
            "subresource": action.name,
            "responseKind": response_kind(group, version, action.kind),
            "verbs": action.verbs,
        }));
    }
    out
}

/// One `APIResourceDiscovery`.
pub fn resource(spec: &ResourceSpec) -> Value {
    let mut entry = json!({
        "resource": spec.plural,
        "responseKind": response_kind(spec.group, spec.version, spec.kind),
        "scope": if spec.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": spec.singular,
        "verbs": spec.verbs,
    });
    if !spec.short_names.is_empty() {
        entry["shortNames"] = json!(spec.short_names);
    }
    if !spec.categories.is_empty() {
        entry["categories"] = json!(spec.categories);
    }
    let subs = subresources(spec);
    if !subs.is_empty() {
        entry["subresources"] = Value::Array(subs);
    }
    entry
}

/// One `APIGroupDiscovery`: its versions in preference order (the registry's), each `Current`.
fn group(name: &str, versions: &[(&str, Vec<&'static ResourceSpec>)]) -> Value {
    let mut metadata = json!({"creationTimestamp": null});
    if !name.is_empty() {
        metadata["name"] = json!(name);
    }
    let versions: Vec<Value> = versions
        .iter()
        .map(|(version, specs)| {
            json!({
                "version": version,
                "resources": specs.iter().map(|s| resource(s)).collect::<Vec<_>>(),
                "freshness": "Current",
            })
        })
        .collect();
    json!({"metadata": metadata, "versions": versions})
}

/// The `APIGroupDiscoveryList` for `/api` (core only) or `/apis` (every named group).
pub fn document(registry: &Registry, path: &ApiPath, version: Version) -> Option<Value> {
    document_with(registry, path, version, Vec::new())
}

/// `document`, with `/apis` also listing `aggregated` groups (extension servers', from
/// `crate::aggregator::discovery`) after kiln's own.
pub fn document_with(
    registry: &Registry,
    path: &ApiPath,
    version: Version,
    aggregated: Vec<Value>,
) -> Option<Value> {
    let mut items = match path {
        ApiPath::CoreRoot => {
            let core = registry.in_group_version("", "v1");
            vec![group("", &[("v1", core)])]
        }
        ApiPath::GroupsRoot => registry
            .groups()
            .into_iter()
            .map(|(name, versions)| {
                let versions: Vec<(&str, Vec<&'static ResourceSpec>)> = versions
                    .into_iter()
                    .map(|v| (v, registry.in_group_version(name, v)))
                    .collect();
                group(name, &versions)
            })
            .collect(),
        _ => return None,
    };
    if *path == ApiPath::GroupsRoot {
        items.extend(aggregated);
    }
    Some(json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{}", version.name()),
        "metadata": {},
        "items": items,
    }))
}

fn etag(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    format!("\"{}\"", hex::encode(&digest[..16]).to_uppercase())
}

/// Serves `/api` or `/apis` in the aggregated format the client asked for; `None` when the
/// request is for the legacy documents.
pub fn serve(registry: &Registry, path: &ApiPath, headers: &HeaderMap) -> Option<Response> {
    serve_with(registry, path, headers, Vec::new())
}

/// `serve`, with the aggregated groups of `document_with`.
pub fn serve_with(
    registry: &Registry,
    path: &ApiPath,
    headers: &HeaderMap,
    aggregated: Vec<Value>,
) -> Option<Response> {
    let version = negotiate(headers)?;
    let doc = document_with(registry, path, version, aggregated)?;
    let body = serde_json::to_vec(&doc).unwrap_or_default();
    let tag = etag(&body);
    let content_type = HeaderValue::from_str(&version.content_type()).ok()?;
    let tag_value = HeaderValue::from_str(&tag).ok()?;
    let vary = HeaderValue::from_static("Accept");
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    if unchanged {
        let headers = [(header::ETAG, tag_value), (header::VARY, vary)];
        return Some((StatusCode::NOT_MODIFIED, headers).into_response());
    }
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (header::ETAG, tag_value),
        (header::VARY, vary),
    ];
    Some((StatusCode::OK, headers, body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::{PODS, SERVICE_ACCOUNTS};

    fn accept(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn negotiates_like_client_go() {
        // kubectl 1.30+
        let modern = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(&accept(modern)), Some(Version::V2));
        // kubectl 1.27
        let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(&accept(old)), Some(Version::V2beta1));
        // protobuf preferred: skipped, JSON aggregated next.
        let proto = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        assert_eq!(negotiate(&accept(proto)), Some(Version::V2));
        assert_eq!(negotiate(&accept("application/json")), None);
        assert_eq!(negotiate(&accept("application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")), None);
        assert_eq!(negotiate(&HeaderMap::new()), None);
        assert_eq!(
            negotiate(&accept(
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"
            )),
            None
        );
    }

    #[test]
    fn pods_carry_scope_kind_and_subresources() {
        let pods = resource(&PODS);
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["singularResource"], "pod");
        assert_eq!(
            pods["responseKind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert_eq!(pods["shortNames"], json!(["po"]));
        let subs = pods["subresources"].as_array().unwrap();
        let status = subs.iter().find(|s| s["subresource"] == "status").unwrap();
        assert_eq!(status["verbs"], json!(["get", "patch", "update"]));
        let eviction = subs
            .iter()
            .find(|s| s["subresource"] == "eviction")
            .unwrap();
        assert_eq!(eviction["responseKind"]["group"], "policy");
        let token = resource(&SERVICE_ACCOUNTS)["subresources"][0].clone();
        assert_eq!(token["responseKind"]["kind"], "TokenRequest");
    }

    #[test]
    fn documents_list_core_and_groups() {
        let registry = Registry::default();
        let core = document(&registry, &ApiPath::CoreRoot, Version::V2).unwrap();
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert_eq!(
            core["items"][0]["metadata"],
            json!({"creationTimestamp": null})
        );
        let v1 = &core["items"][0]["versions"][0];
        assert_eq!(
            (v1["version"].clone(), v1["freshness"].clone()),
            (json!("v1"), json!("Current"))
        );
        assert!(v1["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resource"] == "pods"));
        let groups = document(&registry, &ApiPath::GroupsRoot, Version::V2beta1).unwrap();
        assert_eq!(groups["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let apps = groups["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apps")
            .unwrap();
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        assert_eq!(deploy["responseKind"]["kind"], "Deployment");
        assert!(deploy["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subresource"] == "scale"));
        assert!(document(&registry, &ApiPath::Group("apps".into()), Version::V2).is_none());
    }

    #[test]
    fn etag_answers_not_modified() {
        let registry = Registry::default();
        let mut headers =
            accept("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList");
        let first = serve(&registry, &ApiPath::GroupsRoot, &headers).unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(
            first.headers()[header::CONTENT_TYPE],
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        let tag = first.headers()[header::ETAG].clone();
        headers.insert(header::IF_NONE_MATCH, tag);
        let again = serve(&registry, &ApiPath::GroupsRoot, &headers).unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(serve(&registry, &ApiPath::GroupsRoot, &accept("application/json")).is_none());
    }

    #[test]
    fn content_type_names_the_version() {
        assert_eq!(
            Version::V2beta1.content_type(),
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        );
    }
}
