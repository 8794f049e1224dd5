//! pods/log and pods/exec (also attach): the request is authorized here, then proxied to the pod's
//! kubelet (`/containerLogs/<ns>/<pod>/<container>`, `/exec/<ns>/<pod>/<container>`). Exec is a
//! connection upgrade (WebSocket v5 channel protocol or SPDY, whatever the client and kubelet agree
//! on): the apiserver forwards the handshake and then splices the two upgraded streams.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::crud::read;
use crate::admission::webhook::connect;
use crate::kubelet_client::kubelet_address;
use crate::registry::resources::NODES;
use crate::request::Target;
use crate::state::AppState;
use crate::status::ApiError;

/// Query parameters of PodLogOptions the kubelet understands.
const LOG_PARAMS: &[&str] = &[
    "follow",
    "previous",
    "tailLines",
    "timestamps",
    "sinceSeconds",
    "sinceTime",
    "limitBytes",
];

/// Headers that carry an upgrade handshake, forwarded both ways.
const UPGRADE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-accept",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
];

pub(super) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The pod, its container (the only one, or the one asked for) and its kubelet's address.
async fn locate(
    state: &AppState,
    target: &Target,
    query: &HashMap<String, String>,
) -> Result<(Value, String, SocketAddr), ApiError> {
    let name = target.name.as_deref().unwrap_or("");
    let (pod, _) = read(state, target, name).await?;
    let containers: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .map(|l| l.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    // Init and ephemeral containers are valid too (upstream's validateContainer).
    let others: Vec<&str> = ["initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod["spec"][*list].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    let container = match query.get("container").filter(|c| !c.is_empty()) {
        Some(c) if containers.contains(&c.as_str()) || others.contains(&c.as_str()) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )))
        }
        None if containers.len() == 1 => containers[0].to_string(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )))
        }
    };
    let addr = kubelet_of(state, name, &pod).await?;
    Ok((pod, container, addr))
}

/// The address of the kubelet that runs `pod` (`name`); a pod not yet bound is a 400, as upstream.
pub(super) async fn kubelet_of(
    state: &AppState,
    name: &str,
    pod: &Value,
) -> Result<SocketAddr, ApiError> {
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("").to_string();
    if node_name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let node_target = Target {
        spec: &NODES,
        namespace: None,
        name: Some(node_name.clone()),
        status: false,
        requester: Default::default(),
    };
    let (node, _) = read(state, &node_target, &node_name).await?;
    let (host, port) = kubelet_address(&node)
        .ok_or_else(|| ApiError::internal(format!("node {node_name} reports no address")))?;
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ApiError::internal(format!("cannot resolve kubelet address {host}")))?;
    Ok(addr)
}

pub(super) fn kubelet_error(e: crate::kubelet_client::KubeletError) -> ApiError {
    match e {
        crate::kubelet_client::KubeletError::NotConfigured => ApiError::unavailable(e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

/// GET pods/<name>/log: the kubelet's log stream, passed through unbuffered (follow works).
pub async fn log(
    state: &AppState,
    target: &Target,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let (pod, container, addr) = locate(state, target, query).await?;
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let params: Vec<String> = LOG_PARAMS
        .iter()
        .filter_map(|p| query.get(*p).map(|v| format!("{p}={}", encode(v))))
        .collect();
    let uri = format!(
        "/containerLogs/{}/{}/{}?{}",
        encode(ns),
        encode(name),
        encode(&container),
        params.join("&")
    );
    let req = http::Request::get(uri)
        .header(header::HOST, addr.to_string())
        .body(Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = state.kubelet.send(addr, req).await.map_err(kubelet_error)?;
    let (parts, body) = resp.into_parts();
    let mut out = Response::new(Body::new(body));
    *out.status_mut() = parts.status;
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("text/plain"));
    out.headers_mut().insert(header::CONTENT_TYPE, content_type);
    Ok(out)
}

pub(super) fn copy_upgrade_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for name in UPGRADE_HEADERS {
        for v in from.get_all(*name) {
            to.append(*name, v.clone());
        }
    }
}

/// pods/<name>/exec (and attach): forwards the upgrade to the kubelet and splices the streams.
pub async fn exec(
    state: &AppState,
    target: &Target,
    subresource: &str,
    query: &HashMap<String, String>,
    mut req: Request,
) -> Result<Response, ApiError> {
    let (pod, container, addr) = locate(state, target, query).await?;
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let raw_query = req.uri().query().unwrap_or("").to_string();
    // Admission (operation CONNECT) before the kubelet is dialled, as upstream's connect handler.
    let pairs: Vec<(String, String)> = axum::extract::Query::try_from_uri(req.uri())
        .map(|axum::extract::Query(p)| p)
        .unwrap_or_default();
    if let Some(options) = connect::options_object(subresource, &pairs) {
        connect::admit_connect(&state.admission_context(), target, subresource, options).await?;
    }
    let uri = format!(
        "/{subresource}/{}/{}/{}?{raw_query}",
        encode(ns),
        encode(name),
        encode(&container)
    );
    // kubectl ≥ 1.30's WebSocket v5: ended here and spoken to the kubelet as SPDY.
    if crate::stream_translator::wants_translation(req.headers()) {
        return crate::stream_translator::serve(
            &state.kubelet,
            state.metrics.stream_translator(),
            addr,
            uri,
            &pairs,
            req,
        );
    }
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut upstream = http::Request::builder()
        .method(req.method().clone())
        .uri(uri)
        .header(header::HOST, addr.to_string())
        .body(Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    copy_upgrade_headers(req.headers(), upstream.headers_mut());
    let resp = state
        .kubelet
        .send(addr, upstream)
        .await
        .map_err(kubelet_error)?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(refusal(resp));
    }
    let mut out = Response::new(Body::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    copy_upgrade_headers(resp.headers(), out.headers_mut());
    let (ns, name) = (ns.to_string(), name.to_string());
    tokio::spawn(async move {
        let upstream = match hyper::upgrade::on(resp).await {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet upgrade failed");
                return;
            }
        };
        let client = match client_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "client upgrade failed");
                return;
            }
        };
        let mut a = TokioIo::new(client);
        let mut b = TokioIo::new(upstream);
        if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
            tracing::debug!(namespace = %ns, pod = %name, error = %e, "exec stream ended");
        }
    });
    Ok(out)
}

/// The kubelet's (or the runtime's) answer to an upgrade it refused, passed back as it is: status,
/// content type and body.
pub(super) fn refusal(resp: http::Response<hyper::body::Incoming>) -> Response {
    let (parts, body) = resp.into_parts();
    let mut out = Response::new(Body::new(body));
    *out.status_mut() = parts.status;
    if let Some(ct) = parts.headers.get(header::CONTENT_TYPE) {
        out.headers_mut().insert(header::CONTENT_TYPE, ct.clone());
    }
    out
}
