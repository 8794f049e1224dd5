//! OpenAPI: `/openapi/v3` (an index of per-group-version documents) and `/openapi/v2` (one
//! document), both with the schema of every kind (`openapi_schemas.rs`) so `kubectl explain`
//! works, and a PATCH operation per kind that declares `fieldValidation`, so `kubectl apply`
//! hands validation to the server.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::discovery::{KUBE_MAJOR, KUBE_MINOR};
use super::openapi_v2_proto;
use crate::openapi_schemas::{definitions, Flavor};
use crate::registry::ResourceSpec;
use crate::state::AppState;
use crate::status::{ok_json, ApiError};

/// `api/v1` or `apis/<group>/<version>`: the OpenAPI v3 index key of a group-version.
fn gv_path(spec: &ResourceSpec) -> String {
    if spec.group.is_empty() {
        format!("api/{}", spec.version)
    } else {
        format!("apis/{}/{}", spec.group, spec.version)
    }
}

fn item_path(spec: &ResourceSpec) -> String {
    let base = format!("/{}", gv_path(spec));
    if spec.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", spec.plural)
    } else {
        format!("{base}/{}/{{name}}", spec.plural)
    }
}

const QUERY_PARAMETERS: &[(&str, &str)] = &[
    ("dryRun", "string"),
    ("fieldManager", "string"),
    ("fieldValidation", "string"),
    ("force", "boolean"),
];

/// The kind's definition name in `defs`, if it has one.
fn schema_name<'a>(spec: &ResourceSpec, defs: &'a Map<String, Value>) -> Option<&'a String> {
    defs.iter()
        .find(|(_, def)| {
            def["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|g| {
                    g["group"] == spec.group
                        && g["version"] == spec.version
                        && g["kind"] == spec.kind
                })
        })
        .map(|(name, _)| name)
}

fn patch_operation(spec: &ResourceSpec, flavor: Flavor, schema: Option<&String>) -> Value {
    let parameters: Vec<Value> = QUERY_PARAMETERS
        .iter()
        .map(|(name, type_)| match flavor {
            Flavor::V3 => {
                json!({"name": name, "in": "query", "schema": {"type": type_, "uniqueItems": true}})
            }
            Flavor::V2 => json!({"name": name, "in": "query", "type": type_, "uniqueItems": true}),
        })
        .collect();
    let mut ok = json!({"description": "OK"});
    if let Some(name) = schema {
        match flavor {
            Flavor::V3 => {
                ok["content"] = json!({"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}})
            }
            Flavor::V2 => ok["schema"] = json!({"$ref": format!("#/definitions/{name}")}),
        }
    }
    json!({
        "operationId": format!("patch{}", spec.kind),
        "parameters": parameters,
        "responses": {"200": ok},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": spec.group, "version": spec.version, "kind": spec.kind},
    })
}

fn paths(specs: &[&ResourceSpec], flavor: Flavor, defs: &Map<String, Value>) -> Map<String, Value> {
    specs
        .iter()
        .map(|spec| {
            let op = patch_operation(spec, flavor, schema_name(spec, defs));
            (item_path(spec), json!({"patch": op}))
        })
        .collect()
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0")})
}

/// One group-version's OpenAPI v3 document.
pub fn v3_document(specs: &[&ResourceSpec]) -> Value {
    let defs = definitions(specs, Flavor::V3);
    json!({
        "openapi": "3.0.0",
        "info": info(),
        "paths": paths(specs, Flavor::V3, &defs),
        "components": {"schemas": defs},
    })
}

/// The single OpenAPI v2 document of every kind.
pub fn v2_document(specs: &[&ResourceSpec]) -> Value {
    let defs = definitions(specs, Flavor::V2);
    json!({
        "swagger": "2.0",
        "info": info(),
        "paths": paths(specs, Flavor::V2, &defs),
        "definitions": defs,
    })
}

fn hash(doc: &Value) -> String {
    let digest = Sha256::digest(doc.to_string().as_bytes());
    hex::encode(&digest[..16]).to_uppercase()
}

/// The v2 encoding the client asks for first: JSON, or gnostic protobuf (client-go's v2 client
/// asks for protobuf only). `None`: neither, 406.
#[derive(Debug, PartialEq, Eq)]
enum V2Encoding {
    Json,
    Protobuf,
}

fn v2_encoding(headers: &HeaderMap) -> Option<V2Encoding> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Some(V2Encoding::Json);
    };
    accept
        .split(',')
        .find_map(|range| match range.split(';').next().unwrap_or("").trim() {
            "application/json" | "*/*" | "application/*" | "" => Some(V2Encoding::Json),
            openapi_v2_proto::CONTENT_TYPE => Some(V2Encoding::Protobuf),
            _ => None,
        })
}

fn not_acceptable() -> ApiError {
    ApiError {
        code: 406,
        reason: "NotAcceptable",
        message: format!(
            "only the following media types are accepted: application/json, {}",
            openapi_v2_proto::CONTENT_TYPE
        ),
        details: None,
    }
}

/// A document with an ETag, answering 304 to a matching If-None-Match (kubectl caches these).
fn with_etag(doc: &Value, headers: &HeaderMap) -> Response {
    let tag = format!("\"{}\"", hash(doc));
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let Ok(tag_value) = HeaderValue::from_str(&tag) else {
        return ok_json(doc);
    };
    if unchanged {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, tag_value)]).into_response();
    }
    let mut response = ok_json(doc);
    response.headers_mut().insert(header::ETAG, tag_value);
    response
}

/// `/openapi/v3`, `/openapi/v3/<gv>` and `/openapi/v2`.
pub fn serve(state: &AppState, path: &str, headers: &HeaderMap) -> Result<Response, ApiError> {
    let all = state.registry.all();
    let rest = path.trim_end_matches('/');
    if rest == "/openapi/v2" {
        let doc = v2_document(&all);
        return match v2_encoding(headers) {
            Some(V2Encoding::Json) => Ok(with_etag(&doc, headers)),
            Some(V2Encoding::Protobuf) => {
                let body = openapi_v2_proto::encode(&doc);
                // Go's mime parser rejects the `@` of the Accept type, so the body goes out as
                // bytes; client-go reads it raw.
                let content_type = HeaderValue::from_static("application/octet-stream");
                Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response())
            }
            None => Err(not_acceptable()),
        };
    }
    let mut gvs: Vec<(String, Vec<&ResourceSpec>)> = Vec::new();
    for spec in &all {
        let key = gv_path(spec);
        match gvs.iter_mut().find(|(k, _)| *k == key) {
            Some((_, specs)) => specs.push(spec),
            None => gvs.push((key, vec![spec])),
        }
    }
    if rest == "/openapi/v3" {
        let mut index = Map::new();
        for (key, specs) in &gvs {
            let doc = v3_document(specs);
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
    Ok(with_etag(&v3_document(specs), headers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::{LEASES, PODS};

    #[test]
    fn v3_patch_path_declares_field_validation_and_schema() {
        let doc = v3_document(&[&LEASES]);
        let op = &doc["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]
            ["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Lease");
        assert!(op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
        assert_eq!(
            op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/io.k8s.api.coordination.v1.Lease"
        );
        let lease = &doc["components"]["schemas"]["io.k8s.api.coordination.v1.Lease"];
        assert_eq!(lease["x-kubernetes-group-version-kind"][0]["kind"], "Lease");
    }

    #[test]
    fn v2_document_has_definitions_and_typed_parameters() {
        let doc = v2_document(&[&PODS, &LEASES]);
        assert_eq!(doc["swagger"], "2.0");
        let op = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        let validation = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "fieldValidation")
            .unwrap();
        assert_eq!(validation["type"], "string");
        assert_eq!(
            op["responses"]["200"]["schema"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.Pod"
        );
        assert!(doc["definitions"]["io.k8s.api.core.v1.PodSpec"].is_object());
        assert!(doc["definitions"]["io.k8s.api.coordination.v1.LeaseSpec"].is_object());
    }

    #[test]
    fn v2_encoding_follows_accept() {
        let mut h = HeaderMap::new();
        assert_eq!(v2_encoding(&h), Some(V2Encoding::Json));
        let proto = HeaderValue::from_static(openapi_v2_proto::CONTENT_TYPE);
        h.insert(header::ACCEPT, proto);
        assert_eq!(v2_encoding(&h), Some(V2Encoding::Protobuf));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, */*"),
        );
        assert_eq!(v2_encoding(&h), Some(V2Encoding::Json));
        h.insert(header::ACCEPT, HeaderValue::from_static("text/html"));
        assert_eq!(v2_encoding(&h), None);
    }
}
