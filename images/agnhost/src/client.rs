//! A plain-HTTP GET with a deadline: netexec's `/dial` and the tests use it.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("Get {url:?}: {reason}")]
    Request { url: String, reason: String },
    #[error(
        "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    )]
    Timeout { url: String },
}

pub struct Answer {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// GET `url`, the whole exchange (connect, headers, body) within `timeout`, as Go's
/// `http.Client{Timeout}`. A new connection each time: `/dial` tries must be independent, so each can
/// reach another endpoint of a Service.
pub async fn get(url: &str, timeout: Duration) -> Result<Answer, ClientError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| ClientError::Url {
            url: url.into(),
            reason: e.to_string(),
        })?;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http();
    let exchange = async {
        let resp = client.get(uri).await.map_err(|e| ClientError::Request {
            url: url.into(),
            reason: error_chain(&e),
        })?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| ClientError::Request {
                url: url.into(),
                reason: e.to_string(),
            })?
            .to_bytes();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::Timeout { url: url.into() }),
    }
}

/// hyper's client errors say "client error (Connect)"; the cause ("Connection refused") is what a
/// reader of `/dial`'s errors wants.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}
