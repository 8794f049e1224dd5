//! HTTP front: one router; API requests are parsed into (verb, resource path), authorized, and served
//! by the generic handlers in `crud.rs` / `watch.rs` for whatever resource the registry holds.

pub mod apply;
pub mod crud;
pub mod delete;
pub mod discovery;
pub mod discovery_aggregated;
pub mod duplicate_fields;
pub mod ephemeral_containers;
pub mod eviction;
pub mod health;
pub mod list;
pub mod list_options;
pub mod log_websocket;
pub mod metrics_layer;
pub mod namespaces;
pub mod oidc;
pub mod openapi;
pub mod openapi_v2_proto;
pub mod partial_metadata;
pub mod pod_part;
pub mod pod_resize;
pub mod portforward;
pub mod proxy;
pub mod resource_proxy;
pub mod reviews;
pub mod stored;
pub mod subresources;
pub mod table;
pub mod watch;

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::Value;

use crate::auth::{Attributes, Identity};
use crate::request::{upstream_verb, Requester, Target};
use crate::request_body::{parse_body, MAX_BODY};
use crate::request_path::{self, ApiPath, ResourcePath};
use crate::state::{AppState, Shared};
use crate::status::{ok_json, ApiError};

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/livez", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(serve)
        .layer(axum::middleware::from_fn_with_state(
            state.limits.clone(),
            crate::flowcontrol::limiter::shed,
        ))
        .layer(axum::middleware::from_fn(crate::warnings::collect))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate_and_authorize_paths,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics_layer::record,
        ))
        .with_state(state)
}

fn identity(req: &Request) -> Identity {
    req.extensions()
        .get::<Identity>()
        .cloned()
        .unwrap_or(Identity::Anonymous)
}

/// Non-API paths (health, metrics, version, discovery, openapi) are authorized here by path; API
/// resource requests are authorized in `serve` once their attributes are known.
/// `Authorization: Bearer <token>`, when present.
fn bearer(req: &Request) -> Option<String> {
    let value = req.headers().get(axum::http::header::AUTHORIZATION)?;
    let text = value.to_str().ok()?;
    let (scheme, token) = text.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
        .filter(|t| !t.is_empty())
}

async fn authenticate_and_authorize_paths(
    State(state): State<Shared>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    // A client certificate wins; otherwise a bearer token (bootstrap token or service-account JWT)
    // names the user, and an invalid token is 401 even where anonymous access would do.
    if identity(&req) == Identity::Anonymous {
        if let Some(token) = bearer(&req) {
            match state.tokens.authenticate(&token).await {
                Ok(Some(user)) => {
                    req.extensions_mut().insert(Identity::User(user));
                }
                Ok(None) => return ApiError::unauthorized().into_response(),
                Err(e) => return crate::storage_status::store_error(e).into_response(),
            }
        }
    }
    // The user is known: the audit policy is evaluated now, before impersonation (as upstream).
    if let Err(resp) = crate::audit::begin(&mut req).await {
        return resp;
    }
    // Impersonation headers: the request goes on as the impersonated user, if the requester may.
    let impersonated =
        crate::impersonation::apply(&state.authorizer, &identity(&req), req.headers()).await;
    match impersonated {
        Ok(Some(as_user)) => {
            crate::audit::impersonated(&as_user);
            crate::impersonation::strip(req.headers_mut());
            req.extensions_mut().insert(as_user);
        }
        Ok(None) => {}
        Err(e) => return e.into_response(),
    }
    let who = identity(&req);
    let path = req.uri().path().to_string();
    let is_resource = matches!(request_path::parse(&path), Some(ApiPath::Resource(_)));
    if !is_resource {
        let verb = req.method().as_str().to_ascii_lowercase();
        let attrs = Attributes::NonResource {
            verb: &verb,
            path: &path,
        };
        let allowed = match state.authorizer.authorize(&who, &attrs).await {
            Ok(allowed) => allowed,
            Err(e) => return ApiError::internal(e.to_string()).into_response(),
        };
        crate::audit::authorization(allowed, "");
        if !allowed {
            return match who {
                Identity::Anonymous => ApiError::unauthorized().into_response(),
                _ => ApiError::forbidden_path(who.name(), &verb, &path).into_response(),
            };
        }
    } else if who == Identity::Anonymous {
        return ApiError::unauthorized().into_response();
    }
    next.run(req).await
}

async fn serve(State(state): State<Shared>, req: Request) -> Response {
    match serve_inner(state, req).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// A request for an extension API server's group/version, proxied to it.
async fn proxy_to_backend(
    state: &AppState,
    backend: crate::aggregator::Backend,
    who: &Identity,
    req: Request,
) -> Response {
    crate::aggregator::proxy::serve(&state.store, &state.aggregator, backend, who, req).await
}

async fn serve_inner(state: Shared, req: Request) -> Result<Response, ApiError> {
    let path = req.uri().path().to_string();
    let query: HashMap<String, String> = Query::try_from_uri(req.uri())
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    // Aggregated discovery documents (`/apis/<group>/<version>`) belong to the extension server.
    if let Some(backend) = crate::aggregator::proxy::group_version_backend(&state.aggregator, &path)
    {
        let who = identity(&req);
        return Ok(proxy_to_backend(&state, backend, &who, req).await);
    }
    match request_path::parse(&path) {
        Some(ApiPath::Resource(rp)) => serve_resource(state, req, rp, query).await,
        Some(other) => discovery::serve(&state, &other, req.headers()),
        None if path == "/version" || path == "/version/" => Ok(ok_json(&discovery::version())),
        None if path.starts_with(oidc::CONFIGURATION) || path.starts_with(oidc::JWKS) => {
            oidc::serve(&state, &path)
        }
        None if path.starts_with("/openapi/") => openapi::serve(&state, &path, req.headers()),
        None => Err(ApiError::path_not_found()),
    }
}

async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::too_large())
}

/// Upstream's negotiation NotAcceptable: the Accept header asks for a representation (here a
/// Table) the endpoint cannot produce.
fn not_acceptable() -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf".into(),
        None,
    )
}

/// The server, not the client, says who asked (a CSR's spec.username/groups/uid/extra).
fn record_requester(obj: &mut Value, who: &Identity) {
    if !obj["spec"].is_object() {
        return;
    }
    let spec = &mut obj["spec"];
    if let Some(m) = spec.as_object_mut() {
        for f in ["username", "uid", "groups", "extra"] {
            m.remove(f);
        }
    }
    if let Identity::User(u) = who {
        spec["username"] = serde_json::json!(u.name);
        spec["groups"] = serde_json::json!(u.groups);
    }
}

async fn serve_resource(
    state: Shared,
    req: Request,
    rp: ResourcePath,
    query: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let who = identity(&req);
    let mut verb = upstream_verb(req.method(), rp.name.is_some(), &query);
    if matches!(
        rp.subresource.as_deref(),
        Some("exec" | "attach" | "portforward")
    ) {
        // Upstream authorizes streaming upgrades as create, whatever the method (GET websockets).
        verb = "create";
    }
    if rp.subresource.as_deref() == Some("proxy") {
        // Connect requests: each method is its own verb (`resource_proxy::verb`).
        verb = resource_proxy::verb(req.method());
    }
    let attrs = Attributes::Resource {
        verb,
        group: &rp.group,
        resource: &rp.resource,
        subresource: rp.subresource.as_deref(),
        namespace: rp.namespace.as_deref(),
        name: rp.name.as_deref(),
    };
    let allowed = state
        .authorizer
        .authorize(&who, &attrs)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    crate::audit::authorization(allowed, "");
    if !allowed {
        return Err(ApiError::forbidden_resource(
            who.name(),
            verb,
            &rp.group,
            &rp.resource,
            rp.subresource.as_deref(),
            rp.namespace.as_deref(),
            rp.name.as_deref(),
        ));
    }
    // A group/version another server serves (an APIService with a service): proxied, once
    // kiln has authenticated and authorized the request, as upstream's aggregator does.
    if let Some(backend) = state.aggregator.route(&rp.group, &rp.version) {
        return Ok(proxy_to_backend(&state, backend, &who, req).await);
    }
    let spec = state
        .registry
        .lookup(&rp.group, &rp.version, &rp.resource)
        .ok_or_else(ApiError::path_not_found)?;
    if let Some(text) = spec.custom.and_then(|c| c.deprecation.as_deref()) {
        // A deprecated CRD version warns on every request, as upstream.
        crate::warnings::add(text);
    }
    let requester = Requester {
        user: match &who {
            Identity::User(u) => Some(u.clone()),
            Identity::Anonymous => None,
        },
        manager: Some(match query.get("fieldManager").filter(|m| !m.is_empty()) {
            Some(m) => m.clone(),
            None => crate::fieldmanager::manager_from_user_agent(
                req.headers()
                    .get(axum::http::header::USER_AGENT)
                    .and_then(|v| v.to_str().ok()),
            ),
        }),
    };
    if !spec.namespaced && rp.namespace.is_some() {
        return Err(ApiError::path_not_found());
    }
    if spec.group == crate::registry::metrics_api::GROUP {
        return crate::resource_metrics::serve(
            &state.store,
            &state.kubelet,
            &state.resource_metrics,
            spec,
            &rp,
            verb,
            &query,
        )
        .await;
    }
    if let (Some("proxy"), Some(name), Some(kind)) = (
        rp.subresource.as_deref(),
        rp.name.as_deref(),
        resource_proxy::Kind::of(spec),
    ) {
        let ns = rp.namespace.as_deref();
        return resource_proxy::serve(&state, kind, ns, name, requester, req).await;
    }
    if spec.ephemeral {
        if verb != "create" || rp.name.is_some() || rp.subresource.is_some() {
            return Err(ApiError::method_not_allowed(verb, spec.group, spec.plural));
        }
        if table::wants_table(req.headers()) {
            // No Table conversion exists for a review: upstream's output negotiation refuses the
            // media type before the body is read.
            return Err(not_acceptable());
        }
        let (parts, body) = req.into_parts();
        let obj = parse_body(&parts.headers, &read_body(body).await?)?;
        return reviews::create(&state, spec, rp.namespace.as_deref(), &who, obj).await;
    }
    let status = match rp.subresource.as_deref() {
        None => false,
        Some("status") if spec.status_subresource => true,
        Some("scale") if spec.scale.is_some() => {
            if !matches!(verb, "get" | "update" | "patch") {
                return Err(ApiError::method_not_allowed(verb, spec.group, spec.plural));
            }
            let target = Target {
                spec,
                namespace: rp.namespace,
                name: rp.name,
                status: false,
                requester: requester.clone(),
            };
            let (parts, body) = req.into_parts();
            let body = read_body(body).await?;
            return subresources::scale(&state, &target, verb, &parts.headers, &query, &body).await;
        }
        Some(action) if spec.action(action).is_some() => {
            let allowed = spec.action(action).is_some_and(|a| a.verbs.contains(&verb));
            if !allowed || rp.name.is_none() {
                return Err(ApiError::method_not_allowed(verb, spec.group, spec.plural));
            }
            let target = Target {
                spec,
                namespace: rp.namespace,
                name: rp.name,
                status: false,
                requester: requester.clone(),
            };
            match action {
                "log" => return log_websocket::serve(&state, &target, &query, req).await,
                "exec" | "attach" => {
                    return proxy::exec(&state, &target, action, &query, req).await
                }
                "portforward" => return portforward::serve(&state, &target, &query, req).await,
                _ => {}
            }
            let (parts, body) = req.into_parts();
            let body = read_body(body).await?;
            let headers = &parts.headers;
            return match action {
                "binding" => subresources::binding(&state, &target, headers, &query, &body).await,
                "eviction" => subresources::eviction(&state, &target, headers, &query, &body).await,
                "token" => subresources::token(&state, &target, headers, &query, &body).await,
                "finalize" => subresources::finalize(&state, &target, headers, &query, &body).await,
                "approval" => {
                    subresources::approval(&state, &target, verb, headers, &query, &body).await
                }
                "ephemeralcontainers" => {
                    ephemeral_containers::serve(&state, &target, verb, headers, &query, &body).await
                }
                "resize" => pod_resize::serve(&state, &target, verb, headers, &query, &body).await,
                _ => Err(ApiError::path_not_found()),
            };
        }
        Some(_) => return Err(ApiError::path_not_found()),
    };
    let main_verb_ok = status || spec.supports(verb);
    let status_verb_ok = !status || matches!(verb, "get" | "update" | "patch");
    if !main_verb_ok || !status_verb_ok {
        return Err(ApiError::method_not_allowed(verb, spec.group, spec.plural));
    }
    let target = Target {
        spec,
        namespace: rp.namespace,
        name: rp.name,
        status,
        requester,
    };
    let (parts, body) = req.into_parts();
    let headers: &HeaderMap = &parts.headers;
    match verb {
        "get" => crud::get(&state, &target, headers, &query).await,
        "list" => list::list(&state, &target, headers, &query).await,
        "watch" => watch::watch(state.clone(), target, headers, &query).await,
        "create" => {
            let bytes = read_body(body).await?;
            let mut obj = parse_body(headers, &bytes)?;
            duplicate_fields::check(spec, headers, &bytes, &obj, crud::field_validation(&query))?;
            if spec.records_requester {
                record_requester(&mut obj, &who);
            }
            crud::create(&state, &target, &query, obj).await
        }
        "update" => {
            let bytes = read_body(body).await?;
            let obj = parse_body(headers, &bytes)?;
            duplicate_fields::check(spec, headers, &bytes, &obj, crud::field_validation(&query))?;
            crud::update(&state, &target, &query, obj).await
        }
        "patch" => crud::patch(&state, &target, headers, &query, &read_body(body).await?).await,
        "delete" => delete::delete(&state, &target, headers, &query, &read_body(body).await?).await,
        "deletecollection" => {
            delete::delete_collection(&state, &target, headers, &query, &read_body(body).await?)
                .await
        }
        other => Err(ApiError::method_not_allowed(other, spec.group, spec.plural)),
    }
}
