//! `test-service-account-issuer-discovery`: reads a mounted service-account token and verifies it
//! against the issuer's OIDC discovery endpoints, as a third-party OIDC client (go-oidc, upstream)
//! would: the provider configuration at `<iss>/.well-known/openid-configuration` MUST name the
//! same issuer, the token MUST be for `--audience`, unexpired, and signed by a key of the
//! configuration's `jwks_uri`. In-cluster discovery (the cluster CA trusted, the pod's token presented) is tried
//! first, then external discovery (the system's roots, no token). Exit 0 only when one passes.

mod https;
pub mod jwt;

use clap::Args;
use serde_json::Value;

use jwt::Token;

#[derive(Debug, Args)]
pub struct IssuerDiscoveryArgs {
    /// Path to read service account token from.
    #[arg(long = "token-path", default_value = "")]
    pub token_path: String,
    /// Audience to check on received token.
    #[arg(long, default_value = "")]
    pub audience: String,
}

/// The algorithms the checker accepts (upstream passes RS256 and ES256 to go-oidc).
const SUPPORTED_ALGS: &[&str] = &["RS256", "ES256"];
/// go-oidc's allowance for clock skew on `nbf`.
const LEEWAY_SECS: i64 = 300;

/// How the check reads a URL (HTTPS in a pod, a recording double in tests).
pub trait Fetch {
    type Error: std::fmt::Display;
    fn get(&self, url: &str) -> impl std::future::Future<Output = Result<Vec<u8>, Self::Error>>;
}

/// Why a token failed the check; the messages are go-oidc's.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OidcError {
    #[error("{0}")]
    Token(#[from] jwt::JwtError),
    #[error("{0}")]
    Fetch(String),
    #[error("oidc: failed to decode provider discovery object: {0}")]
    Discovery(String),
    #[error("oidc: issuer did not match the issuer returned by provider, expected {expected:?} got {got:?}")]
    IssuerMismatch { expected: String, got: String },
    #[error(
        "oidc: invalid configuration, clientID must be provided or SkipClientIDCheck must be set"
    )]
    NoClientId,
    #[error("oidc: id token issued by a different provider, expected {expected:?} got {got:?}")]
    WrongIssuer { expected: String, got: String },
    #[error("oidc: expected audience {expected:?} got {got}")]
    WrongAudience { expected: String, got: String },
    #[error("oidc: token is expired (Token Expiry: {0})")]
    Expired(i64),
    #[error("oidc: current time {now} before the nbf (not before) time: {nbf}")]
    NotYetValid { now: i64, nbf: i64 },
    #[error(
        "oidc: id token signed with unsupported algorithm, expected {SUPPORTED_ALGS:?} got {0:?}"
    )]
    Algorithm(String),
    #[error("failed to verify signature: failed to verify id token signature")]
    Signature,
}

fn audiences(claims: &Value) -> Vec<String> {
    match &claims["aud"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(l) => l
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

async fn fetch_json<F: Fetch>(fetch: &F, url: &str) -> Result<Value, OidcError> {
    let body = fetch
        .get(url)
        .await
        .map_err(|e| OidcError::Fetch(e.to_string()))?;
    serde_json::from_slice(&body).map_err(|e| OidcError::Discovery(e.to_string()))
}

/// The check, at time `now` (seconds since the epoch); the validated claims when it passes.
pub async fn validate<F: Fetch>(
    fetch: &F,
    raw: &str,
    audience: &str,
    now: i64,
) -> Result<Value, OidcError> {
    let token = Token::parse(raw)?;
    let issuer = token.claims["iss"].as_str().unwrap_or("").to_string();
    tracing::info!("OK: got issuer {issuer}");
    tracing::info!("Full, not-validated claims: \n{}", token.claims);

    // oidc.NewProvider
    let well_known = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let provider = fetch_json(fetch, &well_known).await?;
    let announced = provider["issuer"].as_str().unwrap_or("");
    if announced != issuer {
        return Err(OidcError::IssuerMismatch {
            expected: issuer,
            got: announced.into(),
        });
    }
    tracing::info!("OK: Constructed OIDC provider for issuer {issuer}");

    // Verifier.Verify
    if audience.is_empty() {
        return Err(OidcError::NoClientId);
    }
    let aud = audiences(&token.claims);
    if !aud.iter().any(|a| a == audience) {
        return Err(OidcError::WrongAudience {
            expected: audience.into(),
            got: format!("{aud:?}"),
        });
    }
    if let Some(exp) = token.claims["exp"].as_i64() {
        if now > exp {
            return Err(OidcError::Expired(exp));
        }
    }
    if let Some(nbf) = token.claims["nbf"].as_i64() {
        if now + LEEWAY_SECS < nbf {
            return Err(OidcError::NotYetValid { now, nbf });
        }
    }
    if !SUPPORTED_ALGS.contains(&token.alg()) {
        return Err(OidcError::Algorithm(token.alg().into()));
    }
    let jwks_uri = provider["jwks_uri"].as_str().unwrap_or("");
    let keys = fetch_json(fetch, jwks_uri).await?;
    let kid = token.kid();
    let verified = keys["keys"].as_array().is_some_and(|keys| {
        keys.iter()
            .filter(|k| kid.is_empty() || k["kid"].as_str() == Some(kid))
            .any(|k| token.verified_by(k))
    });
    if !verified {
        return Err(OidcError::Signature);
    }
    tracing::info!("OK: Validated signature on JWT");
    tracing::info!("OK: Got valid claims from token!");
    tracing::info!("Full, validated claims: \n{}", token.claims);
    Ok(token.claims)
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

pub async fn run(args: IssuerDiscoveryArgs) -> i32 {
    let raw = match std::fs::read_to_string(&args.token_path) {
        Ok(raw) => raw,
        Err(e) => {
            tracing::error!("open {}: {e}", args.token_path);
            return 1;
        }
    };
    tracing::info!("OK: Got token");
    if let Err(e) = Token::parse(&raw) {
        tracing::error!("{e}");
        return 1;
    }

    tracing::info!("validating with in-cluster discovery");
    let in_cluster = match https::Https::in_cluster() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return 1;
        }
    };
    match validate(&in_cluster, &raw, &args.audience, now()).await {
        Ok(_) => return 0,
        Err(e) => tracing::info!("failed to validate with in-cluster discovery: {e}"),
    }

    tracing::info!("falling back to validating with external discovery");
    let outcome = match https::Https::external() {
        Ok(external) => validate(&external, &raw, &args.audience, now())
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match outcome {
        Ok(_) => 0,
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use serde_json::json;

    use super::jwt::tests::TestKey;
    use super::*;

    const ISS: &str = "https://kubernetes.default.svc.cluster.local";
    const NOW: i64 = 1_700_000_000;

    /// Answers from a fixed map of URL to body and records every URL asked for.
    struct Recorded {
        answers: BTreeMap<String, String>,
        asked: Mutex<Vec<String>>,
    }

    impl Recorded {
        fn new(issuer_in_config: &str, jwks: &Value) -> Recorded {
            let config =
                json!({"issuer": issuer_in_config, "jwks_uri": format!("{ISS}/openid/v1/jwks")});
            Recorded {
                answers: BTreeMap::from([
                    (
                        format!("{ISS}/.well-known/openid-configuration"),
                        config.to_string(),
                    ),
                    (format!("{ISS}/openid/v1/jwks"), jwks.to_string()),
                ]),
                asked: Mutex::new(Vec::new()),
            }
        }
    }

    impl Fetch for Recorded {
        type Error = String;
        async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
            self.asked.lock().unwrap().push(url.to_string());
            self.answers
                .get(url)
                .map(|b| b.clone().into_bytes())
                .ok_or_else(|| format!("404 Not Found: {url}"))
        }
    }

    fn claims(aud: &str, exp: i64) -> Value {
        json!({"iss": ISS, "aud": [aud], "exp": exp, "nbf": NOW - 10, "iat": NOW - 10,
            "sub": "system:serviceaccount:ns:default"})
    }

    #[tokio::test]
    async fn a_token_of_the_issuer_for_the_audience_passes() {
        let key = TestKey::new("k1");
        let fetch = Recorded::new(
            ISS,
            &json!({"keys": [TestKey::new("k0").jwk, key.jwk.clone()]}),
        );
        let raw = key.sign(&claims("oidc-discovery-test", NOW + 600));
        let got = validate(&fetch, &raw, "oidc-discovery-test", NOW)
            .await
            .unwrap();
        assert_eq!(got["sub"], "system:serviceaccount:ns:default");
        assert_eq!(
            *fetch.asked.lock().unwrap(),
            vec![
                format!("{ISS}/.well-known/openid-configuration"),
                format!("{ISS}/openid/v1/jwks")
            ]
        );
    }

    #[tokio::test]
    async fn each_broken_promise_fails_the_check() {
        let key = TestKey::new("k1");
        let jwks = json!({"keys": [key.jwk.clone()]});
        let good = key.sign(&claims("a", NOW + 600));

        let other_issuer = Recorded::new("https://elsewhere", &jwks);
        let e = validate(&other_issuer, &good, "a", NOW).await.unwrap_err();
        assert!(matches!(e, OidcError::IssuerMismatch { .. }), "{e}");

        let fetch = Recorded::new(ISS, &jwks);
        let e = validate(&fetch, &good, "b", NOW).await.unwrap_err();
        assert!(matches!(e, OidcError::WrongAudience { .. }), "{e}");
        assert_eq!(
            validate(&fetch, &good, "", NOW).await.unwrap_err(),
            OidcError::NoClientId
        );
        let expired = key.sign(&claims("a", NOW - 1));
        assert_eq!(
            validate(&fetch, &expired, "a", NOW).await.unwrap_err(),
            OidcError::Expired(NOW - 1)
        );

        let stranger = TestKey::new("k1").sign(&claims("a", NOW + 600));
        assert_eq!(
            validate(&fetch, &stranger, "a", NOW).await.unwrap_err(),
            OidcError::Signature
        );
    }
}
