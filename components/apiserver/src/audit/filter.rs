//! Where auditing meets the request pipeline, as upstream's `WithAuditInit`, `WithAudit` and
//! `WithFailedAuthenticationAudit` filters:
//! - `layer` (outermost): gives every request its audit ID (the `Audit-ID` request header, else a
//!   new UUID) and echoes it as the `Audit-Id` response header; keeps the request's audit context
//!   in a task-local; after the handler, records the response (ResponseStarted + ResponseComplete
//!   when the body of a long-running request ends, else ResponseComplete; Panic on a panic).
//! - `begin`: called by authentication once the user is known (before impersonation, as
//!   upstream): evaluates the policy, sends RequestReceived and, where the level wants it, reads the
//!   request body for requestObject / objectRef.
//! - `annotate`, `authorization`, `impersonated`: what later stages (authorization, admission) add.
//!   Outside a request (background workers) they do nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use time::OffsetDateTime;

use super::event::{strip_managed_fields, Event, ObjectRef, ResponseStatus, UserInfo};
use super::policy::{Attributes, Level, ResourceAttributes, Stage};
use super::Auditor;
use crate::auth::Identity;
use crate::request_path::{self, ApiPath};

/// Upstream's `Audit-ID` header (request and response).
pub const AUDIT_ID: HeaderName = HeaderName::from_static("audit-id");
pub const DECISION: &str = "authorization.k8s.io/decision";
pub const REASON: &str = "authorization.k8s.io/reason";

/// The TCP peer of the connection (set by the accept loop), the last of `sourceIPs`.
#[derive(Debug, Clone, Copy)]
pub struct SourceIp(pub IpAddr);

tokio::task_local! {
    static CURRENT: Arc<Mutex<Context>>;
}

/// One request's audit state.
struct Context {
    auditor: Option<Arc<Auditor>>,
    audit_id: String,
    received: OffsetDateTime,
    method: Method,
    path: String,
    request_uri: String,
    query: HashMap<String, String>,
    user_agent: String,
    source_ips: Vec<String>,
    auth_methods: String,
    /// The policy was evaluated (authentication succeeded).
    begun: bool,
    /// Some while the level is above None.
    event: Option<Event>,
    omit: Vec<Stage>,
    omit_managed_fields: bool,
    long_running: bool,
}

fn lock(c: &Mutex<Context>) -> MutexGuard<'_, Context> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

/// Upstream's `utilnet.SourceIPs`: X-Forwarded-For, then X-Real-Ip, then the peer, without repeats.
fn source_ips(headers: &HeaderMap, peer: Option<IpAddr>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |ip: IpAddr| {
        let s = ip.to_string();
        if !out.contains(&s) {
            out.push(s);
        }
    };
    if let Some(xff) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        for part in xff.split(',') {
            if let Ok(ip) = part.trim().parse() {
                add(ip);
            }
        }
    }
    if let Some(ip) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
    {
        add(ip);
    }
    if let Some(ip) = peer {
        add(ip);
    }
    out
}

/// upstream's getAuthMethods: what a request that failed authentication tried.
fn auth_methods(headers: &HeaderMap) -> String {
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    let scheme = auth.split(' ').next().unwrap_or("").to_ascii_lowercase();
    let mut methods = Vec::new();
    if scheme == "basic" {
        methods.push("basic");
    }
    if scheme == "bearer" && auth.contains(' ') {
        methods.push("bearer");
    }
    if methods.is_empty() {
        "Authentication failed, no credentials provided".into()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}

impl Context {
    fn new(auditor: Option<Arc<Auditor>>, audit_id: String, req: &Request) -> Context {
        let mut c = Context {
            auditor,
            audit_id,
            received: OffsetDateTime::now_utc(),
            method: req.method().clone(),
            path: String::new(),
            request_uri: String::new(),
            query: HashMap::new(),
            user_agent: String::new(),
            source_ips: Vec::new(),
            auth_methods: String::new(),
            begun: false,
            event: None,
            omit: Vec::new(),
            omit_managed_fields: false,
            long_running: false,
        };
        if c.auditor.is_some() {
            // Only audited servers pay for this.
            let uri = req.uri();
            c.path = uri.path().to_string();
            c.request_uri = uri
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| c.path.clone());
            c.query = axum::extract::Query::<HashMap<String, String>>::try_from_uri(uri)
                .map(|q| q.0)
                .unwrap_or_default();
            c.user_agent = req
                .headers()
                .get(axum::http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let peer = req.extensions().get::<SourceIp>().map(|s| s.0);
            c.source_ips = source_ips(req.headers(), peer);
            c.auth_methods = auth_methods(req.headers());
        }
        c
    }

    fn sink_send(&self, ev: &Event) {
        if let (Some(auditor), Ok(line)) = (&self.auditor, serde_json::to_vec(ev)) {
            auditor.sink.send(line);
        }
    }

    fn emit(&mut self, stage: Stage) {
        if self.omit.contains(&stage) {
            return;
        }
        let Some(ev) = self.event.as_mut() else {
            return;
        };
        ev.stage = stage;
        ev.stage_timestamp = OffsetDateTime::now_utc();
        let ev = ev.clone();
        self.sink_send(&ev);
    }

    fn level(&self) -> Level {
        self.event.as_ref().map_or(Level::None, |e| e.level)
    }

    /// Evaluates the policy for `user` (None: failed authentication) and, above None, makes the
    /// event. None: level None; else the request's resource path (None for a non-resource URL).
    fn start(
        &mut self,
        user: Option<(&str, &[String])>,
    ) -> Option<Option<request_path::ResourcePath>> {
        let auditor = self.auditor.clone()?;
        let rp = match request_path::parse(&self.path) {
            Some(ApiPath::Resource(rp)) => Some(rp),
            _ => None,
        };
        let verb = match &rp {
            Some(rp) => crate::request::upstream_verb(&self.method, rp.name.is_some(), &self.query)
                .to_string(),
            None => self.method.as_str().to_ascii_lowercase(),
        };
        let attrs = Attributes {
            user,
            verb: &verb,
            resource: rp.as_ref().map(|rp| ResourceAttributes {
                group: &rp.group,
                resource: &rp.resource,
                subresource: rp.subresource.as_deref().unwrap_or(""),
                namespace: rp.namespace.as_deref().unwrap_or(""),
                name: rp.name.as_deref().unwrap_or(""),
            }),
            path: &self.path,
        };
        let decision = auditor.policy.evaluate(&attrs);
        if decision.level == Level::None {
            return None;
        }
        // Upstream's long-running check: verbs watch and proxy, and the streaming subresources.
        self.long_running = verb == "watch"
            || matches!(
                rp.as_ref().and_then(|r| r.subresource.as_deref()),
                Some("attach" | "exec" | "proxy" | "log" | "portforward")
            );
        self.omit = decision.omit_stages;
        self.omit_managed_fields = decision.omit_managed_fields;
        let (username, groups) = user.unwrap_or_default();
        self.event = Some(Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: decision.level,
            audit_id: self.audit_id.clone(),
            stage: Stage::RequestReceived,
            request_uri: self.request_uri.clone(),
            verb,
            user: UserInfo {
                username: username.to_string(),
                groups: groups.to_vec(),
            },
            impersonated_user: None,
            source_ips: self.source_ips.clone(),
            user_agent: self.user_agent.clone(),
            object_ref: rp.as_ref().map(|rp| ObjectRef {
                resource: rp.resource.clone(),
                namespace: rp.namespace.clone().unwrap_or_default(),
                name: rp.name.clone().unwrap_or_default(),
                api_group: rp.group.clone(),
                api_version: rp.version.clone(),
                subresource: rp.subresource.clone().unwrap_or_default(),
                ..Default::default()
            }),
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: self.received,
            stage_timestamp: self.received,
            annotations: Default::default(),
        });
        Some(rp)
    }

    /// The decoded request body: names the object in objectRef (a create's name is only in the
    /// body) and, from level Request on, is the event's requestObject.
    fn log_request_object(&mut self, mut obj: Value) {
        let level = self.level();
        let omit = self.omit_managed_fields;
        let Some(ev) = self.event.as_mut() else {
            return;
        };
        if let Some(r) = ev.object_ref.as_mut() {
            let meta = &obj["metadata"];
            let fill = |field: &mut String, key: &str| {
                if field.is_empty() {
                    *field = meta[key].as_str().unwrap_or_default().to_string();
                }
            };
            fill(&mut r.namespace, "namespace");
            fill(&mut r.name, "name");
            fill(&mut r.uid, "uid");
            fill(&mut r.resource_version, "resourceVersion");
        }
        if level >= Level::Request {
            if omit {
                strip_managed_fields(&mut obj);
            }
            ev.request_object = Some(obj);
        }
    }

    fn log_response(&mut self, body: Option<Value>, code: u16) {
        let level = self.level();
        let omit = self.omit_managed_fields;
        let Some(ev) = self.event.as_mut() else {
            return;
        };
        if let Some(mut v) = body {
            if let Some(status) = ResponseStatus::from_body(&v, code) {
                ev.response_status = Some(status);
            }
            if level >= Level::RequestResponse {
                if omit {
                    strip_managed_fields(&mut v);
                }
                ev.response_object = Some(v);
            }
        }
        ev.response_status
            .get_or_insert_with(|| ResponseStatus::code(code))
            .code = code;
    }
}

/// The middleware `layer` installs.
pub async fn filter(
    State(auditor): State<Option<Arc<Auditor>>>,
    req: Request,
    next: Next,
) -> Response {
    let audit_id = req
        .headers()
        .get(&AUDIT_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .unwrap_or_else(crate::registry::lifecycle::new_uid);
    let ctx = Arc::new(Mutex::new(Context::new(auditor, audit_id.clone(), &req)));
    let run = AssertUnwindSafe(next.run(req)).catch_unwind();
    let mut resp = match CURRENT.scope(ctx.clone(), run).await {
        Ok(resp) => resp,
        Err(panic) => {
            record_panic(&ctx, &panic);
            std::panic::resume_unwind(panic);
        }
    };
    if !resp.headers().contains_key(&AUDIT_ID) {
        if let Ok(v) = HeaderValue::from_str(&audit_id) {
            resp.headers_mut().insert(AUDIT_ID, v);
        }
    }
    finish(ctx, resp).await
}

fn record_panic(ctx: &Mutex<Context>, panic: &Box<dyn std::any::Any + Send>) {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let mut c = lock(ctx);
    let Some(ev) = c.event.as_mut() else {
        return;
    };
    // Upstream sends the Panic stage whatever omitStages says.
    ev.stage = Stage::Panic;
    ev.stage_timestamp = OffsetDateTime::now_utc();
    ev.response_status = Some(ResponseStatus {
        status: "Failure".into(),
        reason: "InternalError".into(),
        message: format!("APIServer panic'd: {text}"),
        ..ResponseStatus::code(500)
    });
    let ev = ev.clone();
    c.sink_send(&ev);
}

/// Sends ResponseComplete when a long-running response's body ends (or is dropped).
struct CompleteOnDrop(Arc<Mutex<Context>>);

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        lock(&self.0).emit(Stage::ResponseComplete);
    }
}

fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"))
}

async fn finish(ctx: Arc<Mutex<Context>>, resp: Response) -> Response {
    let code = resp.status().as_u16();
    let wants_body = {
        let mut c = lock(&ctx);
        if c.auditor.is_none() {
            return resp;
        }
        if !c.begun {
            // Authentication failed before `begin`: upstream's failed-authentication audit (no
            // user; only ResponseStarted).
            if code == 401 {
                c.begun = true;
                if c.start(None).is_some() {
                    let message = c.auth_methods.clone();
                    if let Some(ev) = c.event.as_mut() {
                        ev.response_status = Some(ResponseStatus {
                            message,
                            ..ResponseStatus::code(code)
                        });
                    }
                    c.emit(Stage::ResponseStarted);
                }
            }
            return resp;
        }
        if c.event.is_none() {
            return resp;
        }
        if c.long_running {
            c.log_response(None, code);
            c.emit(Stage::ResponseStarted);
            if code == 101 {
                // A protocol switch (exec, attach, port-forward): the stream lives on the upgraded
                // connection, out of this body's reach, so the response is complete here.
                c.emit(Stage::ResponseComplete);
                return resp;
            }
            drop(c);
            let guard = CompleteOnDrop(ctx);
            let (parts, body) = resp.into_parts();
            let stream = body.into_data_stream().map(move |chunk| {
                let _keep = &guard;
                chunk
            });
            return Response::from_parts(parts, Body::from_stream(stream));
        }
        // The body is read for a Status (errors) or the responseObject (RequestResponse).
        is_json(&resp) && (c.level() >= Level::RequestResponse || code >= 300)
    };
    let resp = if wants_body {
        let (parts, body) = resp.into_parts();
        match axum::body::to_bytes(body, usize::MAX).await {
            Ok(bytes) => {
                let value = serde_json::from_slice::<Value>(&bytes).ok();
                lock(&ctx).log_response(value, code);
                Response::from_parts(parts, Body::from(bytes))
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading a response body for the audit log failed");
                lock(&ctx).log_response(None, code);
                Response::from_parts(parts, Body::empty())
            }
        }
    } else {
        lock(&ctx).log_response(None, code);
        resp
    };
    lock(&ctx).emit(Stage::ResponseComplete);
    resp
}

fn current() -> Option<Arc<Mutex<Context>>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Authentication is done: evaluate the policy for the request's user and record
/// RequestReceived. Reads the body (up to the API's limit) when the event wants it; a body over
/// the limit is refused with upstream's 413, as the handler would.
pub async fn begin(req: &mut Request) -> Result<(), Response> {
    let Some(ctx) = current() else {
        return Ok(());
    };
    let wants_body = {
        let mut c = lock(&ctx);
        if c.auditor.is_none() || c.begun {
            return Ok(());
        }
        c.begun = true;
        let anonymous = vec!["system:unauthenticated".to_string()];
        let identity = req.extensions().get::<Identity>().cloned();
        let user = match &identity {
            Some(Identity::User(u)) => (u.name.as_str(), u.groups.as_slice()),
            _ => ("system:anonymous", anonymous.as_slice()),
        };
        let Some(rp) = c.start(Some(user)) else {
            return Ok(());
        };
        c.emit(Stage::RequestReceived);
        let writes = matches!(c.method, Method::POST | Method::PUT | Method::PATCH)
            || (c.method == Method::DELETE && c.level() >= Level::Request);
        let verb = c.event.as_ref().map(|e| e.verb.clone()).unwrap_or_default();
        writes
            && !c.long_running
            && rp.is_some_and(|rp| rp.subresource.as_deref() != Some("proxy"))
            && (c.level() >= Level::Request || matches!(verb.as_str(), "create" | "update"))
    };
    if !wants_body {
        return Ok(());
    }
    let body = std::mem::take(req.body_mut());
    let bytes = axum::body::to_bytes(body, crate::request_body::MAX_BODY)
        .await
        .map_err(|_| crate::status::ApiError::too_large().into_response())?;
    if let Some(obj) = decode_body(req.headers(), &bytes) {
        lock(&ctx).log_request_object(obj);
    }
    *req.body_mut() = Body::from(bytes);
    Ok(())
}

/// A request body as JSON: JSON and JSON patches as they are, YAML (apply) and protobuf decoded.
fn decode_body(headers: &HeaderMap, bytes: &[u8]) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    if let Ok(v) = serde_json::from_slice(bytes) {
        return Some(v);
    }
    crate::request_body::parse_body(headers, bytes)
        .ok()
        .or_else(|| serde_norway::from_slice(bytes).ok())
}

/// Adds an annotation to the current request's event (the first value of a key stays).
pub fn annotate(key: &str, value: &str) {
    let Some(ctx) = current() else {
        return;
    };
    let mut c = lock(&ctx);
    if let Some(ev) = c.event.as_mut() {
        ev.annotations
            .entry(key.to_string())
            .or_insert_with(|| value.to_string());
    }
}

/// The authorizer's decision, as upstream's authorization filter annotates it.
pub fn authorization(allowed: bool, reason: &str) {
    annotate(DECISION, if allowed { "allow" } else { "forbid" });
    annotate(REASON, reason);
}

/// The user the request goes on as (Impersonate-* headers).
pub fn impersonated(who: &Identity) {
    let Some(ctx) = current() else {
        return;
    };
    let mut c = lock(&ctx);
    if let (Some(ev), Identity::User(u)) = (c.event.as_mut(), who) {
        ev.impersonated_user = Some(UserInfo {
            username: u.name.clone(),
            groups: u.groups.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ips_follow_upstreams_order_without_repeats() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            "10.0.0.1, 10.0.0.2,bogus".parse().unwrap(),
        );
        h.insert("x-real-ip", "10.0.0.2".parse().unwrap());
        assert_eq!(
            source_ips(&h, Some("127.0.0.1".parse().unwrap())),
            ["10.0.0.1", "10.0.0.2", "127.0.0.1"]
        );
    }

    #[test]
    fn failed_authentication_names_the_method() {
        let mut h = HeaderMap::new();
        assert_eq!(
            auth_methods(&h),
            "Authentication failed, no credentials provided"
        );
        h.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(auth_methods(&h), "Authentication failed, attempted: bearer");
    }
}
