//! `guestbook`: the guestbook app of the Kubernetes e2e tests, one HTTP server on `--http-port`
//! (default 80) playing any of its three roles:
//!
//! - `/register?host=<ip>`: a replica subscribes to this primary; the answer is the whole store
//!   (`{"data":{…}}`) and later `/set`s are pushed to the replica on `--backend-port`.
//! - `/get?key=<k>`: `{"data":<value>}` (`""` when unset), or the whole store without a key.
//! - `/set?key=<k>&value=<v>`: store it, push it to the registered replicas, answer
//!   `{"message":"Updated"}`.
//! - `/guestbook?cmd=get|set&key=…&value=…`: the frontend: `set` goes to `agnhost-primary`, `get` to
//!   `agnhost-replica`, both on `--backend-port`; their answer is passed back as is.
//!
//! With `--replicaof <host>` the server first registers with that primary (for 15 s at most, then
//! exits 1 as Go's log.Fatal).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use clap::Args;
use http::{HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use crate::server::{self, ServeError};

#[derive(Debug, Args)]
pub struct GuestbookArgs {
    /// HTTP Listen Port
    #[arg(long = "http-port", default_value = "80")]
    pub http_port: String,
    /// Backend's HTTP Listen Port
    #[arg(long = "backend-port", default_value = "6379")]
    pub backend_port: String,
    /// The host's name to register to
    #[arg(long = "replicaof", default_value = "")]
    pub replica_of: String,
}

#[derive(Debug, thiserror::Error)]
pub enum GuestbookError {
    #[error("invalid --http-port {0:?}")]
    Port(String),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

const REGISTER_TIMEOUT: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_secs(1);
/// Go's `http.Client{Timeout: 5 * time.Second}`.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Guestbook {
    pub store: Mutex<Map<String, Value>>,
    pub replicas: Mutex<Vec<String>>,
    pub backend_port: String,
}

type Shared = Arc<Guestbook>;
type Params = Query<HashMap<String, String>>;

fn param<'a>(q: &'a HashMap<String, String>, name: &str) -> &'a str {
    q.get(name).map(String::as_str).unwrap_or("")
}

/// Go's `http.Error`: the message and a newline, as plain text.
fn http_error(msg: String, code: StatusCode) -> Response {
    let mut r = (code, format!("{msg}\n")).into_response();
    r.headers_mut().insert(
        "X-Content-Type-Options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// Go's `net.JoinHostPort`.
fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Query values go into the URL as they came, escaped only as far as a URL needs.
fn escape(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// GET `http://<host_port>/<request>`: the body, or the error as text.
async fn dial(request: &str, host_port: &str) -> Result<String, String> {
    let a = crate::client::get(&format!("http://{host_port}/{request}"), CALL_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&a.body).into_owned())
}

async fn resolve(host_port: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(host_port)
        .await
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("no address for {host_port}"))
}

/// The local address a datagram to `host_port` would leave from (Go's `net.Dial("udp", …)`).
async fn local_ip(host_port: &str) -> Result<IpAddr, String> {
    let to = resolve(host_port).await?;
    let any = if to.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    let sock = tokio::net::UdpSocket::bind((any, 0))
        .await
        .map_err(|e| e.to_string())?;
    sock.connect(to).await.map_err(|e| e.to_string())?;
    Ok(sock.local_addr().map_err(|e| e.to_string())?.ip())
}

/// Register with the primary `to`, taking its store; Err after 15 s of failures.
pub async fn register(gb: &Guestbook, to: &str) -> Result<(), String> {
    let host_port = join_host_port(to, &gb.backend_port);
    let start = Instant::now();
    while start.elapsed() < REGISTER_TIMEOUT {
        let attempt = async {
            let ip = local_ip(&host_port)
                .await
                .map_err(|e| format!("unable to get IP {host_port}: {e}"))?;
            let request = format!("register?host={ip}");
            tracing::info!("Registering to primary: {host_port}/{request}");
            dial(&request, &host_port)
                .await
                .map_err(|e| format!("encountered error while registering to primary: {e}"))
        };
        match attempt.await {
            Ok(answer) => {
                let v: Value = serde_json::from_str(&answer)
                    .map_err(|e| format!("Error while unmarshaling primary's response: {e}"))?;
                let Value::Object(store) = v["data"].clone() else {
                    return Err(format!("Could not cast responseJSON: {}", v["data"]));
                };
                *gb.store.lock().unwrap_or_else(|e| e.into_inner()) = store;
                tracing::info!("Registered to node: {to}");
                return Ok(());
            }
            Err(e) => {
                tracing::info!("{e}. Retrying in 1s.");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    Err("Timed out while registering to primary.".into())
}

pub fn router(gb: Shared) -> Router {
    Router::new()
        .route("/register", any(register_handler))
        .route("/get", any(get_handler))
        .route("/set", any(set_handler))
        .route("/guestbook", any(guestbook_handler))
        .with_state(gb)
}

async fn register_handler(State(gb): State<Shared>, Query(q): Params) -> Response {
    let ip = param(&q, "host").to_string();
    tracing::info!("GET /register?host={ip}");
    let store = gb.store.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let body = json!({"data": store}).to_string();
    gb.replicas
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(ip.clone());
    tracing::info!("Node '{ip}' registered.");
    body.into_response()
}

async fn get_handler(State(gb): State<Shared>, Query(q): Params) -> Response {
    let key = param(&q, "key");
    tracing::info!("GET /get?key={key}");
    let store = gb.store.lock().unwrap_or_else(|e| e.into_inner());
    let data = if key.is_empty() {
        Value::Object(store.clone())
    } else {
        store.get(key).cloned().unwrap_or_else(|| json!(""))
    };
    json!({"data": data}).to_string().into_response()
}

async fn set_handler(State(gb): State<Shared>, Query(q): Params) -> Response {
    let (key, value) = (param(&q, "key"), param(&q, "value"));
    tracing::info!("GET /set?key={key}&value={value}");
    if key.is_empty() {
        return http_error("cannot set with empty key.".into(), StatusCode::BAD_REQUEST);
    }
    gb.store
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_string(), json!(value));
    let request = format!("set?key={}&value={}", escape(key), escape(value));
    let replicas = gb
        .replicas
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for replica in replicas {
        let host_port = join_host_port(&replica, &gb.backend_port);
        if let Err(e) = dial(&request, &host_port).await {
            return http_error(
                format!("encountered error while propagating to replica '{replica}': {e}"),
                StatusCode::EXPECTATION_FAILED,
            );
        }
    }
    json!({"message": "Updated"}).to_string().into_response()
}

async fn guestbook_handler(State(gb): State<Shared>, Query(q): Params) -> Response {
    let cmd = param(&q, "cmd").to_lowercase();
    let (key, value) = (param(&q, "key"), param(&q, "value"));
    tracing::info!("GET /guestbook?cmd={cmd}&key={key}&value={value}");
    if cmd != "get" && cmd != "set" {
        return http_error(format!("unsupported cmd: '{cmd}'"), StatusCode::BAD_REQUEST);
    }
    if cmd == "set" && key.is_empty() {
        return http_error("cannot set with empty key.".into(), StatusCode::BAD_REQUEST);
    }
    let host = if cmd == "get" {
        "agnhost-replica"
    } else {
        "agnhost-primary"
    };
    let host_port = join_host_port(host, &gb.backend_port);
    if let Err(e) = resolve(&host_port).await {
        return http_error(
            format!("host and/or port param are invalid. {e}"),
            StatusCode::BAD_REQUEST,
        );
    }
    let request = format!("{cmd}?key={}&value={}", escape(key), escape(value));
    match dial(&request, &host_port).await {
        Ok(answer) => answer.into_response(),
        Err(e) => http_error(
            format!("encountered error: {e}"),
            StatusCode::EXPECTATION_FAILED,
        ),
    }
}

pub async fn run(args: GuestbookArgs) -> Result<i32, GuestbookError> {
    let port: u16 = args
        .http_port
        .parse()
        .map_err(|_| GuestbookError::Port(args.http_port.clone()))?;
    let gb = Arc::new(Guestbook {
        backend_port: args.backend_port,
        ..Default::default()
    });
    if !args.replica_of.is_empty() {
        let (gb, to) = (gb.clone(), args.replica_of);
        tokio::spawn(async move {
            if let Err(e) = register(&gb, &to).await {
                // log.Fatal: the message, exit status 1.
                tracing::error!("{e}");
                std::process::exit(1);
            }
        });
    }
    let l = server::bind_tcp(port).await?;
    server::serve(l, None, router(gb), std::future::pending()).await;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{get, spawn_router};

    #[tokio::test]
    async fn primary_replica_and_frontend_errors() {
        let primary = Arc::new(Guestbook::default());
        let addr = spawn_router(router(primary.clone())).await;

        assert_eq!(get(addr, "/get?key=messages").await.2, r#"{"data":""}"#);
        let (status, _, body) = get(addr, "/set?key=&value=x").await;
        assert_eq!(
            (status, body.as_str()),
            (400, "cannot set with empty key.\n")
        );
        assert_eq!(
            get(addr, "/set?key=messages&value=TestEntry").await.2,
            r#"{"message":"Updated"}"#
        );
        assert_eq!(
            get(addr, "/get?key=messages").await.2,
            r#"{"data":"TestEntry"}"#
        );
        assert_eq!(
            get(addr, "/get").await.2,
            r#"{"data":{"messages":"TestEntry"}}"#
        );

        // A replica registers (taking the store), then receives the primary's sets.
        let replica = Arc::new(Guestbook {
            backend_port: addr.port().to_string(),
            ..Default::default()
        });
        register(&replica, "127.0.0.1").await.unwrap();
        assert_eq!(
            replica.store.lock().unwrap().get("messages"),
            Some(&json!("TestEntry"))
        );
        assert_eq!(primary.replicas.lock().unwrap().as_slice(), ["127.0.0.1"]);

        let (status, _, body) = get(addr, "/guestbook?cmd=delete").await;
        assert_eq!(
            (status, body.as_str()),
            (400, "unsupported cmd: 'delete'\n")
        );
        let (status, _, body) = get(addr, "/guestbook?cmd=SET&key=").await;
        assert_eq!(
            (status, body.as_str()),
            (400, "cannot set with empty key.\n")
        );
    }

    #[test]
    fn urls_keep_values_intact() {
        assert_eq!(escape("Test Entry&x"), "Test%20Entry%26x");
        assert_eq!(join_host_port("::1", "80"), "[::1]:80");
    }
}
