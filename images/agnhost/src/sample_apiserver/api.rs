//! The REST surface: a path and method become a target and the authorizer's attributes (as
//! upstream's RequestInfoFactory reads them), then the generic registry's handlers run against the
//! store — create (201, with NamespaceLifecycle and BanFlunder admission), get, list with a label
//! selector, update and patch (merge; strategic merge is the same for these types), delete and
//! deletecollection — answering as the generic apiserver does.

use http::{Method, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{json, Value};

use super::authz::Attributes;
use super::kube::Kube;
use super::meta::{self, Selector};
use super::status::{deleted, json_response, ApiError};
use super::store::Store;
use super::wardle::{self, Resource, GROUP, VERSION};
use axum::response::{IntoResponse, Response};

/// What a path names.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// A discovery document.
    Discovery(Value),
    /// A collection; `ns` None is cluster scope (for flunders: every namespace).
    Collection {
        res: &'static Resource,
        ns: Option<String>,
    },
    Item {
        res: &'static Resource,
        ns: String,
        name: String,
    },
    /// Nothing is served there.
    Unknown,
}

pub fn parse(path: &str) -> Target {
    let trimmed = path.trim_end_matches('/');
    match trimmed {
        "/healthz" | "/readyz" | "/livez" => return Target::Health,
        "/apis" => return Target::Discovery(wardle::api_group_list()),
        _ => {}
    }
    let segs: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["apis", g] if *g == GROUP => Target::Discovery(wardle::api_group()),
        ["apis", g, v] if *g == GROUP && *v == VERSION => {
            Target::Discovery(wardle::resource_list())
        }
        ["apis", g, v, rest @ ..] if *g == GROUP && *v == VERSION => resource_target(rest),
        _ => Target::Unknown,
    }
}

fn resource_target(rest: &[&str]) -> Target {
    let find = |plural: &str| wardle::resource(plural);
    match rest {
        ["namespaces", ns, plural] => match find(plural) {
            Some(res) if res.namespaced => Target::Collection {
                res,
                ns: Some(ns.to_string()),
            },
            _ => Target::Unknown,
        },
        ["namespaces", ns, plural, name] => match find(plural) {
            Some(res) if res.namespaced => Target::Item {
                res,
                ns: ns.to_string(),
                name: name.to_string(),
            },
            _ => Target::Unknown,
        },
        [plural] => match find(plural) {
            Some(res) => Target::Collection { res, ns: None },
            None => Target::Unknown,
        },
        [plural, name] => match find(plural) {
            Some(res) if !res.namespaced => Target::Item {
                res,
                ns: String::new(),
                name: name.to_string(),
            },
            _ => Target::Unknown,
        },
        _ => Target::Unknown,
    }
}

/// One query parameter, percent- and plus-decoded.
pub fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| decode(v))
    })
}

/// A query value: `+` is a space, `%XX` a byte (Go's url.ParseQuery).
fn decode(s: &str) -> String {
    percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// The authorizer's view of a request; a method the target does not take is a 405.
pub fn attributes(
    method: &Method,
    path: &str,
    query: Option<&str>,
    target: &Target,
) -> Result<Attributes, ApiError> {
    let (res, ns, name, collection) = match target {
        Target::Collection { res, ns } => (*res, ns.clone().unwrap_or_default(), "", true),
        Target::Item { res, ns, name } => (*res, ns.clone(), name.as_str(), false),
        Target::Health | Target::Discovery(_) | Target::Unknown => {
            return Ok(Attributes {
                verb: method.as_str().to_ascii_lowercase(),
                path: path.to_string(),
                ..Default::default()
            });
        }
    };
    let watch = query_param(query, "watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method.as_str(), collection) {
        ("GET", true) if watch => "watch",
        ("GET", true) => "list",
        ("GET", false) => "get",
        ("POST", true) => "create",
        ("PUT", false) => "update",
        ("PATCH", false) => "patch",
        ("DELETE", false) => "delete",
        ("DELETE", true) => "deletecollection",
        (m, _) => return Err(ApiError::method_not_allowed(m)),
    };
    Ok(Attributes {
        verb: verb.into(),
        resource: res.plural.into(),
        group: GROUP.into(),
        version: VERSION.into(),
        namespace: ns,
        name: name.into(),
        path: path.to_string(),
        ..Default::default()
    })
}

/// What a handler needs besides the request.
pub struct Backend<'a> {
    pub store: &'a Store,
    pub kube: &'a dyn Kube,
}

fn ok(code: StatusCode, v: &Value) -> Response {
    json_response(code, v)
}

fn decode_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type JSON): {e}"
        ))
    })
}

/// The body as an object of `res` at `ns`: apiVersion/kind filled in when absent and checked
/// when present, the namespace the URL's.
fn object_of(res: &Resource, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the object provided is unrecognized"));
    }
    let kind = obj["kind"].as_str().unwrap_or("");
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    if (!kind.is_empty() && kind != res.kind)
        || (!api_version.is_empty() && api_version != wardle::api_version())
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            wardle::api_version()
        )));
    }
    obj["kind"] = json!(res.kind);
    obj["apiVersion"] = json!(wardle::api_version());
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if res.namespaced {
        let sent = obj["metadata"]["namespace"].as_str().unwrap_or("");
        if !sent.is_empty() && sent != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        obj["metadata"]["namespace"] = json!(ns);
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    wardle::normalize(res, &mut obj);
    Ok(obj)
}

/// NamespaceLifecycle: new objects only in a namespace that exists and is not terminating.
async fn namespace_lifecycle(
    kube: &dyn Kube,
    res: &Resource,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    let (code, body) = kube
        .get(&format!("/api/v1/namespaces/{ns}"))
        .await
        .map_err(ApiError::internal)?;
    match code {
        200 if body["status"]["phase"] == "Terminating" => Err(ApiError::forbidden(
            GROUP,
            res.plural,
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        )),
        200 => Ok(()),
        404 => Err(ApiError::not_found("", "namespaces", ns)),
        other => Err(ApiError::internal(format!(
            "reading namespace {ns}: {other}: {}",
            body["message"].as_str().unwrap_or("")
        ))),
    }
}

async fn create(
    b: &Backend<'_>,
    res: &'static Resource,
    ns: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let mut obj = object_of(res, ns, decode_body(body)?)?;
    meta::generate_name(&mut obj);
    wardle::validate(res, &obj)?;
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if res.namespaced {
        namespace_lifecycle(b.kube, res, ns, &name).await?;
    }
    if res.kind == "Flunder" {
        let fischers =
            wardle::resource("fischers").map(|f| b.store.list(f, None, &Selector::default()).0);
        wardle::ban_flunder(&name, fischers.iter().flatten())?;
    }
    let created = b.store.create(res, ns, obj)?;
    Ok(ok(StatusCode::CREATED, &created))
}

fn list(
    b: &Backend<'_>,
    res: &Resource,
    ns: Option<&str>,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let selector = Selector::parse(&query_param(query, "labelSelector").unwrap_or_default())?;
    let (items, rv) = b.store.list(res, ns, &selector);
    Ok(ok(
        StatusCode::OK,
        &json!({"kind": format!("{}List", res.kind), "apiVersion": wardle::api_version(),
            "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}

fn update(
    b: &Backend<'_>,
    res: &Resource,
    ns: &str,
    name: &str,
    obj: Value,
) -> Result<Response, ApiError> {
    let obj = object_of(res, ns, obj)?;
    let sent = obj["metadata"]["name"].as_str().unwrap_or("");
    if sent != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({sent}) does not match the name on the URL ({name})"
        )));
    }
    wardle::validate(res, &obj)?;
    Ok(ok(StatusCode::OK, &b.store.update(res, ns, obj)?))
}

fn patch(
    b: &Backend<'_>,
    res: &Resource,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    if media != "application/merge-patch+json" && media != "application/strategic-merge-patch+json"
    {
        return Err(ApiError::unsupported_media_type(content_type));
    }
    let patch = decode_body(body)?;
    let mut obj = b.store.get(res, ns, name)?;
    meta::merge_patch(&mut obj, &patch);
    update(b, res, ns, name, obj)
}

fn delete_collection(
    b: &Backend<'_>,
    res: &Resource,
    ns: Option<&str>,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let selector = Selector::parse(&query_param(query, "labelSelector").unwrap_or_default())?;
    let (items, _) = b.store.list(res, ns, &selector);
    let mut gone = Vec::new();
    for item in items {
        let item_ns = item["metadata"]["namespace"].as_str().unwrap_or("");
        let name = item["metadata"]["name"].as_str().unwrap_or("");
        if let Ok(o) = b.store.delete(res, item_ns, name) {
            gone.push(o);
        }
    }
    Ok(ok(
        StatusCode::OK,
        &json!({"kind": format!("{}List", res.kind), "apiVersion": wardle::api_version(),
            "metadata": {}, "items": gone}),
    ))
}

/// Runs an authorized request.
pub async fn serve(
    b: &Backend<'_>,
    target: Target,
    method: &Method,
    query: Option<&str>,
    content_type: &str,
    body: &[u8],
) -> Response {
    let result = match (target, method.as_str()) {
        (Target::Health, "GET") => Ok((StatusCode::OK, "ok").into_response()),
        (Target::Discovery(doc), "GET") => Ok(ok(StatusCode::OK, &doc)),
        (Target::Health | Target::Discovery(_), m) => Err(ApiError::method_not_allowed(m)),
        (Target::Unknown, _) => Err(ApiError::path_not_found()),
        (Target::Collection { res, ns }, "GET") => {
            if query_param(query, "watch").is_some_and(|w| w == "true" || w == "1") {
                Err(ApiError::method_not_allowed("watch"))
            } else {
                list(b, res, ns.as_deref(), query)
            }
        }
        (Target::Collection { res, ns }, "POST") => {
            create(b, res, ns.as_deref().unwrap_or(""), body).await
        }
        (Target::Collection { res, ns }, "DELETE") => {
            delete_collection(b, res, ns.as_deref(), query)
        }
        (Target::Item { res, ns, name }, "GET") => {
            b.store.get(res, &ns, &name).map(|o| ok(StatusCode::OK, &o))
        }
        (Target::Item { res, ns, name }, "PUT") => {
            decode_body(body).and_then(|o| update(b, res, &ns, &name, o))
        }
        (Target::Item { res, ns, name }, "PATCH") => patch(b, res, &ns, &name, content_type, body),
        (Target::Item { res, ns, name }, "DELETE") => b.store.delete(res, &ns, &name).map(|o| {
            let uid = o["metadata"]["uid"].as_str().unwrap_or("");
            ok(StatusCode::OK, &deleted(GROUP, res.plural, &name, uid))
        }),
        (_, m) => Err(ApiError::method_not_allowed(m)),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::super::kube::recording::Recording;
    use super::*;

    #[test]
    fn paths_name_what_upstream_serves() {
        assert!(matches!(parse("/apis"), Target::Discovery(_)));
        assert!(
            matches!(parse("/apis/wardle.example.com/v1alpha1"), Target::Discovery(d) if d["kind"] == "APIResourceList")
        );
        match parse("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders/f1") {
            Target::Item { res, ns, name } => {
                assert_eq!(
                    (res.plural, ns.as_str(), name.as_str()),
                    ("flunders", "default", "f1")
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse("/apis/wardle.example.com/v1alpha1/fischers/x"),
            Target::Item { .. }
        ));
        assert_eq!(
            parse("/apis/wardle.example.com/v1alpha1/flunders/f1"),
            Target::Unknown
        );
        assert_eq!(parse("/apis/other/v1"), Target::Unknown);
        let t = parse("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders");
        let a = attributes(&Method::DELETE, "/x", None, &t).unwrap();
        assert_eq!(a.verb, "deletecollection");
        let a = attributes(&Method::GET, "/x", Some("watch=true"), &t).unwrap();
        assert_eq!(a.verb, "watch");
        assert_eq!(
            query_param(Some("a=1&labelSelector=x%3Dy+z"), "labelSelector").as_deref(),
            Some("x=y z")
        );
    }

    async fn body_json(r: Response) -> (u16, Value) {
        let code = r.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(r.into_body())
            .await
            .unwrap()
            .to_bytes();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn flunders_are_created_listed_and_deleted_as_the_registry_does() {
        let kube = Recording::default();
        kube.answer(
            "/api/v1/namespaces/default",
            200,
            json!({"status": {"phase": "Active"}}),
        );
        kube.answer(
            "/api/v1/namespaces/going",
            200,
            json!({"status": {"phase": "Terminating"}}),
        );
        let store = Store::default();
        let b = Backend {
            store: &store,
            kube: &kube,
        };
        let coll = parse("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders");
        let body = br#"{"apiVersion":"wardle.example.com/v1alpha1","kind":"Flunder","metadata":{"labels":{"sample-label":"true"},"name":"f1","namespace":"default"}}"#;
        let (code, created) = body_json(
            serve(
                &b,
                coll.clone(),
                &Method::POST,
                None,
                "application/json",
                body,
            )
            .await,
        )
        .await;
        assert_eq!(code, 201, "{created}");
        assert_eq!(created["kind"], "Flunder");
        assert_eq!(created["apiVersion"], "wardle.example.com/v1alpha1");
        assert_eq!(created["metadata"]["name"], "f1");
        assert!(created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()));

        let (code, again) = body_json(
            serve(
                &b,
                coll.clone(),
                &Method::POST,
                None,
                "application/json",
                body,
            )
            .await,
        )
        .await;
        assert_eq!(
            (code, again["reason"].as_str()),
            (409, Some("AlreadyExists"))
        );

        let (_, list) = body_json(
            serve(
                &b,
                coll.clone(),
                &Method::GET,
                Some("labelSelector=sample-label%3Dtrue"),
                "",
                b"",
            )
            .await,
        )
        .await;
        assert_eq!(list["kind"], "FlunderList");
        assert_eq!(list["items"].as_array().unwrap().len(), 1);

        let item = parse("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders/f1");
        let (code, patched) = body_json(
            serve(
                &b,
                item.clone(),
                &Method::PATCH,
                None,
                "application/merge-patch+json",
                br#"{"spec":{"reference":"f0"}}"#,
            )
            .await,
        )
        .await;
        assert_eq!(code, 200, "{patched}");
        assert_eq!(patched["spec"]["referenceType"], "Flunder");

        let (code, status) =
            body_json(serve(&b, item.clone(), &Method::DELETE, None, "", b"").await).await;
        assert_eq!((code, status["status"].as_str()), (200, Some("Success")));
        let (code, missing) = body_json(serve(&b, item, &Method::GET, None, "", b"").await).await;
        assert_eq!(code, 404);
        assert_eq!(
            missing["message"],
            "flunders.wardle.example.com \"f1\" not found"
        );

        // NamespaceLifecycle: no new content in a missing or terminating namespace.
        let nowhere = parse("/apis/wardle.example.com/v1alpha1/namespaces/nowhere/flunders");
        let (code, e) = body_json(
            serve(
                &b,
                nowhere,
                &Method::POST,
                None,
                "application/json",
                br#"{"metadata":{"name":"x"}}"#,
            )
            .await,
        )
        .await;
        assert_eq!(
            (code, e["message"].as_str()),
            (404, Some("namespaces \"nowhere\" not found"))
        );
        let going = parse("/apis/wardle.example.com/v1alpha1/namespaces/going/flunders");
        let (code, _) = body_json(
            serve(
                &b,
                going,
                &Method::POST,
                None,
                "application/json",
                br#"{"metadata":{"name":"x"}}"#,
            )
            .await,
        )
        .await;
        assert_eq!(code, 403);
    }

    #[tokio::test]
    async fn a_fischer_bans_a_flunder_name() {
        let kube = Recording::default();
        kube.answer("/api/v1/namespaces/default", 200, json!({}));
        let store = Store::default();
        let b = Backend {
            store: &store,
            kube: &kube,
        };
        let fischers = parse("/apis/wardle.example.com/v1alpha1/fischers");
        let (code, _) = body_json(
            serve(
                &b,
                fischers,
                &Method::POST,
                None,
                "application/json",
                br#"{"metadata":{"name":"fi"},"disallowedFlunders":["bad"]}"#,
            )
            .await,
        )
        .await;
        assert_eq!(code, 201);
        let coll = parse("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders");
        let (code, e) = body_json(
            serve(
                &b,
                coll,
                &Method::POST,
                None,
                "application/json",
                br#"{"metadata":{"name":"bad"}}"#,
            )
            .await,
        )
        .await;
        assert_eq!((code, e["reason"].as_str()), (403, Some("Forbidden")));
    }
}
