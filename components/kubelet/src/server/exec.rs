//! `GET|POST /exec/{namespace}/{pod}/{container}?command=…&stdin=&stdout=&stderr=&tty=` (and `/attach/…`
//! without a command): CRI `Exec` (`Attach`) gives a one-time URL on containerd's streaming server; the request (with its SPDY or WebSocket upgrade headers,
//! as the API server forwarded them) is replayed there and, once containerd switches protocols, the two
//! upgraded connections are spliced. This is what upstream's kubelet does; the stream protocol itself
//! (channels, resize, exit status) is containerd's.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use tokio::net::TcpStream;

use super::pods::{self, PodRuntime, PodSource};
use super::query;
use super::Body;
use crate::runtime::cri::GrpcCri;

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("container runtime: {0}")]
    Runtime(String),
    #[error("streaming server {server}: {message}")]
    Stream { server: String, message: String },
}

/// Exec runs a command in the container; attach joins the container's own stdio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Exec,
    Attach,
}

/// What is asked of the runtime.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamRequest {
    Exec(cri::ExecRequest),
    Attach(cri::AttachRequest),
}

/// The request's query as a CRI ExecRequest / AttachRequest for `container_id`.
pub fn stream_request(
    kind: StreamKind,
    q: &[(String, String)],
    container_id: &str,
) -> Result<StreamRequest, String> {
    let cmd: Vec<String> = q
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    if kind == StreamKind::Exec && cmd.is_empty() {
        return Err("you must specify at least one command for the container".into());
    }
    let tty = query::get_bool(q, "tty")?;
    let stdin = query::get_bool(q, "stdin")?;
    let stdout = query::get_bool(q, "stdout")?;
    // With a TTY, stderr is merged into stdout (as upstream).
    let stderr = query::get_bool(q, "stderr")? && !tty;
    if !stdin && !stdout && !stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    let container_id = container_id.to_string();
    Ok(match kind {
        StreamKind::Exec => StreamRequest::Exec(cri::ExecRequest {
            container_id,
            cmd,
            tty,
            stdin,
            stdout,
            stderr,
        }),
        StreamKind::Attach => StreamRequest::Attach(cri::AttachRequest {
            container_id,
            stdin,
            tty,
            stdout,
            stderr,
        }),
    })
}

/// The running CRI container `container` of a pod, by id.
fn container_id(
    source: &dyn PodSource,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<String, ExecError> {
    let p = pods::find(source, namespace, pod)
        .ok_or_else(|| ExecError::NotFound(format!("pod {namespace}/{pod} not found")))?;
    if p.runtime != PodRuntime::Cri {
        return Err(ExecError::BadRequest(format!(
            "pod {pod} runs on the kiln-host runtime (host processes): exec and attach are only supported for CRI pods"
        )));
    }
    let c = p
        .status
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .chain(&s.init_containers)
                .chain(&s.ephemeral_containers)
                .find(|c| c.name == container)
        })
        .ok_or_else(|| {
            ExecError::NotFound(format!("container {container} is not valid for pod {pod}"))
        })?;
    if !c.is_running() {
        return Err(ExecError::BadRequest(format!(
            "container {container} is not running"
        )));
    }
    let id = c
        .container_id
        .split_once("://")
        .map(|(_, id)| id)
        .unwrap_or(&c.container_id);
    Ok(id.to_string())
}

pub async fn serve(
    kind: StreamKind,
    cri: Option<&Arc<GrpcCri>>,
    source: &dyn PodSource,
    req: Request<Incoming>,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<Response<Body>, ExecError> {
    let cri = cri.ok_or_else(|| {
        ExecError::BadRequest("this kubelet has no container runtime (CRI) configured".into())
    })?;
    let id = container_id(source, namespace, pod, container)?;
    let q = query::parse_query(req.uri().query().unwrap_or(""));
    let url = match stream_request(kind, &q, &id).map_err(ExecError::BadRequest)? {
        StreamRequest::Exec(r) => cri.exec_url(r).await,
        StreamRequest::Attach(r) => cri.attach_url(r).await,
    }
    .map_err(|e| ExecError::Runtime(e.to_string()))?;
    proxy_to_streaming_server(req, &url, format!("{namespace}/{pod}/{container}")).await
}

/// Replays `req` (its method and upgrade headers) on the runtime's one-time streaming `url` and,
/// once the runtime switches protocols, splices the two upgraded connections (`key` names the
/// session in logs). A refusal comes back unchanged.
pub async fn proxy_to_streaming_server(
    mut req: Request<Incoming>,
    url: &str,
    key: String,
) -> Result<Response<Body>, ExecError> {
    // The URL's path is a one-time token: errors name the server only.
    let uri: http::Uri = url.parse().map_err(|e| ExecError::Stream {
        server: "containerd".into(),
        message: format!("bad streaming URL: {e}"),
    })?;
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    let stream_err = |message: String| ExecError::Stream {
        server: authority.clone(),
        message,
    };
    if uri.scheme_str() != Some("http") || authority.is_empty() {
        return Err(stream_err(
            "only plain-http streaming servers are supported (enable_tls_streaming = false)".into(),
        ));
    }
    let tcp = TcpStream::connect(authority.as_str())
        .await
        .map_err(|e| stream_err(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| stream_err(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming server connection ended");
        }
    });
    // Same method and upgrade headers; the token in the URL carries the command.
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut upstream = Request::builder()
        .method(req.method().clone())
        .uri(path)
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| stream_err(e.to_string()))?;
    for (name, value) in req.headers() {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            upstream.headers_mut().append(name.clone(), value.clone());
        }
    }
    upstream.headers_mut().insert(
        http::header::HOST,
        http::HeaderValue::from_str(&authority).map_err(|e| stream_err(e.to_string()))?,
    );
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = sender
        .send_request(upstream)
        .await
        .map_err(|e| stream_err(e.to_string()))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // containerd's refusal (e.g. a WebSocket protocol it does not speak, so kubectl falls back to
        // SPDY) goes back unchanged.
        tracing::debug!(status = %resp.status(), session = %key, "streaming server did not upgrade");
        let (parts, body) = resp.into_parts();
        let mut out = Response::new(body.map_err(std::io::Error::other).boxed());
        *out.status_mut() = parts.status;
        *out.headers_mut() = parts.headers;
        return Ok(out);
    }
    let upstream_upgrade = hyper::upgrade::on(&mut resp);
    let mut out = Response::new(super::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *out.headers_mut() = resp.headers().clone();
    tokio::spawn(async move {
        let (client, upstream) = match tokio::try_join!(client_upgrade, upstream_upgrade) {
            Ok(both) => both,
            Err(e) => {
                tracing::warn!(exec = %key, error = %e, "exec upgrade failed");
                return;
            }
        };
        let mut a = TokioIo::new(client);
        let mut b = TokioIo::new(upstream);
        match tokio::io::copy_bidirectional(&mut a, &mut b).await {
            Ok((up, down)) => tracing::debug!(exec = %key, up, down, "exec stream ended"),
            Err(e) => tracing::debug!(exec = %key, error = %e, "exec stream ended"),
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_query_becomes_a_cri_request() {
        let exec = |q: &str| match stream_request(StreamKind::Exec, &query::parse_query(q), "abc") {
            Ok(StreamRequest::Exec(r)) => Ok(r),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let r =
            exec("command=cat&command=%2Fetc%2Fhostname&stdout=true&stderr=true&container=main")
                .unwrap();
        assert_eq!(r.container_id, "abc");
        assert_eq!(r.cmd, ["cat", "/etc/hostname"]);
        assert!(r.stdout && r.stderr && !r.stdin && !r.tty);
        let tty = exec("command=sh&stdin=1&stdout=1&stderr=1&tty=1").unwrap();
        assert!(tty.tty && tty.stdin && !tty.stderr);
        assert!(exec("stdout=1").is_err());
        assert!(exec("command=ls").is_err());
    }

    #[test]
    fn attach_needs_no_command() {
        let q = query::parse_query("stdin=1&stdout=1&tty=1");
        match stream_request(StreamKind::Attach, &q, "abc").unwrap() {
            StreamRequest::Attach(r) => {
                assert_eq!(r.container_id, "abc");
                assert!(r.stdin && r.stdout && r.tty && !r.stderr);
            }
            other => panic!("{other:?}"),
        }
    }
}
