//! `porter`: serves a fixed text on every port named by an environment variable
//! (`SERVE_PORT_9001=foo`: HTTP on 9001 answering `foo`), as the Service and port e2e tests set them.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::Router;
use clap::{ArgAction, Args};
use tokio::net::UdpSocket;

use crate::server;

#[derive(Debug, Args)]
pub struct PorterArgs {
    /// Respond with a JSON object holding the request's method and the value.
    #[arg(long = "json-response", num_args = 0..=1, require_equals = true, default_value_t = false,
          default_missing_value = "true", action = ArgAction::Set)]
    pub json_response: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Http,
    Udp,
    Tls,
    Sctp,
}

/// Which prefix means what; `SERVE_PORT_` and `SERVE_TCP_PORT_` are both plain HTTP.
const PREFIXES: &[(&str, Kind)] = &[
    ("SERVE_PORT_", Kind::Http),
    ("SERVE_TCP_PORT_", Kind::Http),
    ("SERVE_UDP_PORT_", Kind::Udp),
    ("SERVE_SCTP_PORT_", Kind::Sctp),
    ("SERVE_TLS_PORT_", Kind::Tls),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub kind: Kind,
    pub port: String,
    pub value: String,
}

/// The listeners the environment asks for, in its order.
pub fn listeners(env: impl IntoIterator<Item = (String, String)>) -> Vec<Listener> {
    env.into_iter()
        .filter_map(|(k, v)| {
            PREFIXES.iter().find_map(|(prefix, kind)| {
                k.strip_prefix(prefix).map(|port| Listener {
                    kind: kind.clone(),
                    port: port.to_string(),
                    value: v.clone(),
                })
            })
        })
        .collect()
}

/// Upstream's field order (Method, then Body).
#[derive(serde::Serialize)]
struct JsonResponse<'a> {
    #[serde(rename = "Method")]
    method: &'a str,
    #[serde(rename = "Body")]
    body: &'a str,
}

pub fn router(value: String, json: bool) -> Router {
    let value = Arc::new(value);
    Router::new().fallback(move |method: http::Method| {
        let value = value.clone();
        async move {
            if json {
                let body = JsonResponse {
                    method: method.as_str(),
                    body: value.as_str(),
                };
                let mut r: Response = serde_json::to_string(&body)
                    .unwrap_or_default()
                    .into_response();
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                r
            } else {
                let mut r = value.as_str().to_owned().into_response();
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static(sniff(&value)),
                );
                r
            }
        }
    })
}

/// The HTML signatures Go's http.DetectContentType knows (matched without case, then a space or `>`).
const HTML_TAGS: &[&str] = &[
    "<!DOCTYPE HTML",
    "<HTML",
    "<HEAD",
    "<SCRIPT",
    "<IFRAME",
    "<H1",
    "<DIV",
    "<FONT",
    "<TABLE",
    "<A",
    "<STYLE",
    "<TITLE",
    "<B",
    "<BODY",
    "<BR",
    "<P",
    "<!--",
];

/// The Content-Type upstream's porter answers with: Go sniffs what it writes, so a value that starts
/// like HTML is `text/html` (the API server's proxy rewrites its links), XML `text/xml`, other text
/// `text/plain`.
fn sniff(value: &str) -> &'static str {
    let v = value.trim_start_matches([' ', '\t', '\n', '\r', '\x0c']);
    let html = HTML_TAGS.iter().any(|tag| {
        v.len() > tag.len()
            && v.is_char_boundary(tag.len())
            && v[..tag.len()].eq_ignore_ascii_case(tag)
            && matches!(v.as_bytes()[tag.len()], b' ' | b'>')
    });
    if html {
        "text/html; charset=utf-8"
    } else if v.starts_with("<?xml") {
        "text/xml; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// Every datagram gets the value back.
pub async fn serve_udp(sock: UdpSocket, value: Arc<String>) {
    let mut buf = [0u8; 16];
    loop {
        match sock.recv_from(&mut buf).await {
            Ok((_, peer)) => {
                if let Err(e) = sock.send_to(value.as_bytes(), peer).await {
                    tracing::warn!("UDP: error from WriteTo(): {e}");
                }
            }
            Err(e) => {
                tracing::error!("UDP: error from ReadFrom(): {e}");
                return;
            }
        }
    }
}

async fn start(l: Listener, json: bool) {
    let port: u16 = match l.port.parse() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("server on port {:?} failed: invalid port: {e}", l.port);
            return;
        }
    };
    match l.kind {
        Kind::Http => match server::bind_tcp(port).await {
            Ok(listener) => {
                let app = router(l.value, json);
                server::serve(listener, None, app, std::future::pending()).await
            }
            Err(e) => tracing::error!("server on port {:?} failed: {e}", l.port),
        },
        Kind::Tls => {
            // Upstream reads localhost.crt/.key from the working directory unless told otherwise.
            let cert = std::env::var("CERT_FILE")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "localhost.crt".into());
            let key = std::env::var("KEY_FILE")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "localhost.key".into());
            let tls = match server::tls_config(cert.as_ref(), key.as_ref()) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(
                        "tls server on port {:?} with certFile={cert:?}, keyFile={key:?} failed: {e}",
                        l.port
                    );
                    return;
                }
            };
            match server::bind_tcp(port).await {
                Ok(listener) => {
                    let app = router(l.value, json);
                    server::serve(listener, Some(tls), app, std::future::pending()).await
                }
                Err(e) => tracing::error!("tls server on port {:?} failed: {e}", l.port),
            }
        }
        Kind::Udp => match server::bind_udp(port).await {
            Ok(sock) => {
                tracing::info!("Started UDP server on port {port}");
                serve_udp(sock, Arc::new(l.value)).await
            }
            Err(e) => {
                tracing::error!("UDP: failed to listen on port {port}: {e}");
                std::process::exit(1);
            }
        },
        Kind::Sctp => {
            // kiln's agnhost has no SCTP (no SCTP socket support in the workspace's crates); say so
            // rather than pretend to listen.
            tracing::error!("SCTP port {port} requested: SCTP is not supported by kiln's agnhost");
        }
    }
}

pub async fn run(args: PorterArgs) -> i32 {
    for l in listeners(std::env::vars()) {
        tokio::spawn(start(l, args.json_response));
    }
    std::future::pending::<i32>().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{get, spawn_router};

    #[test]
    fn listeners_come_from_the_prefixed_variables() {
        let env = [
            ("SERVE_PORT_9001", "foo"),
            ("SERVE_TCP_PORT_9002", "bar"),
            ("SERVE_UDP_PORT_9003", "baz"),
            ("SERVE_TLS_PORT_9004", "tls"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let ls = listeners(env);
        assert_eq!(ls.len(), 4);
        assert_eq!(
            ls[0],
            Listener {
                kind: Kind::Http,
                port: "9001".into(),
                value: "foo".into()
            }
        );
        assert_eq!(ls[1].kind, Kind::Http);
        assert_eq!(ls[2].kind, Kind::Udp);
        assert_eq!(ls[3].kind, Kind::Tls);
    }

    #[test]
    fn content_type_is_sniffed_like_go() {
        assert_eq!(
            sniff(r#"<a href="/rewriteme">test</a>"#),
            "text/html; charset=utf-8"
        );
        assert_eq!(sniff("  <HTML>"), "text/html; charset=utf-8");
        assert_eq!(sniff("<abbr>"), "text/plain; charset=utf-8");
        assert_eq!(sniff("<?xml version"), "text/xml; charset=utf-8");
        assert_eq!(sniff("foo"), "text/plain; charset=utf-8");
        assert_eq!(sniff("<a"), "text/plain; charset=utf-8");
    }

    #[tokio::test]
    async fn http_answers_the_value() {
        let addr = spawn_router(router("foo".into(), false)).await;
        assert_eq!(get(addr, "/x").await.2, "foo");
    }

    #[tokio::test]
    async fn json_response_holds_method_and_body() {
        let addr = spawn_router(router("foo".into(), true)).await;
        let (_, headers, body) = get(addr, "/").await;
        assert_eq!(headers.get("content-type").unwrap(), "application/json");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v, serde_json::json!({"Method": "GET", "Body": "foo"}));
    }
}
