//! `webhook`: the admission webhook the e2e tests register with Validating- and
//! MutatingWebhookConfigurations. HTTPS only; each path is one admission function; a review comes in
//! as `admission.k8s.io/v1` or `v1beta1` and is answered in the same version.

pub mod add_label;
pub mod always;
pub mod configmaps;
pub mod custom_resources;
pub mod objects;
pub mod pods;
pub mod review;

use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use clap::Args;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use tokio::net::TcpListener;

use crate::kube_json::http_error;
use crate::server::{self, Disconnect, ServeError};
use review::{AdmissionRequest, AdmissionResponse};

#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// File containing the default x509 Certificate for HTTPS. (CA cert, if any, concatenated after
    /// server cert).
    #[arg(long = "tls-cert-file", default_value = "")]
    pub tls_cert_file: String,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file", default_value = "")]
    pub tls_private_key_file: String,
    /// Secure port that the webhook listens on
    #[arg(long = "port", default_value_t = 443)]
    pub port: u16,
    /// Image to be used as the injected sidecar
    #[arg(long = "sidecar-image", default_value = "")]
    pub sidecar_image: String,
}

/// What an admission function does with a request.
#[derive(Debug)]
pub enum Verdict {
    Answer(AdmissionResponse),
    /// Upstream returns a nil response and then sets its UID: the handler panics, and Go's server
    /// drops the connection without an answer.
    Nil,
    /// Upstream blocks forever (`webhook-e2e-test: wait-forever`).
    Hang,
}

impl From<AdmissionResponse> for Verdict {
    fn from(r: AdmissionResponse) -> Verdict {
        Verdict::Answer(r)
    }
}

/// The admission functions, one per path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    AlwaysAllowDelay5s,
    AlwaysDeny,
    AddLabel,
    Pods,
    PodsAttach,
    MutatingPods,
    MutatingPodsSidecar,
    ConfigMaps,
    MutatingConfigMaps,
    CustomResource,
    MutatingCustomResource,
    Crd,
}

/// The paths upstream's main registers, as data.
pub const ROUTES: &[(&str, Admit)] = &[
    ("/always-allow-delay-5s", Admit::AlwaysAllowDelay5s),
    ("/always-deny", Admit::AlwaysDeny),
    ("/add-label", Admit::AddLabel),
    ("/pods", Admit::Pods),
    ("/pods/attach", Admit::PodsAttach),
    ("/mutating-pods", Admit::MutatingPods),
    ("/mutating-pods-sidecar", Admit::MutatingPodsSidecar),
    ("/configmaps", Admit::ConfigMaps),
    ("/mutating-configmaps", Admit::MutatingConfigMaps),
    ("/custom-resource", Admit::CustomResource),
    ("/mutating-custom-resource", Admit::MutatingCustomResource),
    ("/crd", Admit::Crd),
];

impl Admit {
    pub fn admit(self, req: &AdmissionRequest, config: &Config) -> Verdict {
        match self {
            Admit::AlwaysAllowDelay5s => always::always_allow(req).into(),
            Admit::AlwaysDeny => always::always_deny(req).into(),
            Admit::AddLabel => add_label::add_label(req).into(),
            Admit::Pods => pods::admit_pods(req),
            Admit::PodsAttach => pods::deny_specific_attachment(req),
            Admit::MutatingPods => pods::mutate_pods(req),
            Admit::MutatingPodsSidecar => pods::mutate_pods_sidecar(req, &config.sidecar_image),
            Admit::ConfigMaps => configmaps::admit_configmaps(req),
            Admit::MutatingConfigMaps => configmaps::mutate_configmaps(req),
            Admit::CustomResource => custom_resources::admit_custom_resource(req).into(),
            Admit::MutatingCustomResource => custom_resources::mutate_custom_resource(req).into(),
            Admit::Crd => custom_resources::admit_crd(req).into(),
        }
    }
}

/// What the handlers need from the flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub sidecar_image: String,
    /// `/always-allow-delay-5s`'s wait; a field so tests need not wait five seconds.
    pub allow_delay: std::time::Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sidecar_image: String::new(),
            allow_delay: always::ALLOW_DELAY,
        }
    }
}

pub fn router(config: Config) -> Router {
    let config = Arc::new(config);
    let mut app = Router::new();
    for &(path, admit) in ROUTES {
        app = app.route(
            path,
            any(
                move |State(c): State<Arc<Config>>, headers: HeaderMap, body: Bytes| {
                    serve(c, admit, headers, body)
                },
            ),
        );
    }
    app.route("/readyz", any(|| async { "ok" }))
        .fallback(|| async { http_error("404 page not found", StatusCode::NOT_FOUND) })
        .with_state(config)
}

/// Upstream's `serve`: the content type checked, the review decoded, the function's response sent
/// back in the review's version with the request's UID.
async fn serve(config: Arc<Config>, admit: Admit, headers: HeaderMap, body: Bytes) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    if content_type != "application/json" {
        // Upstream logs and returns without writing: an empty 200.
        tracing::error!("contentType={content_type}, expect application/json");
        return StatusCode::OK.into_response();
    }
    tracing::debug!("handling request: {}", String::from_utf8_lossy(&body));
    let review = match review::decode(&body) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("{e}");
            return http_error(e, StatusCode::BAD_REQUEST);
        }
    };
    let Some(request) = review.request else {
        tracing::error!("review has no request");
        return disconnect();
    };
    if admit == Admit::AlwaysAllowDelay5s {
        tracing::debug!("always-allow-with-delay sleeping for 5 seconds");
        tokio::time::sleep(config.allow_delay).await;
    }
    match admit.admit(&request, &config) {
        Verdict::Answer(response) => {
            let out = review::encode(review.version, &request.uid, &response);
            tracing::debug!("sending response: {out}");
            let mut r = out.into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Verdict::Nil => disconnect(),
        Verdict::Hang => std::future::pending().await,
    }
}

fn disconnect() -> Response {
    let mut r = StatusCode::INTERNAL_SERVER_ERROR.into_response();
    r.extensions_mut().insert(Disconnect);
    r
}

/// Loads the certificate and serves the webhook on `listener` in the background.
pub fn start(
    listener: TcpListener,
    args: &WebhookArgs,
) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    let tls = server::tls_config(
        Path::new(&args.tls_cert_file),
        Path::new(&args.tls_private_key_file),
    )?;
    let app = router(Config {
        sidecar_image: args.sidecar_image.clone(),
        ..Config::default()
    });
    Ok(tokio::spawn(server::serve(
        listener,
        Some(tls),
        app,
        std::future::pending(),
    )))
}

/// Serves until killed. Exit codes are Go's: 255 for a bad key pair (`klog.Fatal`), 2 when the port
/// cannot be had (`panic`).
pub async fn run(args: WebhookArgs) -> i32 {
    serve_forever(args.port, |l| start(l, &args)).await
}

/// Binds `port`, starts the server `start` makes, and waits on it; shared with
/// crd-conversion-webhook, whose failures exit the same way.
pub async fn serve_forever(
    port: u16,
    start: impl FnOnce(TcpListener) -> Result<tokio::task::JoinHandle<()>, ServeError>,
) -> i32 {
    let listener = match server::bind_tcp(port).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return 2;
        }
    };
    match start(listener) {
        Ok(task) => {
            let _ = task.await;
            2
        }
        Err(e) => {
            tracing::error!("{e}");
            255
        }
    }
}

#[cfg(test)]
mod tests;
