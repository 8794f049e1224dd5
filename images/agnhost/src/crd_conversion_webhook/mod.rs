//! `crd-conversion-webhook`: the conversion webhook of the e2e tests' multi-version CRD. HTTPS,
//! `/crdconvert` (and `/readyz` for the readiness probe); ConversionReview v1 and v1beta1 in JSON or YAML (by Content-Type),
//! answered in JSON or YAML (by Accept).

pub mod converter;
pub mod review;

use std::path::Path;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use clap::Args;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use tokio::net::TcpListener;

use crate::kube_json::{self, http_error};
use crate::server::{self, Disconnect, ServeError};

#[derive(Debug, Clone, Args)]
pub struct CrdConversionWebhookArgs {
    /// File containing the default x509 Certificate for HTTPS. (CA cert, if any, concatenated after
    /// server cert.
    #[arg(long = "tls-cert-file", default_value = "")]
    pub tls_cert_file: String,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file", default_value = "")]
    pub tls_private_key_file: String,
    /// Secure port that the webhook listens on
    #[arg(long = "port", default_value_t = 443)]
    pub port: u16,
}

/// The two encodings upstream's converter speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    Json,
    Yaml,
}

/// The input serializer for a Content-Type: upstream splits at the first `/` and looks the halves
/// up exactly, so parameters (`; charset=utf-8`) make it unknown.
pub fn input_media(content_type: &str) -> Option<Media> {
    match content_type.split_once('/')? {
        ("application", "json") => Some(Media::Json),
        ("application", "yaml") => Some(Media::Yaml),
        _ => None,
    }
}

/// The output serializer for an Accept header (goautoneg's clause order: q, then specificity);
/// none asked for is JSON. Upstream picks among matches of a wildcard at random; JSON here.
pub fn output_media(accept: &str) -> Option<Media> {
    if accept.is_empty() {
        return Some(Media::Json);
    }
    let mut clauses: Vec<(f32, u8, String, String)> = Vec::new();
    for part in accept.split(',') {
        let mut params = part.trim().split(';');
        let range = params.next().unwrap_or_default().trim();
        let (t, s) = match range.split('/').collect::<Vec<_>>()[..] {
            ["*"] => ("*", "*"),
            [t, s] => (t, s),
            _ => continue,
        };
        let q = params
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        let specificity = u8::from(t != "*") + u8::from(s != "*");
        clauses.push((q, specificity, t.to_owned(), s.to_owned()));
    }
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    clauses
        .iter()
        .find_map(|(_, _, t, s)| match (t.as_str(), s.as_str()) {
            ("application", "json") | ("application", "*") | ("*", "*") => Some(Media::Json),
            ("application", "yaml") => Some(Media::Yaml),
            _ => None,
        })
}

pub fn router() -> Router {
    Router::new()
        .route("/crdconvert", any(serve))
        // Upstream's main answers the e2e deployment's readiness probe here.
        .route("/readyz", any(|| async { "ok" }))
        .fallback(|| async { http_error("404 page not found", StatusCode::NOT_FOUND) })
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default()
}

/// Upstream's `serve`: decode by Content-Type, convert, encode by Accept.
async fn serve(headers: HeaderMap, body: Bytes) -> Response {
    let content_type = header_str(&headers, header::CONTENT_TYPE);
    let Some(input) = input_media(&content_type) else {
        let msg = format!("invalid Content-Type header `{content_type}`");
        tracing::error!("{msg}");
        return http_error(msg, StatusCode::BAD_REQUEST);
    };
    tracing::debug!("handling request: {}", String::from_utf8_lossy(&body));
    let decoded = kube_json::to_json_text(&body, input == Media::Yaml)
        .map_err(review::Rejection::from)
        .and_then(|json| review::decode(&json));
    let review = match decoded {
        Ok(r) => r,
        Err(e @ review::Rejection::Unsupported(_)) => {
            tracing::error!("{e}");
            return http_error(e, StatusCode::BAD_REQUEST);
        }
        Err(e) => {
            tracing::error!("{e}");
            let msg = format!(
                "failed to deserialize body ({}) with error {e}",
                String::from_utf8_lossy(&body)
            );
            return http_error(msg, StatusCode::BAD_REQUEST);
        }
    };
    let out = match review::respond(review) {
        Ok(out) => out,
        Err(e) => {
            // Upstream panics here (no request, or a hostPort that is not a string): Go's server
            // drops the connection.
            tracing::error!("{e}");
            let mut r = StatusCode::INTERNAL_SERVER_ERROR.into_response();
            r.extensions_mut().insert(Disconnect);
            return r;
        }
    };
    let accept = header_str(&headers, header::ACCEPT);
    let Some(output) = output_media(&accept) else {
        let msg = format!("invalid accept header `{accept}`");
        tracing::error!("{msg}");
        return http_error(msg, StatusCode::BAD_REQUEST);
    };
    let text = match output {
        // json.Encoder: a trailing newline.
        Media::Json => format!("{}\n", kube_json::go_json(&out)),
        Media::Yaml => match serde_json::to_value(&out).map(|v| serde_norway::to_string(&v)) {
            Ok(Ok(y)) => y,
            Ok(Err(e)) => return http_error(e, StatusCode::INTERNAL_SERVER_ERROR),
            Err(e) => return http_error(e, StatusCode::INTERNAL_SERVER_ERROR),
        },
    };
    let mut r = text.into_response();
    // Upstream sets no Content-Type; Go sniffs JSON and YAML alike as text.
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Loads the certificate and serves `/crdconvert` on `listener` in the background.
pub fn start(
    listener: TcpListener,
    args: &CrdConversionWebhookArgs,
) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    let tls = server::tls_config(
        Path::new(&args.tls_cert_file),
        Path::new(&args.tls_private_key_file),
    )?;
    Ok(tokio::spawn(server::serve(
        listener,
        Some(tls),
        router(),
        std::future::pending(),
    )))
}

/// Serves until killed; exit codes as `webhook`'s.
pub async fn run(args: CrdConversionWebhookArgs) -> i32 {
    crate::webhook::serve_forever(args.port, |l| start(l, &args)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{call, https_post, test_cert};
    use serde_json::{json, Value};

    const YAML_REVIEW: &str = "kind: ConversionReview
apiVersion: apiextensions.k8s.io/v1
request:
  uid: 0000-0000-0000-0000
  desiredAPIVersion: stable.example.com/v2
  objects:
    - apiVersion: stable.example.com/v1
      kind: CronTab
      metadata:
        name: my-new-cron-object
      spec:
        cronSpec: \"* * * * */5\"
        image: my-awesome-cron-image
      hostPort: \"localhost:7070\"
";

    #[test]
    fn media_types_as_upstream_matches_them() {
        assert_eq!(input_media("application/json"), Some(Media::Json));
        assert_eq!(input_media("application/yaml"), Some(Media::Yaml));
        assert_eq!(input_media("application/json; charset=utf-8"), None);
        assert_eq!(output_media(""), Some(Media::Json));
        assert_eq!(output_media("application/yaml"), Some(Media::Yaml));
        assert_eq!(
            output_media("application/json;q=0.5, application/yaml"),
            Some(Media::Yaml)
        );
        assert_eq!(output_media("*/*"), Some(Media::Json));
        assert_eq!(output_media("text/html"), None);
    }

    #[tokio::test]
    async fn yaml_in_json_out() {
        let (status, headers, body, _) = call(
            router(),
            "/crdconvert",
            &[("content-type", "application/yaml")],
            YAML_REVIEW,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(headers[header::CONTENT_TYPE], "text/plain; charset=utf-8");
        assert!(body.ends_with("}\n"));
        let out: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(out["response"]["uid"], "0000-0000-0000-0000");
        assert_eq!(out["response"]["result"]["status"], "Success");
        let o = &out["response"]["convertedObjects"][0];
        assert_eq!(
            (&o["apiVersion"], &o["host"], &o["port"]),
            (
                &json!("stable.example.com/v2"),
                &json!("localhost"),
                &json!("7070")
            )
        );
    }

    #[tokio::test]
    async fn yaml_sent_as_json_is_a_json_parse_error() {
        let (status, _, body, _) = call(
            router(),
            "/crdconvert",
            &[("content-type", "application/json")],
            YAML_REVIEW,
        )
        .await;
        assert_eq!(status, 400);
        assert!(body.contains("json parse error"), "{body}");
        assert!(body.starts_with("failed to deserialize body (kind: ConversionReview"));
    }

    #[tokio::test]
    async fn bad_headers_are_400s() {
        let (status, _, body, _) = call(
            router(),
            "/crdconvert",
            &[("content-type", "text/plain")],
            "",
        )
        .await;
        assert_eq!(
            (status, body.as_str()),
            (400, "invalid Content-Type header `text/plain`\n")
        );
        let (status, _, body, _) = call(
            router(),
            "/crdconvert",
            &[
                ("content-type", "application/yaml"),
                ("accept", "text/html"),
            ],
            YAML_REVIEW,
        )
        .await;
        assert_eq!(
            (status, body.as_str()),
            (400, "invalid accept header `text/html`\n")
        );
    }

    #[tokio::test]
    async fn yaml_out_when_accepted() {
        let (status, _, body, _) = call(
            router(),
            "/crdconvert",
            &[
                ("content-type", "application/yaml"),
                ("accept", "application/yaml"),
            ],
            YAML_REVIEW,
        )
        .await;
        assert_eq!(status, 200);
        let out: Value = serde_norway::from_str(&body).unwrap();
        assert_eq!(out["response"]["convertedObjects"][0]["port"], "7070");
    }

    #[tokio::test]
    async fn readyz_answers_ok() {
        let (status, _, body, _) = call(router(), "/readyz", &[], "").await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        let (status, _, body, _) = call(router(), "/nope", &[], "").await;
        assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
    }

    #[tokio::test]
    async fn no_request_drops_the_connection() {
        let (_, _, _, dropped) = call(
            router(),
            "/crdconvert",
            &[("content-type", "application/json")],
            r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#,
        )
        .await;
        assert!(dropped);
    }

    #[tokio::test]
    async fn converts_over_https() {
        let cert = test_cert();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let args = CrdConversionWebhookArgs {
            tls_cert_file: cert.cert_file.clone(),
            tls_private_key_file: cert.key_file.clone(),
            port: 0,
        };
        let task = start(listener, &args).unwrap();
        let body = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "9", "desiredAPIVersion": "stable.example.com/v1", "objects": [
                {"apiVersion": "stable.example.com/v2", "kind": "E2eTestCrd", "host": "h", "port": "1"}
            ]}
        });
        let (status, _, out) = https_post(
            addr,
            &cert,
            "/crdconvert",
            "application/json",
            &body.to_string(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            out,
            "{\"kind\":\"ConversionReview\",\"apiVersion\":\"apiextensions.k8s.io/v1\",\"request\":{\"uid\":\"\",\"desiredAPIVersion\":\"\",\"objects\":null},\"response\":{\"uid\":\"9\",\"convertedObjects\":[{\"apiVersion\":\"stable.example.com/v1\",\"hostPort\":\"h:1\",\"kind\":\"E2eTestCrd\"}],\"result\":{\"metadata\":{},\"status\":\"Success\"}}}\n"
        );
        task.abort();
    }
}
