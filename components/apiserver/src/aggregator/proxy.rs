//! Forwards a request for an aggregated group/version to its extension server, after kiln has
//! authenticated and authorized it: same method, path, query and body (streamed both ways, so a
//! watch stays open), the front-proxy identity headers in place of the client's credentials.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::resolve::{resolve, Resolution};
use super::{client, headers, Aggregator, Backend};
use crate::auth::Identity;
use crate::request_path::ApiPath;
use crate::storage::Store;

/// Upstream's proxy errors are plain text (`http.Error`), which kubectl reports as
/// `ServiceUnavailable`.
fn unavailable(message: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!("{message}\n"),
    )
        .into_response()
}

/// The identity that travels to the extension server.
fn user_and_groups(who: &Identity) -> (String, Vec<String>) {
    match who {
        Identity::User(u) => (u.name.clone(), u.groups.clone()),
        Identity::Anonymous => (
            "system:anonymous".into(),
            vec!["system:unauthenticated".into()],
        ),
    }
}

/// The APIService behind a `/apis/<group>/<version>` discovery path, if another server serves it.
pub fn group_version_backend(aggregator: &Aggregator, path: &str) -> Option<Backend> {
    match crate::request_path::parse(path)? {
        ApiPath::GroupVersion { group, version } if !group.is_empty() => {
            aggregator.route(&group, &version)
        }
        _ => None,
    }
}

pub async fn serve(
    store: &Store,
    aggregator: &Aggregator,
    backend: Backend,
    who: &Identity,
    req: Request,
) -> Response {
    if !backend.available {
        return unavailable("service unavailable");
    }
    let endpoint = match resolve(store, &backend.service).await {
        Ok(Resolution::Ready(e)) => e,
        Ok(other) => {
            let (_, message) = other.failure(&backend.service).unwrap_or_default();
            return unavailable(&format!("Error trying to reach service: {message}"));
        }
        Err(e) => return unavailable(&format!("Error trying to reach service: {e}")),
    };
    let connector = match client::connector(&backend, aggregator.front_proxy.as_deref()) {
        Ok(c) => c,
        Err(e) => return unavailable(&e.to_string()),
    };
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let (user, groups) = user_and_groups(who);
    headers::strip_hop_by_hop(&mut parts.headers);
    headers::set_identity(&mut parts.headers, &user, &groups, &Default::default());
    if let Ok(host) = HeaderValue::from_str(&format!(
        "{}:{}",
        endpoint.server_name, backend.service.port
    )) {
        parts.headers.insert(header::HOST, host);
    }
    let mut out = http::Request::new(body);
    *out.method_mut() = parts.method;
    *out.headers_mut() = parts.headers;
    *out.uri_mut() = match path.parse() {
        Ok(uri) => uri,
        Err(_) => return unavailable("invalid request path"),
    };
    match client::send(&endpoint, &connector, out).await {
        Ok(resp) => {
            let (mut parts, incoming) = resp.into_parts();
            headers::strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(incoming))
        }
        Err(e) => {
            tracing::debug!(apiservice = %backend.name, error = %e, "proxying failed");
            unavailable(&format!("Error trying to reach service: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unavailable_apiservice_answers_503_service_unavailable() {
        let resp = unavailable("service unavailable");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"service unavailable\n");
    }

    #[test]
    fn only_aggregated_group_versions_route_to_a_backend() {
        let agg = Aggregator::default();
        let obj = serde_json::json!({"metadata": {"name": "v1beta1.metrics.example.com"},
            "spec": {"group": "metrics.example.com", "version": "v1beta1",
                     "service": {"namespace": "kube-system", "name": "metrics"}}});
        agg.set_backends(vec![Backend::from_apiservice(&obj).unwrap()]);
        assert!(group_version_backend(&agg, "/apis/metrics.example.com/v1beta1").is_some());
        assert!(group_version_backend(&agg, "/apis/metrics.example.com/v1beta1/").is_some());
        assert!(group_version_backend(&agg, "/apis/metrics.example.com").is_none());
        assert!(group_version_backend(&agg, "/apis/metrics.example.com/v1").is_none());
        assert!(group_version_backend(&agg, "/apis/apps/v1").is_none());
        // Resource paths route in `serve_resource`, after authorization.
        assert!(group_version_backend(&agg, "/apis/metrics.example.com/v1beta1/pods").is_none());
    }

    #[test]
    fn anonymous_requests_travel_as_system_anonymous() {
        let (u, g) = user_and_groups(&Identity::Anonymous);
        assert_eq!(
            (u.as_str(), g[0].as_str()),
            ("system:anonymous", "system:unauthenticated")
        );
    }
}
