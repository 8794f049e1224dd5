//! `liveness`: an HTTP server on 8080 whose `/healthz` is healthy for its first 10 seconds and failing
//! after, so a liveness probe against it restarts the container; plus the endpoints the probe tests use
//! to emulate slow, redirecting and disconnecting servers.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use rand::Rng;

use crate::gofmt;
use crate::server::{self, Disconnect, ServeError};

pub const PORT: u16 = 8080;
/// How long `/healthz` answers 200.
pub const HEALTHY_FOR: Duration = Duration::from_secs(10);

/// The query parameters of the sleep/slow/disconnect endpoints, as upstream reads them.
#[derive(Debug, PartialEq)]
struct Params {
    code: u16,
    sleep_secs: u64,
    size_kb: u64,
    interval_secs: u64,
}

fn int_param(q: &HashMap<String, String>, name: &str, default: u64) -> Result<u64, String> {
    match q.get(name).map(String::as_str) {
        None | Some("") => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|e| format!("parameter '{name}' is invalid: {e}")),
    }
}

fn params(q: &HashMap<String, String>) -> Result<Params, String> {
    let code = int_param(q, "code", 500)?;
    Ok(Params {
        code: u16::try_from(code).map_err(|e| format!("parameter 'code' is invalid: {e}"))?,
        sleep_secs: int_param(q, "time", 0)?,
        size_kb: int_param(q, "size", 0)?,
        interval_secs: int_param(q, "interval", 0)?,
    })
}

/// One KiB of random hex, as upstream pads each 64-bit number to 16 columns.
fn kib() -> bytes::Bytes {
    let mut rng = rand::rng();
    let mut s = String::with_capacity(1024);
    for _ in 0..64 {
        s.push_str(&format!("{:16x}", rng.random::<u64>()));
    }
    s.into()
}

/// A streamed body: `head`, then `size_kb` KiB (waiting `interval` before each when set), then `tail` pieces each
/// after its own delay, then, when `abort`, an error that makes hyper cut the connection.
fn streamed(
    head: Option<String>,
    size_kb: u64,
    interval: Duration,
    tail: Vec<(Duration, String)>,
    abort: bool,
) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        if let Some(h) = head {
            if tx.send(Ok(h.into())).await.is_err() {
                return;
            }
        }
        for _ in 0..size_kb {
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
            if tx.send(Ok(kib())).await.is_err() {
                return;
            }
        }
        for (delay, text) in tail {
            tokio::time::sleep(delay).await;
            if tx.send(Ok(text.into())).await.is_err() {
                return;
            }
        }
        if abort {
            let _ = tx.send(Err(std::io::Error::other("disconnect"))).await;
        }
    });
    Body::from_stream(tokio_stream_from(rx))
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn bad_request(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response()
}

pub fn router(started: Instant) -> Router {
    Router::new()
        .route(
            "/started",
            get(move || async move { gofmt::duration(started.elapsed()) }),
        )
        .route(
            "/healthz",
            get(move || async move {
                let age = started.elapsed();
                if age > HEALTHY_FOR {
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("error: {}", age.as_secs_f64()),
                    )
                } else {
                    (StatusCode::OK, "ok".to_string())
                }
            }),
        )
        .route(
            "/redirect",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let loc = q.get("loc").cloned().unwrap_or_default();
                crate::netexec::redirect(&loc, StatusCode::FOUND, "/redirect")
            }),
        )
        .route(
            "/sleep-headers",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let p = match params(&q) {
                    Ok(p) => p,
                    Err(e) => return bad_request(e),
                };
                tokio::time::sleep(Duration::from_secs(p.sleep_secs)).await;
                let head = format!("Slept for {} secs\n", p.sleep_secs);
                let body = streamed(Some(head), p.size_kb, Duration::ZERO, vec![], false);
                (status(p.code), body).into_response()
            }),
        )
        .route(
            "/sleep-body",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let p = match params(&q) {
                    Ok(p) => p,
                    Err(e) => return bad_request(e),
                };
                let tail = vec![
                    (
                        Duration::ZERO,
                        format!("Sleeping for {} secs\n", p.sleep_secs),
                    ),
                    (
                        Duration::from_secs(p.sleep_secs),
                        format!("Slept for {} secs\n", p.sleep_secs),
                    ),
                ];
                let body = streamed(
                    None,
                    p.size_kb,
                    Duration::from_secs(p.interval_secs),
                    tail,
                    false,
                );
                (status(p.code), body).into_response()
            }),
        )
        .route(
            "/slow-response",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let p = match params(&q) {
                    Ok(p) => p,
                    Err(e) => return bad_request(e),
                };
                let body = streamed(
                    None,
                    p.size_kb,
                    Duration::from_secs(p.interval_secs),
                    vec![],
                    false,
                );
                (status(p.code), body).into_response()
            }),
        )
        .route(
            "/disconnect-headers",
            get(|| async {
                let mut r = Response::new(Body::empty());
                r.extensions_mut().insert(Disconnect);
                r
            }),
        )
        .route(
            "/disconnect-body",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let p = match params(&q) {
                    Ok(p) => p,
                    Err(e) => return bad_request(e),
                };
                let tail = vec![(Duration::ZERO, "Disconnecting\n".to_string())];
                let body = streamed(None, p.size_kb, Duration::ZERO, tail, true);
                (status(p.code), body).into_response()
            }),
        )
}

pub async fn run() -> Result<i32, ServeError> {
    let started = Instant::now();
    let l = server::bind_tcp(PORT).await?;
    server::serve(l, None, router(started), std::future::pending()).await;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{get, spawn_router};

    #[tokio::test]
    async fn healthy_for_ten_seconds_then_failing() {
        let addr = spawn_router(router(Instant::now())).await;
        let (status, _, body) = get(addr, "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok"));

        let old = Instant::now() - Duration::from_secs(11);
        let addr = spawn_router(router(old)).await;
        let (status, _, body) = get(addr, "/healthz").await;
        assert_eq!(status, 500);
        assert!(body.starts_with("error: 11"), "{body}");
    }

    #[tokio::test]
    async fn redirect_points_at_loc() {
        let addr = spawn_router(router(Instant::now())).await;
        let (status, headers, _) = get(addr, "/redirect?loc=http%3A%2F%2F0.0.0.0%2F").await;
        assert_eq!(status, 302);
        assert_eq!(headers.get("location").unwrap(), "http://0.0.0.0/");
    }

    #[tokio::test]
    async fn sleep_headers_uses_the_code_and_sizes_the_body() {
        let addr = spawn_router(router(Instant::now())).await;
        let (status, _, body) = get(addr, "/sleep-headers?code=201&size=2").await;
        assert_eq!(status, 201);
        assert!(body.starts_with("Slept for 0 secs\n"));
        assert_eq!(body.len(), "Slept for 0 secs\n".len() + 2048);
    }

    #[tokio::test]
    async fn bad_parameters_are_400() {
        let addr = spawn_router(router(Instant::now())).await;
        let (status, _, body) = get(addr, "/slow-response?code=abc").await;
        assert_eq!(status, 400);
        assert!(body.contains("parameter 'code' is invalid"));
    }

    #[tokio::test]
    async fn disconnect_headers_closes_without_an_answer() {
        let addr = spawn_router(router(Instant::now())).await;
        let r = crate::client::get(
            &format!("http://{addr}/disconnect-headers"),
            Duration::from_secs(5),
        )
        .await;
        assert!(r.is_err());
    }
}
