//! etcd's JWT tokens (`--auth-token jwt,pub-key=…,priv-key=…,sign-method=…,ttl=…`): signed,
//! self-contained tokens that name a user and the auth revision they were issued at, so any
//! member holding the public key (or the HMAC secret) verifies them without a shared table.
//! A token older than the auth store is refused on key access (etcd's "auth: revision in
//! header is old", sent to clients as "etcdserver: revision of auth store is old"), which
//! makes clients sign in again. Signing and verifying are jsonwebtoken's.
//!
//! Option parsing follows etcd 3.4/3.5's auth/options.go and jwt.go; jsonwebtoken has no
//! ES512 (P-521) and reads EC private keys as PKCS#8 only, so those two are refused at start.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// etcd's DefaultTTL for JWT tokens (their `ttl` option; --auth-token-ttl is for simple ones).
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

const OPT_SIGN_METHOD: &str = "sign-method";
const OPT_PUBLIC_KEY: &str = "pub-key";
const OPT_PRIVATE_KEY: &str = "priv-key";
const OPT_TTL: &str = "ttl";
const KNOWN_OPTIONS: [&str; 4] = [OPT_SIGN_METHOD, OPT_PUBLIC_KEY, OPT_PRIVATE_KEY, OPT_TTL];

/// Start-up refusals. The texts begin with etcd's own (auth/options.go, auth/store.go); what
/// follows the colon is the detail etcd only logs.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("auth: invalid auth options: ttl {0:?}: {1}")]
    Ttl(String, kiln_common::duration::DurationError),
    #[error("auth: invalid auth options: reading {option} {path:?}: {source}")]
    ReadKey {
        option: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("auth: invalid auth options: auth: invalid auth signature method {0:?}")]
    SignMethod(String),
    #[error("auth: invalid auth options: sign-method {0} is not supported by kiln-store")]
    UnsupportedMethod(String),
    #[error("auth: missing key data")]
    MissingKey,
    #[error("auth: public and private keys don't match")]
    KeyMismatch,
    #[error("auth: invalid {what} for {alg:?}: {source}")]
    Key {
        what: &'static str,
        alg: Algorithm,
        source: jsonwebtoken::errors::Error,
    },
    #[error("auth: no JWT crypto provider in this build")]
    NoProvider,
}

/// The parsed options, keys still as file contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtOptions {
    pub alg: Algorithm,
    pub public_key: Vec<u8>,
    pub private_key: Vec<u8>,
    pub ttl: Duration,
}

impl JwtOptions {
    /// etcd's ParseWithDefaults: ttl defaults to 5m, key files are read when named, and the
    /// sign method is required. Unknown options are only warned about, as etcd does.
    pub fn parse(opts: &HashMap<String, String>) -> Result<Self, JwtError> {
        let get = |k: &str| opts.get(k).map(String::as_str).unwrap_or("");
        let ttl = match get(OPT_TTL) {
            "" => DEFAULT_TTL,
            t => kiln_common::duration::parse_duration(t)
                .map_err(|e| JwtError::Ttl(t.to_string(), e))?,
        };
        let public_key = read_key(OPT_PUBLIC_KEY, get(OPT_PUBLIC_KEY))?;
        let private_key = read_key(OPT_PRIVATE_KEY, get(OPT_PRIVATE_KEY))?;
        let alg = sign_method(get(OPT_SIGN_METHOD))?;
        let unknown: Vec<&String> = opts
            .keys()
            .filter(|k| !KNOWN_OPTIONS.contains(&k.as_str()))
            .collect();
        if !unknown.is_empty() {
            tracing::warn!(keys = ?unknown, "unknown JWT options");
        }
        Ok(Self {
            alg,
            public_key,
            private_key,
            ttl,
        })
    }
}

fn read_key(option: &'static str, path: &str) -> Result<Vec<u8>, JwtError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::read(Path::new(path)).map_err(|source| JwtError::ReadKey {
        option,
        path: path.to_string(),
        source,
    })
}

/// jwt-go's GetSigningMethod names (case-sensitive), less the ones jsonwebtoken lacks.
fn sign_method(name: &str) -> Result<Algorithm, JwtError> {
    match name {
        "ES512" => Err(JwtError::UnsupportedMethod(name.to_string())),
        _ => name
            .parse()
            .map_err(|_| JwtError::SignMethod(name.to_string())),
    }
}

/// The claims etcd puts in a token (jwt.go's assign).
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    username: String,
    revision: u64,
    exp: u64,
}

/// A member's signer and verifier.
pub struct JwtTokens {
    alg: Algorithm,
    /// None: only the public key was given, so this member verifies but cannot sign.
    signer: Option<EncodingKey>,
    verifier: DecodingKey,
    validation: Validation,
    ttl: Duration,
}

impl std::fmt::Debug for JwtTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtTokens")
            .field("alg", &self.alg)
            .field("verify_only", &self.signer.is_none())
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl JwtTokens {
    /// etcd's Key(): HMAC needs the secret (priv-key); RSA/EC/EdDSA need the private key to
    /// sign, and verify with the public key given or the private key's own public half.
    pub fn new(opts: &JwtOptions) -> Result<Self, JwtError> {
        if CryptoProvider::try_get_default().is_none() {
            return Err(JwtError::NoProvider);
        }
        let alg = opts.alg;
        let key_err = |what| move |source| JwtError::Key { what, alg, source };
        let (signer, verifier) = if alg.family() == AlgorithmFamily::Hmac {
            if opts.private_key.is_empty() {
                return Err(JwtError::MissingKey);
            }
            (
                Some(EncodingKey::from_secret(&opts.private_key).map_err(key_err("secret"))?),
                DecodingKey::from_secret(&opts.private_key).map_err(key_err("secret"))?,
            )
        } else {
            let signer = match opts.private_key.is_empty() {
                true => None,
                false => Some(encoding_key(alg, &opts.private_key).map_err(key_err("priv-key"))?),
            };
            let given = match opts.public_key.is_empty() {
                true => None,
                false => Some(decoding_key(alg, &opts.public_key).map_err(key_err("pub-key"))?),
            };
            match (signer, given) {
                (None, None) => return Err(JwtError::MissingKey),
                (None, Some(public)) => (None, public),
                (Some(private), Some(public)) => (Some(private), public),
                (Some(private), None) => {
                    let jwk = Jwk::from_encoding_key(&private, alg).map_err(key_err("priv-key"))?;
                    let public = DecodingKey::from_jwk(&jwk).map_err(key_err("priv-key"))?;
                    (Some(private), public)
                }
            }
        };
        let mut validation = Validation::new(alg);
        // jwt-go checks exp exactly, when present, and nothing else.
        validation.leeway = 0;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let tokens = Self {
            alg,
            signer,
            verifier,
            validation,
            ttl: opts.ttl,
        };
        // Both keys given: a probe token must verify, or the pair is not a pair.
        if tokens.signer.is_some() && !opts.public_key.is_empty() {
            let probe = tokens.sign("", 1).map_err(key_err("priv-key"))?;
            if tokens.verify(&probe).is_none() {
                return Err(JwtError::KeyMismatch);
            }
        }
        Ok(tokens)
    }

    pub fn verify_only(&self) -> bool {
        self.signer.is_none()
    }

    /// A token for `user` at auth `revision` (etcd's assign), or None on a verify-only member.
    pub fn assign(&self, user: &str, revision: u64) -> Option<String> {
        match self.sign(user, revision) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "failed to sign a JWT token");
                None
            }
        }
    }

    fn sign(&self, user: &str, revision: u64) -> Result<String, jsonwebtoken::errors::Error> {
        let Some(key) = &self.signer else {
            return Err(jsonwebtoken::errors::ErrorKind::InvalidKeyFormat.into());
        };
        let exp = (SystemTime::now() + self.ttl)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = Claims {
            username: user.to_string(),
            revision,
            exp,
        };
        jsonwebtoken::encode(&Header::new(self.alg), &claims, key)
    }

    /// The user and auth revision a valid, unexpired token names (etcd's info).
    pub fn verify(&self, token: &str) -> Option<(String, u64)> {
        match jsonwebtoken::decode::<Claims>(token, &self.verifier, &self.validation) {
            Ok(data) => Some((data.claims.username, data.claims.revision)),
            Err(e) => {
                tracing::debug!(error = %e, "invalid JWT token");
                None
            }
        }
    }
}

fn encoding_key(alg: Algorithm, pem: &[u8]) -> jsonwebtoken::errors::Result<EncodingKey> {
    match alg.family() {
        AlgorithmFamily::Rsa => EncodingKey::from_rsa_pem(pem),
        AlgorithmFamily::Ec => EncodingKey::from_ec_pem(pem),
        _ => EncodingKey::from_ed_pem(pem),
    }
}

fn decoding_key(alg: Algorithm, pem: &[u8]) -> jsonwebtoken::errors::Result<DecodingKey> {
    match alg.family() {
        AlgorithmFamily::Rsa => DecodingKey::from_rsa_pem(pem),
        AlgorithmFamily::Ec => DecodingKey::from_ec_pem(pem),
        _ => DecodingKey::from_ed_pem(pem),
    }
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
