//! `netexec`: the e2e tests' general-purpose network endpoint. An HTTP(S) server (8080) that reports
//! the host name and client address, echoes, runs shell commands, accepts uploads, redirects, exits on
//! request, and dials other pods (`/dial`, the heart of the pod-to-pod and Service connectivity
//! tests); a UDP server (8081) answering `hostname`, `echo <text>` and `clientip`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Extension, Router};
use clap::Args;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tower::ServiceExt as _;

use crate::server::{self, Peer, ServeError};

#[derive(Debug, Args)]
pub struct NetexecArgs {
    /// HTTP Listen Port.
    #[arg(long = "http-port", default_value_t = 8080)]
    pub http_port: u16,
    /// File containing an x509 certificate for HTTPS (CA cert, if any, concatenated after the server
    /// cert).
    #[arg(long = "tls-cert-file", default_value = "")]
    pub tls_cert_file: String,
    /// File containing an x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file", default_value = "")]
    pub tls_private_key_file: String,
    /// UDP Listen Port (-1 disables the UDP server).
    #[arg(
        long = "udp-port",
        default_value_t = 8081,
        allow_negative_numbers = true
    )]
    pub udp_port: i32,
    /// SCTP Listen Port: not supported by kiln's agnhost (a value other than -1 is reported and
    /// ignored).
    #[arg(long = "sctp-port", default_value_t = -1, allow_negative_numbers = true)]
    pub sctp_port: i32,
    /// Override the HTTP handler to always respond as if it were a GET with this path & params.
    #[arg(long = "http-override", default_value = "")]
    pub http_override: String,
    /// A comma separated list of ip addresses the udp servers listen from.
    #[arg(long = "udp-listen-addresses", default_value = "")]
    pub udp_listen_addresses: String,
    /// Number of seconds to delay shutdown when receiving SIGTERM.
    #[arg(long = "delay-shutdown", default_value_t = 0)]
    pub delay_shutdown: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum NetexecError {
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("parseAddress: invalid address {0}")]
    Address(String),
    #[error("failed to create listener for UDP address {addr}: {source}")]
    Udp {
        addr: String,
        source: std::io::Error,
    },
}

/// A graceful exit asked for by `/exit`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShutdownRequest {
    pub code: i32,
    pub timeout: Duration,
}

/// What the handlers share.
pub struct Netexec {
    /// The UDP server is up: `/healthz` and `/readyz` answer 200 only then, as upstream.
    pub ready: AtomicBool,
    /// SIGTERM arrived: `/readyz` answers 503 so the endpoint leaves Services before it exits.
    pub terminating: AtomicBool,
    pub hostname: String,
    pub uploads: PathBuf,
    pub shell: String,
    pub exit_requests: mpsc::Sender<ShutdownRequest>,
    /// Ends the process (a recorder in tests).
    pub exit: Box<dyn Fn(i32) + Send + Sync>,
}

type Shared = Arc<Netexec>;
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

fn atoi_error(s: &str) -> String {
    format!(
        "strconv.Atoi: parsing {}: invalid syntax",
        crate::gofmt::quote(s)
    )
}

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/clientip", any(clientip))
        .route("/header", any(header_handler))
        .route("/dial", any(dial))
        .route("/echo", any(echo))
        .route("/exit", any(exit))
        .route("/healthz", any(healthz))
        .route("/readyz", any(readyz))
        .route("/hostname", any(hostname))
        .route("/hostName", any(hostname))
        .route("/redirect", any(redirect_handler))
        .route("/shell", any(shell))
        .route("/upload", any(upload))
        .route("/shutdown", any(shutdown))
        .fallback(root)
        .with_state(state)
}

/// `--http-override`: every request is answered as a GET of the override path and query.
pub fn override_router(inner: Router, target: String) -> Router {
    Router::new().fallback(move |req: Request| {
        let inner = inner.clone();
        let target = target.clone();
        async move {
            let (mut parts, _) = req.into_parts();
            match target.parse::<http::Uri>() {
                Ok(uri) => {
                    parts.uri = uri;
                    parts.method = http::Method::GET;
                    let req = Request::from_parts(parts, Body::empty());
                    inner.oneshot(req).await.into_response()
                }
                Err(e) => http_error(
                    format!("override request failed: {e}"),
                    StatusCode::INTERNAL_SERVER_ERROR,
                ),
            }
        }
    })
}

async fn root() -> String {
    tracing::info!("GET /");
    let now = time::OffsetDateTime::now_utc();
    format!(
        "NOW: {:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} +0000 UTC",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.nanosecond()
    )
}

async fn clientip(Extension(Peer(peer)): Extension<Peer>) -> String {
    tracing::info!("GET /clientip");
    peer.to_string()
}

/// Go's `CanonicalMIMEHeaderKey`: `user-agent` → `User-Agent`.
pub fn canonical_header(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

async fn header_handler(Query(q): Params, headers: HeaderMap) -> String {
    let key = param(&q, "key");
    if !key.is_empty() {
        tracing::info!("GET /header?key={key}");
        return headers
            .get(key)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
    }
    tracing::info!("GET /header");
    // Go's Request.Header: canonical names, every value, no Host (that is Request.Host), sorted keys.
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &headers {
        if name == header::HOST {
            continue;
        }
        map.entry(canonical_header(name.as_str()))
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    serde_json::to_string(&map).unwrap_or_default()
}

async fn echo(Query(q): Params) -> Response {
    let msg = param(&q, "msg").to_string();
    let code = param(&q, "code");
    tracing::info!("GET /echo?msg={msg}&code={code}");
    if code.is_empty() {
        return msg.into_response();
    }
    match code
        .parse::<u16>()
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
    {
        Some(c) => (c, msg).into_response(),
        None => format!(
            "argument 'code' must be an integer or empty, got {}\n",
            crate::gofmt::quote(code)
        )
        .into_response(),
    }
}

fn go_duration(s: &str) -> Result<Duration, ()> {
    if s.is_empty() {
        return Ok(Duration::ZERO);
    }
    kiln_common::duration::parse_duration(s).map_err(|_| ())
}

async fn exit(State(st): State<Shared>, Query(q): Params) -> Response {
    let (wait_s, timeout_s, code_s) = (param(&q, "wait"), param(&q, "timeout"), param(&q, "code"));
    tracing::info!("GET /exit?code={code_s}&timeout={timeout_s}&wait={wait_s}");
    let Ok(timeout) = go_duration(timeout_s) else {
        return format!(
            "argument 'timeout' must be a valid golang duration or empty, got {}\n",
            crate::gofmt::quote(timeout_s)
        )
        .into_response();
    };
    let Ok(wait) = go_duration(wait_s) else {
        return format!(
            "argument 'wait' must be a valid golang duration or empty, got {}\n",
            crate::gofmt::quote(wait_s)
        )
        .into_response();
    };
    let code = if code_s.is_empty() {
        0
    } else {
        match code_s.parse::<i32>() {
            Ok(c) => c,
            Err(_) => {
                return format!(
                    "argument 'code' must be an integer [0-127] or empty, got {}\n",
                    crate::gofmt::quote(code_s)
                )
                .into_response()
            }
        }
    };
    tracing::info!(
        "Will begin shutdown in {}, allowing {} for connections to close, then will exit with {code}",
        crate::gofmt::duration(wait),
        crate::gofmt::duration(timeout)
    );
    tokio::time::sleep(wait).await;
    if timeout.is_zero() {
        (st.exit)(code);
        return ().into_response();
    }
    let _ = st
        .exit_requests
        .send(ShutdownRequest { code, timeout })
        .await;
    ().into_response()
}

async fn healthz(State(st): State<Shared>) -> StatusCode {
    tracing::info!("GET /healthz");
    if st.ready.load(Ordering::SeqCst) {
        StatusCode::OK
    } else {
        StatusCode::PRECONDITION_FAILED
    }
}

async fn readyz(State(st): State<Shared>) -> Response {
    tracing::info!("GET /readyz");
    if st.terminating.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    if st.ready.load(Ordering::SeqCst) {
        "ok".into_response()
    } else {
        StatusCode::PRECONDITION_FAILED.into_response()
    }
}

async fn hostname(State(st): State<Shared>) -> String {
    tracing::info!("GET /hostname");
    st.hostname.clone()
}

async fn shutdown(State(st): State<Shared>) {
    tracing::info!("GET /shutdown");
    (st.exit)(0);
}

/// Go's `http.Redirect`: a relative location is resolved against the request path's directory; GET
/// gets a small HTML body naming the status.
pub fn redirect(location: &str, code: StatusCode, request_path: &str) -> Response {
    let has_scheme = location
        .split_once(':')
        .map(|(s, _)| {
            !s.is_empty()
                && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
        .unwrap_or(false);
    let mut loc = location.to_string();
    if !has_scheme && !loc.starts_with("//") && !loc.starts_with('/') {
        let dir = match request_path.rfind('/') {
            Some(i) => &request_path[..=i],
            None => "/",
        };
        loc = format!("{dir}{loc}");
    }
    let text = code.canonical_reason().unwrap_or("");
    let body = format!(
        "<a href=\"{}\">{text}</a>.\n\n",
        loc.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&#34;")
            .replace('\'', "&#39;")
    );
    let mut r = (code, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&loc) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

async fn redirect_handler(Query(q): Params) -> Response {
    let location = param(&q, "location");
    let code_s = param(&q, "code");
    tracing::info!("GET /redirect?msg={location}&code={code_s}");
    let code = if code_s.is_empty() {
        StatusCode::FOUND
    } else {
        match code_s
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
        {
            Some(c) => c,
            None => {
                return format!(
                    "argument 'code' must be an integer or empty, got {}\n",
                    crate::gofmt::quote(code_s)
                )
                .into_response()
            }
        }
    };
    redirect(location, code, "/redirect")
}

async fn shell(State(st): State<Shared>, Query(q): Params) -> String {
    let mut cmd = param(&q, "shellCommand");
    if cmd.is_empty() {
        cmd = param(&q, "cmd");
    }
    tracing::info!("GET /shell?cmd={cmd}");
    let (shell, script) = (st.shell.clone(), cmd.to_string());
    let run = tokio::task::spawn_blocking(move || combined_output(&shell, &script))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    let mut out: BTreeMap<&str, String> = BTreeMap::new();
    match run {
        Ok((output, status)) => {
            if !output.is_empty() {
                out.insert("output", String::from_utf8_lossy(&output).into_owned());
            }
            if !status.success() {
                let e = match status.code() {
                    Some(c) => format!("exit status {c}"),
                    None => {
                        use std::os::unix::process::ExitStatusExt;
                        format!(
                            "signal: {}",
                            status.signal().map(signal_name).unwrap_or_default()
                        )
                    }
                };
                out.insert("error", e);
            }
        }
        Err(e) => {
            out.insert(
                "error",
                format!("fork/exec {}: {}", st.shell, crate::gofmt::errno_text(&e)),
            );
        }
    }
    tracing::info!("Output: {out:?}");
    serde_json::to_string(&out).unwrap_or_default()
}

/// Go's `CombinedOutput`: stdout and stderr into one pipe, so their interleaving is kept.
fn combined_output(
    shell: &str,
    script: &str,
) -> std::io::Result<(Vec<u8>, std::process::ExitStatus)> {
    use std::io::Read;
    let (read, write) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    let mut child = std::process::Command::new(shell)
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(write.try_clone()?))
        .stderr(std::process::Stdio::from(write))
        .spawn()?;
    let mut output = Vec::new();
    std::fs::File::from(read).read_to_end(&mut output)?;
    Ok((output, child.wait()?))
}

fn signal_name(sig: i32) -> String {
    match nix::sys::signal::Signal::try_from(sig) {
        Ok(nix::sys::signal::Signal::SIGKILL) => "killed".into(),
        Ok(nix::sys::signal::Signal::SIGTERM) => "terminated".into(),
        Ok(s) => s.as_str().to_lowercase(),
        Err(_) => sig.to_string(),
    }
}

/// The content of the multipart part named `field`, if the body has one.
pub fn multipart_field(content_type: &str, body: &[u8], field: &str) -> Option<Vec<u8>> {
    let boundary = content_type
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))?
        .trim_matches('"');
    let delim = format!("--{boundary}");
    let delim = delim.as_bytes();
    let mut rest = body;
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let start = find(rest, delim)?;
    rest = &rest[start + delim.len()..];
    loop {
        if rest.starts_with(b"--") {
            return None;
        }
        let rest_part = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let header_end = find(rest_part, b"\r\n\r\n")?;
        let headers = String::from_utf8_lossy(&rest_part[..header_end]).to_lowercase();
        let content = &rest_part[header_end + 4..];
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(delim);
        let end = find(content, &closing)?;
        let named = headers.lines().any(|l| {
            l.starts_with("content-disposition:")
                && (l.contains(&format!("name=\"{field}\""))
                    || l.contains(&format!("name={field};")))
        });
        if named {
            return Some(content[..end].to_vec());
        }
        rest = &content[end + closing.len()..];
    }
}

async fn upload(State(st): State<Shared>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    tracing::info!("GET /upload");
    let fail = |msg: &str| {
        let mut m = BTreeMap::new();
        m.insert("error", msg);
        serde_json::to_string(&m)
            .unwrap_or_default()
            .into_response()
    };
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(data) = multipart_field(ct, &body, "file") else {
        tracing::warn!("Unable to upload file: no multipart field \"file\"");
        return fail("Unable to upload file.");
    };
    let name = st.uploads.join(format!("upload{}", rand::random::<u32>()));
    let written = {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&name)
            .and_then(|mut f| f.write_all(&data))
    };
    if let Err(e) = written {
        tracing::warn!("Unable to open file for write: {e}");
        return fail("Unable to open file for write");
    }
    {
        use std::os::unix::fs::PermissionsExt;
        if let Err(e) = std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o700)) {
            tracing::warn!("Unable to chmod file: {e}");
            return fail("Unable to chmod file.");
        }
    }
    tracing::info!("Wrote upload to {}", name.display());
    let mut m = BTreeMap::new();
    m.insert("output", name.display().to_string());
    (
        StatusCode::CREATED,
        serde_json::to_string(&m).unwrap_or_default(),
    )
        .into_response()
}

#[derive(Debug)]
enum Protocol {
    Http,
    Udp,
}

async fn dial(Query(q): Params) -> Response {
    let (host, port, request, protocol, tries_s) = (
        param(&q, "host"),
        param(&q, "port"),
        param(&q, "request"),
        param(&q, "protocol"),
        param(&q, "tries"),
    );
    tracing::info!(
        "GET /dial?host={host}&protocol={protocol}&port={port}&request={request}&tries={tries_s}"
    );
    let tries: i64 = if tries_s.is_empty() {
        1
    } else {
        match tries_s.parse() {
            Ok(t) => t,
            Err(_) => {
                return http_error(
                    format!("tries parameter is invalid. {}", atoi_error(tries_s)),
                    StatusCode::BAD_REQUEST,
                )
            }
        }
    };
    if request.is_empty() {
        return http_error(
            "request parameter not specified. <nil>".into(),
            StatusCode::BAD_REQUEST,
        );
    }
    let proto = match protocol.to_lowercase().as_str() {
        "" | "http" => Protocol::Http,
        "udp" => Protocol::Udp,
        other => {
            // SCTP included: kiln's agnhost cannot speak it.
            return http_error(
                format!("unsupported protocol. {other}"),
                StatusCode::BAD_REQUEST,
            );
        }
    };
    let addr = match resolve(host, port).await {
        Ok(a) => a,
        Err(e) => {
            return http_error(
                format!("host and/or port param are invalid. {e}"),
                StatusCode::BAD_REQUEST,
            )
        }
    };
    let mut responses = Vec::new();
    let mut errors = Vec::new();
    let mut last = String::new();
    for _ in 0..tries.max(0) {
        let r = match proto {
            Protocol::Http => dial_http(request, addr).await,
            Protocol::Udp => dial_udp(request, addr).await,
        };
        match r {
            Ok(resp) => {
                last = resp.clone();
                responses.push(resp);
            }
            Err(e) => {
                last.clear();
                errors.push(e);
            }
        }
    }
    // Upstream includes "responses" only when the last try answered something.
    let mut out: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    if !last.is_empty() {
        out.insert("responses", responses);
    }
    if !errors.is_empty() {
        out.insert("errors", errors);
    }
    serde_json::to_string(&out)
        .unwrap_or_default()
        .into_response()
}

/// `net.ResolveTCPAddr`: one address, IPv4 preferred, resolved once for all tries.
async fn resolve(host: &str, port: &str) -> Result<SocketAddr, String> {
    let p: u16 = port
        .parse()
        .map_err(|_| format!("address {host}:{port}: invalid port"))?;
    let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, p))
        .await
        .map_err(|e| format!("lookup {host}: {e}"))?
        .collect();
    addrs.sort_by_key(|a| !a.is_ipv4());
    addrs
        .into_iter()
        .next()
        .ok_or_else(|| format!("lookup {host}: no such host"))
}

async fn dial_http(request: &str, addr: SocketAddr) -> Result<String, String> {
    let url = format!("http://{addr}/{request}");
    crate::client::get(&url, Duration::from_secs(5))
        .await
        .map(|a| String::from_utf8_lossy(&a.body).into_owned())
        .map_err(|e| e.to_string())
}

async fn dial_udp(request: &str, addr: SocketAddr) -> Result<String, String> {
    let bind = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sock = UdpSocket::bind(bind)
        .await
        .map_err(|e| format!("udp dial failed. err:{e}"))?;
    sock.connect(addr)
        .await
        .map_err(|e| format!("udp dial failed. err:{e}"))?;
    sock.send(request.as_bytes())
        .await
        .map_err(|e| format!("udp connection write failed. err:{e}"))?;
    let mut buf = vec![0u8; 2048];
    let local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    match tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(Ok(_)) => Err("reading from udp connection failed. err:'<nil>'".into()),
        Ok(Err(e)) => Err(format!(
            "reading from udp connection failed. err:'read udp {local}->{addr}: {}'",
            crate::gofmt::errno_text(&e)
        )),
        Err(_) => Err(format!(
            "reading from udp connection failed. err:'read udp {local}->{addr}: i/o timeout'"
        )),
    }
}

/// The UDP server's answer to one datagram (None: unknown command, no answer).
pub fn udp_answer(received: &[u8], hostname: &str, client: SocketAddr) -> Option<String> {
    let text = String::from_utf8_lossy(received).trim().to_lowercase();
    if text == "hostname" {
        Some(hostname.to_string())
    } else if let Some(rest) = text.strip_prefix("echo ") {
        Some(rest.to_string())
    } else if text == "clientip" {
        Some(client.to_string())
    } else {
        if !text.is_empty() {
            tracing::info!("Unknown UDP command received from {client}: {text}");
        }
        None
    }
}

pub async fn serve_udp(sock: UdpSocket, st: Shared) {
    st.ready.store(true, Ordering::SeqCst);
    let mut buf = vec![0u8; 2048];
    loop {
        match sock.recv_from(&mut buf).await {
            Ok((n, client)) => {
                let client = server::canonical(client);
                if let Some(a) = udp_answer(&buf[..n], &st.hostname, client) {
                    if let Err(e) = sock.send_to(a.as_bytes(), client).await {
                        tracing::warn!("failed to write to UDP client {client}: {e}");
                    }
                }
            }
            Err(e) => {
                tracing::error!("UDP server exited: {e}");
                st.ready.store(false, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// `--udp-listen-addresses`: each address once, sorted (upstream dedups through a sorted set); empty
/// means every address.
pub fn parse_addresses(list: &str) -> Result<Vec<String>, NetexecError> {
    if list.is_empty() {
        return Ok(vec![String::new()]);
    }
    let mut out = Vec::new();
    for a in list.split(',') {
        if a.parse::<std::net::IpAddr>().is_err() {
            return Err(NetexecError::Address(a.to_string()));
        }
        out.push(a.to_string());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

async fn bind_udp_on(address: &str, port: u16) -> Result<UdpSocket, NetexecError> {
    if address.is_empty() {
        return server::bind_udp(port).await.map_err(NetexecError::Serve);
    }
    let ip: std::net::IpAddr = address
        .parse()
        .map_err(|_| NetexecError::Address(address.into()))?;
    UdpSocket::bind((ip, port))
        .await
        .map_err(|source| NetexecError::Udp {
            addr: SocketAddr::new(ip, port).to_string(),
            source,
        })
}

pub async fn run(args: NetexecArgs) -> Result<i32, NetexecError> {
    let (exit_tx, mut exit_rx) = mpsc::channel(1);
    let st: Shared = Arc::new(Netexec {
        ready: AtomicBool::new(false),
        terminating: AtomicBool::new(false),
        hostname: server::hostname(),
        uploads: PathBuf::from("/uploads"),
        shell: "/bin/sh".into(),
        exit_requests: exit_tx,
        exit: Box::new(|code| std::process::exit(code)),
    });
    {
        let st = st.clone();
        let delay = args.delay_shutdown;
        tokio::spawn(async move {
            server::sigterm().await;
            st.terminating.store(true, Ordering::SeqCst);
            if delay > 0 {
                tracing::info!("Sleeping {delay} seconds before terminating...");
                tokio::time::sleep(Duration::from_secs(delay)).await;
            }
            std::process::exit(0);
        });
    }
    let mut app = router(st.clone());
    if !args.http_override.is_empty() {
        app = override_router(app, args.http_override.clone());
    }
    if args.udp_port != -1 {
        let port = u16::try_from(args.udp_port)
            .map_err(|_| NetexecError::Address(format!(":{}", args.udp_port)))?;
        for address in parse_addresses(&args.udp_listen_addresses)? {
            let sock = bind_udp_on(&address, port).await?;
            tracing::info!("Started UDP server on port {address} {port}");
            tokio::spawn(serve_udp(sock, st.clone()));
        }
    }
    if args.sctp_port != -1 {
        tracing::warn!(
            "--sctp-port={} ignored: SCTP is not supported by kiln's agnhost",
            args.sctp_port
        );
    }
    let tls = if args.tls_cert_file.is_empty() {
        None
    } else {
        Some(server::tls_config(
            args.tls_cert_file.as_ref(),
            args.tls_private_key_file.as_ref(),
        )?)
    };
    let listener = server::bind_tcp(args.http_port).await?;
    tracing::info!("Started HTTP server on port {}", args.http_port);
    let requested = Arc::new(std::sync::Mutex::new(None::<ShutdownRequest>));
    let got = requested.clone();
    server::serve(listener, tls, app, async move {
        match exit_rx.recv().await {
            Some(r) => {
                *got.lock().expect("shutdown request") = Some(r);
                r.timeout
            }
            None => std::future::pending().await,
        }
    })
    .await;
    let code = requested
        .lock()
        .expect("shutdown request")
        .map(|r| r.code)
        .unwrap_or(0);
    tracing::info!("Graceful shutdown completed");
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{get, spawn_router};
    use std::sync::Mutex;

    struct Fixture {
        st: Shared,
        exits: Arc<Mutex<Vec<i32>>>,
        requests: mpsc::Receiver<ShutdownRequest>,
        _uploads: tempfile::TempDir,
    }

    fn fixture() -> Fixture {
        let (tx, rx) = mpsc::channel(4);
        let exits = Arc::new(Mutex::new(Vec::new()));
        let rec = exits.clone();
        let uploads = tempfile::tempdir().unwrap();
        let st = Arc::new(Netexec {
            ready: AtomicBool::new(false),
            terminating: AtomicBool::new(false),
            hostname: "netexec-pod".into(),
            uploads: uploads.path().to_path_buf(),
            shell: "/bin/sh".into(),
            exit_requests: tx,
            exit: Box::new(move |c| rec.lock().unwrap().push(c)),
        });
        Fixture {
            st,
            exits,
            requests: rx,
            _uploads: uploads,
        }
    }

    #[tokio::test]
    async fn hostname_clientip_echo_and_root() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        assert_eq!(get(addr, "/hostname").await.2, "netexec-pod");
        assert_eq!(get(addr, "/hostName").await.2, "netexec-pod");
        let ip = get(addr, "/clientip").await.2;
        assert!(ip.starts_with("127.0.0.1:"), "{ip}");
        assert_eq!(get(addr, "/echo?msg=hello%20there").await.2, "hello there");
        let (status, _, body) = get(addr, "/echo?msg=x&code=404").await;
        assert_eq!((status, body.as_str()), (404, "x"));
        let (status, _, body) = get(addr, "/echo?msg=x&code=abc").await;
        assert_eq!(status, 200);
        assert_eq!(
            body,
            "argument 'code' must be an integer or empty, got \"abc\"\n"
        );
        assert!(get(addr, "/").await.2.starts_with("NOW: "));
        assert!(get(addr, "/anything").await.2.starts_with("NOW: "));
    }

    #[tokio::test]
    async fn healthz_and_readyz_follow_the_udp_server_and_sigterm() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        assert_eq!(get(addr, "/healthz").await.0, 412);
        assert_eq!(get(addr, "/readyz").await.0, 412);
        f.st.ready.store(true, Ordering::SeqCst);
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(
            get(addr, "/readyz").await,
            (200, get(addr, "/readyz").await.1, "ok".into())
        );
        f.st.terminating.store(true, Ordering::SeqCst);
        let (status, _, body) = get(addr, "/readyz").await;
        assert_eq!((status, body.as_str()), (503, "shutting down"));
    }

    #[tokio::test]
    async fn dial_http_collects_responses() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        let (status, _, body) = get(
            addr,
            &format!(
                "/dial?request=hostname&protocol=http&host=127.0.0.1&port={}&tries=2",
                addr.port()
            ),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body, r#"{"responses":["netexec-pod","netexec-pod"]}"#);
    }

    #[tokio::test]
    async fn dial_reports_errors_and_bad_parameters() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let (status, _, body) = get(
            addr,
            &format!("/dial?request=hostname&host=127.0.0.1&port={port}"),
        )
        .await;
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["errors"].as_array().unwrap().len(), 1);
        assert!(v.get("responses").is_none());

        let (status, _, body) = get(addr, "/dial?host=127.0.0.1&port=1").await;
        assert_eq!(status, 400);
        assert_eq!(body, "request parameter not specified. <nil>\n");
        let (status, _, body) = get(addr, "/dial?request=x&host=127.0.0.1&port=1&tries=z").await;
        assert_eq!(status, 400);
        assert!(body.starts_with("tries parameter is invalid."));
        let (status, _, body) =
            get(addr, "/dial?request=x&host=127.0.0.1&port=1&protocol=sctp").await;
        assert_eq!(
            (status, body.as_str()),
            (400, "unsupported protocol. sctp\n")
        );
        let (status, _, _) = get(addr, "/dial?request=x&host=127.0.0.1&port=nope").await;
        assert_eq!(status, 400);
    }

    #[tokio::test]
    async fn udp_server_answers_and_dial_reaches_it() {
        let f = fixture();
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let udp = sock.local_addr().unwrap();
        tokio::spawn(serve_udp(sock, f.st.clone()));
        let addr = spawn_router(router(f.st.clone())).await;
        for (req, want) in [("hostname", "netexec-pod"), ("echo%20Hello", "hello")] {
            let (_, _, body) = get(
                addr,
                &format!(
                    "/dial?request={req}&protocol=udp&host=127.0.0.1&port={}",
                    udp.port()
                ),
            )
            .await;
            assert_eq!(body, format!(r#"{{"responses":["{want}"]}}"#));
        }
        assert!(f.st.ready.load(Ordering::SeqCst));
    }

    #[test]
    fn udp_answers() {
        let c: SocketAddr = "10.0.0.5:4000".parse().unwrap();
        assert_eq!(udp_answer(b"hostname\n", "h", c).as_deref(), Some("h"));
        assert_eq!(udp_answer(b"HostName", "h", c).as_deref(), Some("h"));
        assert_eq!(
            udp_answer(b"echo Foo bar", "h", c).as_deref(),
            Some("foo bar")
        );
        assert_eq!(
            udp_answer(b"clientip", "h", c).as_deref(),
            Some("10.0.0.5:4000")
        );
        assert_eq!(udp_answer(b"what", "h", c), None);
    }

    #[tokio::test]
    async fn shell_runs_and_reports_failures() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        let (_, _, body) = get(addr, "/shell?cmd=echo%20hi").await;
        assert_eq!(body, r#"{"output":"hi\n"}"#);
        let (_, _, body) = get(
            addr,
            "/shell?shellCommand=echo%20oops%201%3E%262%3B%20exit%203",
        )
        .await;
        assert_eq!(body, r#"{"error":"exit status 3","output":"oops\n"}"#);
    }

    #[tokio::test]
    async fn header_returns_one_value_or_all() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let req = http::Request::get(format!("http://{addr}/header?key=X-Test"))
            .header("x-test", "abc")
            .body(http_body_util::Empty::new())
            .unwrap();
        let resp = client.request(req).await.unwrap();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"abc");
        let req = http::Request::get(format!("http://{addr}/header"))
            .header("x-test", "abc")
            .body(http_body_util::Empty::new())
            .unwrap();
        let resp = client.request(req).await.unwrap();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["X-Test"], serde_json::json!(["abc"]));
        assert!(v.get("Host").is_none());
    }

    #[test]
    fn header_names_are_canonical() {
        assert_eq!(canonical_header("user-agent"), "User-Agent");
        assert_eq!(canonical_header("x-forwarded-for"), "X-Forwarded-For");
    }

    #[tokio::test]
    async fn redirect_and_override() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        let (status, headers, _) =
            get(addr, "/redirect?location=/echo%3Fmsg%3Dfoobar&code=307").await;
        assert_eq!(status, 307);
        assert_eq!(headers.get("location").unwrap(), "/echo?msg=foobar");
        let (status, headers, _) = get(addr, "/redirect?location=hostname").await;
        assert_eq!(status, 302);
        assert_eq!(headers.get("location").unwrap(), "/hostname");

        let over = spawn_router(override_router(
            router(f.st.clone()),
            "/echo?msg=overridden".into(),
        ))
        .await;
        assert_eq!(get(over, "/whatever?x=1").await.2, "overridden");
    }

    #[tokio::test]
    async fn exit_and_shutdown_end_the_process() {
        let mut f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        get(addr, "/exit?code=3").await;
        get(addr, "/shutdown").await;
        assert_eq!(*f.exits.lock().unwrap(), vec![3, 0]);
        get(addr, "/exit?code=4&timeout=2s").await;
        assert_eq!(
            f.requests.recv().await,
            Some(ShutdownRequest {
                code: 4,
                timeout: Duration::from_secs(2)
            })
        );
        let (_, _, body) = get(addr, "/exit?code=x").await;
        assert_eq!(
            body,
            "argument 'code' must be an integer [0-127] or empty, got \"x\"\n"
        );
    }

    #[tokio::test]
    async fn upload_writes_the_file() {
        let f = fixture();
        let addr = spawn_router(router(f.st.clone())).await;
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nuploaded bytes\r\n--XyZ--\r\n";
        let client: hyper_util::client::legacy::Client<_, String> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let req = http::Request::post(format!("http://{addr}/upload"))
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .body(body.to_string())
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status(), 201);
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let path = v["output"].as_str().unwrap();
        assert_eq!(std::fs::read_to_string(path).unwrap(), "uploaded bytes");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(path).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn multipart_picks_the_named_field() {
        let body = b"--b\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nno\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\nyes\r\n--b--\r\n";
        assert_eq!(
            multipart_field("multipart/form-data; boundary=b", body, "file").as_deref(),
            Some(&b"yes"[..])
        );
        assert_eq!(
            multipart_field("multipart/form-data; boundary=b", body, "nope"),
            None
        );
    }

    #[test]
    fn listen_addresses_are_checked_and_deduplicated() {
        assert_eq!(parse_addresses("").unwrap(), vec![String::new()]);
        assert_eq!(
            parse_addresses("127.0.0.1,::1,127.0.0.1").unwrap(),
            vec!["127.0.0.1".to_string(), "::1".to_string()]
        );
        assert!(parse_addresses("nope").is_err());
    }
}
