//! pods/proxy, services/proxy and nodes/proxy: any HTTP method on
//! `…/{pods|services|nodes}/{[scheme:]name[:port]}/proxy[/path]` is passed, once authorized, to the
//! pod, to a ready pod behind the service (through its Endpoints) or to the node's kubelet, with
//! the query string, and the backend's answer comes back as it is — except that, as upstream's
//! upgrade-aware proxy handler does, `…/proxy` without a path is first redirected to `…/proxy/`
//! (GET and HEAD), a `Location` header and the links of an HTML page are rewritten to go through
//! the proxy again, and CORS headers are dropped. Upgrade requests (WebSocket) are spliced.

pub mod client;
pub mod html;
pub mod links;
pub mod location;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::TokioIo;
use rand::Rng;
use serde_json::{json, Value};

use super::crud::read;
use crate::admission::webhook::connect::admit_connect;
use crate::aggregator::headers::strip_hop_by_hop;
use crate::registry::resources::{NODES, PODS};
use crate::registry::services::{ENDPOINTS, SERVICES};
use crate::registry::ResourceSpec;
use crate::request::{Requester, Target};
use crate::state::AppState;
use crate::status::ApiError;
use client::SendError;
use links::Rewriter;
use location::{Backend, LocationError, SchemeNamePort};

/// The most of an HTML page held in memory to rewrite its links (upstream holds all of it).
const MAX_HTML: usize = 64 * 1024 * 1024;

/// CORS headers a backend sets are not the API server's to grant (upstream's corsRemovingTransport).
const CORS_HEADERS: &[&str] = &[
    "access-control-allow-credentials",
    "access-control-allow-headers",
    "access-control-allow-methods",
    "access-control-allow-origin",
];

/// What is proxied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Service,
    Node,
}

impl Kind {
    /// The kinds with a proxy subresource.
    pub fn of(spec: &ResourceSpec) -> Option<Kind> {
        if !spec.group.is_empty() || spec.custom.is_some() {
            return None;
        }
        match spec.plural {
            "pods" => Some(Kind::Pod),
            "services" => Some(Kind::Service),
            "nodes" => Some(Kind::Node),
            _ => None,
        }
    }

    fn spec(self) -> &'static ResourceSpec {
        match self {
            Kind::Pod => &PODS,
            Kind::Service => &SERVICES,
            Kind::Node => &NODES,
        }
    }

    fn options_kind(self) -> &'static str {
        match self {
            Kind::Pod => "PodProxyOptions",
            Kind::Service => "ServiceProxyOptions",
            Kind::Node => "NodeProxyOptions",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::Service => "service",
            Kind::Node => "node",
        }
    }
}

/// The object CONNECT admission sees: the kind's proxy options with the subpath (`path`, left out
/// when empty as Go's omitempty does).
pub fn options_object(kind: Kind, subpath: &str) -> Value {
    let mut o = json!({"kind": kind.options_kind(), "apiVersion": "v1"});
    if !subpath.is_empty() {
        o["path"] = json!(subpath);
    }
    o
}

/// The authorization verb of a proxy request: connect requests are authorized by method as
/// upstream's RequestInfo names them, OPTIONS (and any other method) with the empty verb that only
/// a `*` rule grants.
pub fn verb(method: &Method) -> &'static str {
    match *method {
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error("error trying to reach service: {0}")]
    Unreachable(#[from] SendError),
    #[error("error trying to parse Location header: {0:?}")]
    LocationHeader(String),
    #[error("reading the backend's HTML page: {0}")]
    Page(String),
}

impl From<ProxyError> for ApiError {
    fn from(e: ProxyError) -> ApiError {
        match &e {
            ProxyError::Location(
                LocationError::InvalidId { .. } | LocationError::AddressNotAllowed,
            ) => ApiError::bad_request(e.to_string()),
            ProxyError::Location(LocationError::NoServicePort { .. })
            | ProxyError::Location(LocationError::NoEndpoints(_))
            | ProxyError::Unreachable(_) => ApiError::unavailable(e.to_string()),
            ProxyError::Location(LocationError::NoNodeAddress(_))
            | ProxyError::LocationHeader(_)
            | ProxyError::Page(_) => ApiError::internal(e.to_string()),
        }
    }
}

fn target(spec: &'static ResourceSpec, namespace: Option<&str>, name: &str) -> Target {
    Target {
        spec,
        namespace: namespace.map(str::to_string),
        name: Some(name.to_string()),
        status: false,
        requester: Default::default(),
    }
}

/// The service's backend: a random ready address carrying the port, of a pod that holds it.
async fn service_backend(
    state: &AppState,
    namespace: &str,
    id: &SchemeNamePort,
    id_text: &str,
) -> Result<Backend, ApiError> {
    let port_name = if id.port.parse::<i64>().is_ok() {
        let (service, _) = read(
            state,
            &target(&SERVICES, Some(namespace), &id.name),
            &id.name,
        )
        .await?;
        location::service_port_name(&service, id).map_err(ProxyError::from)?
    } else {
        id.port.clone()
    };
    let (endpoints, _) = read(
        state,
        &target(&ENDPOINTS, Some(namespace), &id.name),
        &id.name,
    )
    .await?;
    // ThreadRng is not Send: it lives only while the candidates are ordered.
    let candidates = {
        let mut rng = rand::rng();
        location::endpoint_candidates(&endpoints, namespace, &id.name, &port_name, &mut |n| {
            rng.random_range(0..n)
        })
    }
    .map_err(ProxyError::from)?;
    for c in candidates {
        let Some(pod_name) = c.pod.as_deref() else {
            tracing::debug!(ip = %c.ip, "endpoint address has no pod of this namespace, skipped");
            continue;
        };
        match read(state, &target(&PODS, Some(namespace), pod_name), pod_name).await {
            Ok((pod, _)) if location::pod_has_ip(&pod, &c.ip) => {
                return Ok(location::service_backend(&c, id))
            }
            Ok(_) => {
                tracing::debug!(ip = %c.ip, pod = pod_name, "pod does not hold the endpoint's address")
            }
            Err(e) => {
                tracing::debug!(ip = %c.ip, pod = pod_name, error = %e.message, "endpoint's pod")
            }
        }
    }
    Err(ProxyError::from(LocationError::NoEndpoints(id_text.to_string())).into())
}

async fn backend(
    state: &AppState,
    kind: Kind,
    namespace: Option<&str>,
    id: &SchemeNamePort,
    id_text: &str,
) -> Result<Backend, ApiError> {
    Ok(match (kind, namespace) {
        (Kind::Pod, Some(ns)) => {
            let (pod, _) = read(state, &target(&PODS, Some(ns), &id.name), &id.name).await?;
            location::pod_backend(&pod, id).map_err(ProxyError::from)?
        }
        (Kind::Service, Some(ns)) => service_backend(state, ns, id, id_text).await?,
        (Kind::Node, None) => {
            let (node, _) = read(state, &target(&NODES, None, &id.name), &id.name).await?;
            location::node_backend(&node, id).map_err(ProxyError::from)?
        }
        _ => return Err(ApiError::path_not_found()),
    })
}

/// `Connection: upgrade` (any of its tokens), as upstream's IsUpgradeRequest reads it.
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The client's credentials stay with the API server (upstream's authentication and
/// impersonation filters remove them before any handler runs).
fn drop_credentials(headers: &mut HeaderMap) {
    headers.remove(header::AUTHORIZATION);
    let impersonation: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("impersonate-"))
        .cloned()
        .collect();
    for k in impersonation {
        headers.remove(k);
    }
}

fn is_html(headers: &HeaderMap) -> bool {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    content_type.split(';').next().unwrap_or("").trim() == "text/html"
}

/// The path segments before a proxy subpath: `api`, `v1`, [`namespaces`, ns], resource, name,
/// `proxy`.
fn segments_before(namespaced: bool) -> usize {
    if namespaced {
        7
    } else {
        5
    }
}

/// Everything a request needs besides its backend.
struct Plan {
    /// The decoded request path.
    request_path: String,
    /// The backend path before the request's trailing slash is added back.
    location_path: String,
    raw_query: Option<String>,
    /// The Host the client used (Host header, or the HTTP/2 authority).
    request_host: String,
}

impl Plan {
    fn new(req: &Request, namespaced: bool) -> Plan {
        let request_path = location::decode_path(req.uri().path());
        let subpath = location::subpath(&request_path, segments_before(namespaced));
        let location_path = location::location_path(subpath);
        let request_host = req
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(|a| a.to_string()))
            .unwrap_or_default();
        Plan {
            raw_query: req.uri().query().map(str::to_string),
            request_path,
            location_path,
            request_host,
        }
    }

    /// The origin-form target sent to the backend.
    fn backend_target(&self) -> String {
        let path = location::escape_path(&location::backend_path(
            &self.location_path,
            &self.request_path,
        ));
        let path = if path.is_empty() {
            "/".to_string()
        } else {
            path
        };
        match self.raw_query.as_deref().filter(|q| !q.is_empty()) {
            Some(q) => format!("{path}?{q}"),
            None => path,
        }
    }

    /// GET or HEAD of `…/proxy` goes to `…/proxy/` first (upstream's redirect for an empty path).
    fn redirect(&self, method: &Method) -> Option<Response> {
        if !self.location_path.is_empty() || !matches!(*method, Method::GET | Method::HEAD) {
            return None;
        }
        let query = self
            .raw_query
            .as_deref()
            .filter(|q| !q.is_empty())
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let to = HeaderValue::from_str(&format!("{}/{query}", self.request_path))
            .or_else(|_| {
                HeaderValue::from_str(&format!(
                    "{}/{query}",
                    location::escape_path(&self.request_path)
                ))
            })
            .ok()?;
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
        resp.headers_mut().insert(header::LOCATION, to);
        Some(resp)
    }

    fn rewriter(&self, backend: &Backend) -> Rewriter {
        Rewriter {
            prepend: location::path_prepend(&self.request_path, &self.location_path),
            backend_host: backend.authority(),
            request_host: self.request_host.clone(),
        }
    }
}

/// Serves one proxy request; `name` is the `[scheme:]name[:port]` path segment.
pub async fn serve(
    state: &AppState,
    kind: Kind,
    namespace: Option<&str>,
    name: &str,
    requester: Requester,
    req: Request,
) -> Result<Response, ApiError> {
    let id_text = location::decode_path(name);
    // Upstream admits a connect (operation CONNECT, the proxy options as object) before it looks
    // for the backend.
    let request_path = location::decode_path(req.uri().path());
    let subpath = location::subpath(&request_path, segments_before(namespace.is_some()));
    let target = Target {
        spec: kind.spec(),
        namespace: namespace.map(str::to_string),
        name: Some(id_text.clone()),
        status: false,
        requester,
    };
    admit_connect(
        &state.admission_context(),
        &target,
        "proxy",
        options_object(kind, subpath),
    )
    .await?;
    let id = location::split_scheme_name_port(&id_text).ok_or_else(|| {
        ApiError::from(ProxyError::from(LocationError::InvalidId {
            kind: kind.noun(),
            id: id_text.clone(),
        }))
    })?;
    let backend = backend(state, kind, namespace, &id, &id_text).await?;
    let addrs = client::resolve(&backend).await.map_err(ProxyError::from)?;
    if kind == Kind::Node && addrs.iter().any(|a| !location::is_proxyable(a.ip())) {
        return Err(ProxyError::from(LocationError::AddressNotAllowed).into());
    }
    let addr = addrs[0];
    let plan = Plan::new(&req, namespace.is_some());
    if is_upgrade(req.headers()) {
        return upgrade(state, &backend, addr, &plan, req).await;
    }
    if let Some(redirect) = plan.redirect(req.method()) {
        return Ok(redirect);
    }
    let rewriter = plan.rewriter(&backend);
    let method = req.method().clone();
    let (parts, body) = req.into_parts();
    let target = plan.backend_target();
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    drop_credentials(&mut headers);
    let backend_path = location::backend_path(&plan.location_path, &plan.request_path);
    let mut forwarded = location::join(&[&rewriter.prepend, &location::escape_path(&backend_path)]);
    if backend_path.ends_with('/') {
        forwarded.push('/');
    }
    if let Ok(v) = HeaderValue::from_str(&forwarded) {
        headers.insert("x-forwarded-uri", v);
    }
    if !headers.contains_key(header::HOST) {
        let host = if plan.request_host.is_empty() {
            backend.authority()
        } else {
            plan.request_host.clone()
        };
        if let Ok(v) = HeaderValue::from_str(&host) {
            headers.insert(header::HOST, v);
        }
    }
    let mut out = http::Request::new(body);
    *out.method_mut() = method.clone();
    *out.headers_mut() = headers;
    *out.uri_mut() = target
        .parse()
        .map_err(|e| ApiError::bad_request(format!("invalid proxy path: {e}")))?;
    let resp = client::send(&state.kubelet, backend.transport, addr, out)
        .await
        .map_err(ProxyError::from)?;
    respond(resp, &rewriter, &method).await
}

/// The backend's response, links rewritten.
async fn respond(
    resp: http::Response<hyper::body::Incoming>,
    rewriter: &Rewriter,
    method: &Method,
) -> Result<Response, ApiError> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    for h in CORS_HEADERS {
        parts.headers.remove(*h);
    }
    let location = parts
        .headers
        .get(header::LOCATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .filter(|l| !l.is_empty());
    if let Some(link) = location {
        let rewritten = rewriter
            .rewrite(&link)
            .ok_or_else(|| ProxyError::LocationHeader(link.clone()))?;
        let value = HeaderValue::from_str(&rewritten)
            .map_err(|_| ProxyError::LocationHeader(rewritten.clone()))?;
        parts.headers.insert(header::LOCATION, value);
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let encoded = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.is_empty());
    // Compressed pages pass unchanged: kiln has no gzip/deflate codec (upstream decompresses them
    // to rewrite). A HEAD answer has no page to rewrite.
    if !is_html(&parts.headers) || encoded || *method == Method::HEAD {
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let page = Limited::new(body, MAX_HTML)
        .collect()
        .await
        .map_err(|e| ProxyError::Page(e.to_string()))?
        .to_bytes();
    let page = html::rewrite(&page, &|link| rewriter.rewrite(link));
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, Body::from(page)))
}

/// An upgrade request: the handshake goes to the backend and, once it switches protocols, the two
/// connections are spliced.
async fn upgrade(
    state: &AppState,
    backend: &Backend,
    addr: std::net::SocketAddr,
    plan: &Plan,
    mut req: Request,
) -> Result<Response, ApiError> {
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut headers = req.headers().clone();
    drop_credentials(&mut headers);
    let mut out = http::Request::new(Body::empty());
    *out.method_mut() = req.method().clone();
    *out.headers_mut() = headers;
    *out.uri_mut() = plan
        .backend_target()
        .parse()
        .map_err(|e| ApiError::bad_request(format!("invalid proxy path: {e}")))?;
    let resp = client::send(&state.kubelet, backend.transport, addr, out)
        .await
        .map_err(ProxyError::from)?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let mut answer = Response::new(Body::empty());
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *answer.headers_mut() = resp.headers().clone();
    let authority = backend.authority();
    tokio::spawn(async move {
        let upstream = match hyper::upgrade::on(resp).await {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(backend = %authority, error = %e, "proxy backend upgrade failed");
                return;
            }
        };
        let client = match client_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "proxy client upgrade failed");
                return;
            }
        };
        let mut a = TokioIo::new(client);
        let mut b = TokioIo::new(upstream);
        if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
            tracing::debug!(backend = %authority, error = %e, "proxied stream ended");
        }
    });
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use location::Transport;

    fn request(method: Method, uri: &str) -> Request {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "10.250.0.11:6443")
            .body(Body::empty())
            .unwrap()
    }

    #[test]
    fn admission_sees_the_proxy_options() {
        assert_eq!(
            options_object(Kind::Pod, "/some/path/"),
            json!({"kind": "PodProxyOptions", "apiVersion": "v1", "path": "/some/path/"})
        );
        assert_eq!(
            options_object(Kind::Service, ""),
            json!({"kind": "ServiceProxyOptions", "apiVersion": "v1"})
        );
        assert_eq!(options_object(Kind::Node, "/")["kind"], "NodeProxyOptions");
    }

    #[test]
    fn methods_map_to_upstream_verbs() {
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::HEAD), "get");
        assert_eq!(verb(&Method::POST), "create");
        assert_eq!(verb(&Method::PUT), "update");
        assert_eq!(verb(&Method::PATCH), "patch");
        assert_eq!(verb(&Method::DELETE), "delete");
        assert_eq!(verb(&Method::OPTIONS), "");
    }

    #[test]
    fn only_pods_services_and_nodes_have_proxies() {
        assert_eq!(Kind::of(&PODS), Some(Kind::Pod));
        assert_eq!(Kind::of(&SERVICES), Some(Kind::Service));
        assert_eq!(Kind::of(&NODES), Some(Kind::Node));
        assert_eq!(Kind::of(&ENDPOINTS), None);
    }

    #[test]
    fn the_backend_target_keeps_path_and_query() {
        let req = request(
            Method::POST,
            "/api/v1/namespaces/ns/pods/agnhost/proxy/some/path/with/POST?a=1&b=%20",
        );
        let plan = Plan::new(&req, true);
        assert_eq!(plan.backend_target(), "/some/path/with/POST?a=1&b=%20");
        assert!(plan.redirect(&Method::POST).is_none());
        let req = request(
            Method::DELETE,
            "/api/v1/namespaces/ns/services/s/proxy?method=DELETE",
        );
        let plan = Plan::new(&req, true);
        assert_eq!(plan.backend_target(), "/?method=DELETE");
        let req = request(Method::GET, "/api/v1/nodes/n1:10250/proxy/logs/");
        assert_eq!(Plan::new(&req, false).backend_target(), "/logs/");
    }

    #[test]
    fn an_empty_path_is_redirected_for_get_and_head() {
        let req = request(
            Method::GET,
            "/api/v1/namespaces/ns/pods/agnhost/proxy?method=GET",
        );
        let plan = Plan::new(&req, true);
        for m in [Method::GET, Method::HEAD] {
            let resp = plan.redirect(&m).unwrap();
            assert_eq!(resp.status(), StatusCode::MOVED_PERMANENTLY);
            assert_eq!(
                resp.headers()[header::LOCATION],
                "/api/v1/namespaces/ns/pods/agnhost/proxy/?method=GET"
            );
        }
        assert!(plan.redirect(&Method::OPTIONS).is_none());
        let req = request(Method::GET, "/api/v1/namespaces/ns/pods/agnhost/proxy/");
        assert!(Plan::new(&req, true).redirect(&Method::GET).is_none());
    }

    #[test]
    fn links_go_under_the_request_prefix() {
        let req = request(Method::GET, "/api/v1/namespaces/ns/pods/https:p:443/proxy/");
        let plan = Plan::new(&req, true);
        let backend = Backend {
            transport: Transport::Https,
            host: "10.244.1.5".into(),
            port: "443".into(),
        };
        let r = plan.rewriter(&backend);
        assert_eq!(
            r.rewrite("/tlsrewriteme").unwrap(),
            "/api/v1/namespaces/ns/pods/https:p:443/proxy/tlsrewriteme"
        );
        assert_eq!(r.backend_host, "10.244.1.5:443");
        assert_eq!(r.request_host, "10.250.0.11:6443");
    }

    #[test]
    fn credentials_and_upgrades_are_recognized() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        h.insert("impersonate-user", HeaderValue::from_static("root"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        drop_credentials(&mut h);
        assert_eq!(h.len(), 1);
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(is_upgrade(&h));
        let mut ct = HeaderMap::new();
        ct.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        assert!(is_html(&ct));
        ct.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(!is_html(&ct));
    }

    #[test]
    fn errors_carry_upstream_codes() {
        let e: ApiError = ProxyError::from(LocationError::AddressNotAllowed).into();
        assert_eq!((e.code, e.message.as_str()), (400, "address not allowed"));
        let e: ApiError = ProxyError::from(LocationError::NoEndpoints("s".into())).into();
        assert_eq!(
            (e.code, e.message.as_str()),
            (503, "no endpoints available for service \"s\"")
        );
        let e: ApiError = ProxyError::from(LocationError::InvalidId {
            kind: "pod",
            id: "ftp:p:1".into(),
        })
        .into();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "invalid pod request \"ftp:p:1\"")
        );
        let e: ApiError = ProxyError::from(SendError::UnknownPort {
            addr: "10.0.0.1:x".into(),
        })
        .into();
        assert_eq!(e.code, 503);
        assert_eq!(
            e.message,
            "error trying to reach service: dial tcp 10.0.0.1:x: unknown port"
        );
    }
}
