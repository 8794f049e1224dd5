//! The kubelet's HTTPS server (:10250, `--port`/`--address`): `/containerLogs`, `/exec`, `/pods`,
//! `/metrics`, `/metrics/resource` and `/stats/summary` ([`stats`]) for authenticated and authorized clients (the API server's kubelet-client certificate for
//! `kubectl logs`/`exec`), and `/healthz` for anyone, like the kubelet's unauthenticated healthz port.
//!
//! HTTP/1.1 over rustls (hyper), one task per connection; exec upgrades are spliced to containerd's
//! streaming server ([`exec`]).

pub mod auth;
pub mod container_logs;
pub mod exec;
mod metrics;
pub mod pods;
pub mod portforward;
pub mod query;
pub mod stats;
pub mod tls;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use self::auth::{Authorizer, User};
use self::pods::PodSource;
use crate::config::{KubeletConfig, ServerSettings};
use crate::runtime::cri::GrpcCri;

pub type Body = BoxBody<Bytes, std::io::Error>;

const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Cri(#[from] crate::runtime::cri::grpc::GrpcError),
}

/// What the handlers need.
pub struct Context {
    pub node_name: String,
    pub node_ip: IpAddr,
    /// Root of the pod log directories (`--pod-log-dir`).
    pub log_root: PathBuf,
    pub pods: Arc<dyn PodSource>,
    pub authorizer: Arc<dyn Authorizer>,
    /// CRI client for exec (None: no workload runtime).
    pub cri: Option<Arc<GrpcCri>>,
}

struct Shared {
    ctx: Context,
    metrics: metrics::Metrics,
    /// `/stats/summary` and `/metrics/resource`.
    stats: Arc<stats::Stats>,
}

pub struct Server {
    shared: Arc<Shared>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
}

impl Server {
    pub async fn bind(settings: &ServerSettings, ctx: Context) -> Result<Self, ServerError> {
        // The node filesystem is the one holding the pod logs unless the kubelet names its root.
        let root = ctx.log_root.clone();
        Self::bind_with_root(settings, ctx, root).await
    }

    /// Like [`Self::bind`], with the kubelet's root dir as the node filesystem of `/stats/summary`.
    pub async fn bind_with_root(
        settings: &ServerSettings,
        ctx: Context,
        root_dir: PathBuf,
    ) -> Result<Self, ServerError> {
        let source = Arc::new(stats::host::HostStats {
            files: Arc::new(stats::host::RealFiles),
            root_dir,
            cri: ctx.cri.clone(),
        });
        let stats = Arc::new(stats::Stats::new(source, ctx.pods.clone()));
        let config = tls::server_config(settings, &ctx.node_name, ctx.node_ip)?;
        let addr = SocketAddr::new(settings.address, settings.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        Ok(Server {
            shared: Arc::new(Shared {
                ctx,
                metrics: metrics::Metrics::default(),
                stats,
            }),
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` turns true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        if let Ok(addr) = self.local_addr() {
            tracing::info!(%addr, "kubelet server listening");
        }
        tokio::spawn(self.shared.stats.clone().run(shutdown.clone()));
        loop {
            let accepted = tokio::select! {
                r = self.listener.accept() => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let (tcp, peer) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "kubelet server: accept");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let shared = self.shared.clone();
            let acceptor = self.acceptor.clone();
            tokio::spawn(async move {
                // A client that never finishes its handshake does not hold a task forever.
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(t)) => t,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "kubelet server: TLS handshake");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "kubelet server: TLS handshake timed out");
                        return;
                    }
                };
                // The chain was verified by rustls; the subject names the user.
                let user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| match auth::user_from_certificate(c) {
                        Ok(u) => Some(u),
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "kubelet server: client certificate");
                            None
                        }
                    });
                let svc = service_fn(move |req| handle(shared.clone(), user.clone(), req));
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .with_upgrades();
                if let Err(e) = conn.await {
                    tracing::debug!(%peer, error = %e, "kubelet server: connection");
                }
            });
        }
    }
}

/// The server of a running kubelet: its pods, SubjectAccessReviews with its kubeconfig, CRI for exec.
pub async fn start(
    cfg: &KubeletConfig,
    settings: &ServerSettings,
    pods: Arc<dyn PodSource>,
) -> Result<Server, ServerError> {
    let cri = match &cfg.cri {
        Some(c) => Some(Arc::new(GrpcCri::new(&c.endpoint)?)),
        None => None,
    };
    Server::bind_with_root(
        settings,
        Context {
            node_name: cfg.node_name.clone(),
            node_ip: cfg.node_ip,
            log_root: cfg.pod_log_dir.clone(),
            pods,
            authorizer: auth::SarAuthorizer::new(cfg.clone()),
            cri,
        },
        cfg.root_dir.clone(),
    )
    .await
}

pub fn empty() -> Body {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

/// Errors as a v1 Status, so kubectl shows the message through the API server.
fn status(code: StatusCode, message: &str) -> Response<Body> {
    let reason = match code {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::UNAUTHORIZED => "Unauthorized",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        _ => "InternalError",
    };
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16()});
    full(code, "application/json", body.to_string())
}

/// The kind of path, for metrics and logs (never the full path: it holds pod names).
fn path_kind(path: &str) -> &'static str {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match first {
        "healthz" | "livez" | "readyz" => "healthz",
        "pods" => "pods",
        "metrics" => "metrics",
        "stats" => "stats",
        "containerLogs" => "containerLogs",
        "exec" => "exec",
        "attach" => "attach",
        "portForward" => "portforward",
        _ => "other",
    }
}

async fn handle(
    shared: Arc<Shared>,
    user: Option<User>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let kind = path_kind(req.uri().path());
    let method = req.method().clone();
    let resp = route(&shared, user.as_ref(), req, kind).await;
    shared.metrics.record(kind, resp.status().as_u16());
    tracing::debug!(%method, path = kind, user = user.as_ref().map(|u| u.name.as_str()).unwrap_or("-"), code = resp.status().as_u16(), "kubelet server request");
    Ok(resp)
}

async fn route(
    shared: &Shared,
    user: Option<&User>,
    req: Request<Incoming>,
    kind: &'static str,
) -> Response<Body> {
    let ctx = &shared.ctx;
    if kind == "healthz" {
        return full(StatusCode::OK, "text/plain; charset=utf-8", "ok");
    }
    let Some(user) = user else {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized");
    };
    let path = req.uri().path().to_string();
    let attrs = auth::attributes(req.method(), &path);
    let described = format!(
        "user={}, verb={}, resource=nodes, subresource={}",
        user.name, attrs.verb, attrs.subresource
    );
    match ctx.authorizer.allowed(user, &attrs).await {
        Ok(true) => {}
        Ok(false) => return status(StatusCode::FORBIDDEN, &format!("Forbidden ({described})")),
        Err(e) => {
            tracing::warn!(error = %e, "kubelet server: authorization");
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Authorization error ({described})"),
            );
        }
    }
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(query::percent_decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    match (kind, segs.as_slice()) {
        ("pods", ["pods"]) if method == Method::GET => {
            let list = pods::pod_list(&ctx.pods.pods(), &ctx.node_ip.to_string());
            full(StatusCode::OK, "application/json", list.to_string())
        }
        ("metrics", ["metrics"]) if method == Method::GET => full(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            shared.metrics.render(&ctx.node_name, &ctx.pods.pods()),
        ),
        ("metrics", ["metrics", "resource"]) if method == Method::GET => full(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            shared.stats.resource_metrics().await,
        ),
        ("stats", ["stats", "summary"]) if method == Method::GET => full(
            StatusCode::OK,
            "application/json",
            shared.stats.summary(&ctx.node_name).await.to_string(),
        ),
        ("containerLogs", [_, ns, pod, container]) if method == Method::GET => {
            serve_logs(ctx, &req, ns, pod, container).await
        }
        ("exec" | "attach", [_, ns, pod, container])
            if method == Method::GET || method == Method::POST =>
        {
            let (ns, pod, container) = (ns.to_string(), pod.to_string(), container.to_string());
            let stream = if kind == "exec" {
                exec::StreamKind::Exec
            } else {
                exec::StreamKind::Attach
            };
            match exec::serve(
                stream,
                ctx.cri.as_ref(),
                ctx.pods.as_ref(),
                req,
                &ns,
                &pod,
                &container,
            )
            .await
            {
                Ok(r) => r,
                Err(e @ exec::ExecError::BadRequest(_)) => {
                    status(StatusCode::BAD_REQUEST, &e.to_string())
                }
                Err(e @ exec::ExecError::NotFound(_)) => {
                    status(StatusCode::NOT_FOUND, &e.to_string())
                }
                Err(e) => {
                    tracing::warn!(error = %e, "exec");
                    status(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
                }
            }
        }
        ("portforward", [_, ns, pod]) if method == Method::GET || method == Method::POST => {
            let (ns, pod) = (ns.to_string(), pod.to_string());
            match portforward::serve(ctx.cri.as_ref(), ctx.pods.as_ref(), req, &ns, &pod).await {
                Ok(r) => r,
                Err(e @ exec::ExecError::BadRequest(_)) => {
                    status(StatusCode::BAD_REQUEST, &e.to_string())
                }
                Err(e @ exec::ExecError::NotFound(_)) => {
                    status(StatusCode::NOT_FOUND, &e.to_string())
                }
                Err(e) => {
                    tracing::warn!(error = %e, "port-forward");
                    status(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
                }
            }
        }
        (_, _) => status(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

async fn serve_logs(
    ctx: &Context,
    req: &Request<Incoming>,
    ns: &str,
    pod: &str,
    container: &str,
) -> Response<Body> {
    use container_logs::{locate, stream, LogOptions, LogsError};
    let q = query::parse_query(req.uri().query().unwrap_or(""));
    let now = time::OffsetDateTime::now_utc();
    let result = LogOptions::parse(&q, now).and_then(|opts| {
        let file = locate(
            ctx.pods.as_ref(),
            &ctx.log_root,
            ns,
            pod,
            container,
            opts.previous,
        )?;
        Ok((opts, file))
    });
    let (opts, file) = match result {
        Ok(v) => v,
        Err(e @ LogsError::NotFound(_)) => return status(StatusCode::NOT_FOUND, &e.to_string()),
        Err(e) => return status(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let source = ctx.pods.clone();
    tokio::spawn(async move {
        if let Err(e) = stream(file, opts, source, tx).await {
            tracing::warn!(error = %e, "container logs");
        }
    });
    let body = StreamBody::new(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
    }));
    let mut r = Response::new(BodyExt::boxed(body));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_kinds() {
        assert_eq!(path_kind("/healthz"), "healthz");
        assert_eq!(path_kind("/containerLogs/a/b/c"), "containerLogs");
        assert_eq!(path_kind("/exec/a/b/c"), "exec");
        assert_eq!(path_kind("/portForward/a/b"), "portforward");
        assert_eq!(path_kind("/pods"), "pods");
        assert_eq!(path_kind("/stats/summary"), "stats");
        assert_eq!(path_kind("/metrics/resource"), "metrics");
        assert_eq!(path_kind("/"), "other");
    }
}
