//! Service-account issuer discovery (upstream's ServiceAccountIssuerDiscovery): an OpenID provider
//! configuration at `/.well-known/openid-configuration` and the verification keys at
//! `/openid/v1/jwks`, so other systems (cloud IAM, Vault) can verify kiln's service-account tokens.
//! Served, as upstream, only when the issuer is an https URL and tokens are verified at all.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::state::AppState;
use crate::status::ApiError;

pub const CONFIGURATION: &str = "/.well-known/openid-configuration";
pub const JWKS: &str = "/openid/v1/jwks";

/// The provider configuration for `issuer`; `None` when the issuer is not an https URL.
pub fn configuration(issuer: &str) -> Option<Value> {
    let rest = issuer.strip_prefix("https://")?;
    if rest.is_empty() || rest.contains('?') || rest.contains('#') {
        return None;
    }
    Some(json!({
        "issuer": issuer,
        "jwks_uri": format!("{}{JWKS}", issuer.trim_end_matches('/')),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    }))
}

fn respond(content_type: &'static str, body: &Value) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            // Upstream lets caches keep these for an hour.
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        serde_json::to_vec(body).unwrap_or_default(),
    )
        .into_response()
}

pub fn serve(state: &AppState, path: &str) -> Result<Response, ApiError> {
    let keys = state
        .tokens
        .keys
        .as_ref()
        .ok_or_else(ApiError::path_not_found)?;
    let config = configuration(&keys.issuer).ok_or_else(ApiError::path_not_found)?;
    match path.trim_end_matches('/') {
        CONFIGURATION => Ok(respond("application/json", &config)),
        JWKS => Ok(respond("application/jwk-set+json", &keys.jwks())),
        _ => Err(ApiError::path_not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::configuration;

    #[test]
    fn only_https_issuers_are_discoverable() {
        let c = configuration("https://kubernetes.default.svc.cluster.local").unwrap();
        assert_eq!(
            c["jwks_uri"],
            "https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
        );
        assert_eq!(c["id_token_signing_alg_values_supported"][0], "ES256");
        assert!(configuration("kubernetes/serviceaccount").is_none());
        assert!(configuration("http://insecure").is_none());
    }
}
