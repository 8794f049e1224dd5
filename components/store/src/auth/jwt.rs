//! etcd's JWT tokens (`--auth-token jwt,pub-key=…,priv-key=…,sign-method=…,ttl=…`): signed,
//! self-contained tokens that name a user and the auth revision they were issued at, so any
//! member holding the public key (or the HMAC secret) verifies them without a shared table.
//! A token older than the auth store is refused on key access (etcd's "auth: revision in
//! header is old", sent to clients as "etcdserver: revision of auth store is old"), which
//! makes clients sign in again. Signing and verifying are jsonwebtoken's, but for ES512
//! (P-521), which it lacks: that one is [`super::jwt_es512`]'s, on RustCrypto's `p521`.
//!
//! Option parsing follows etcd 3.4/3.5's auth/options.go and jwt.go; jsonwebtoken reads
//! ES256/ES384 private keys as PKCS#8 only (SEC1 ones are refused at start), while ES512 keys
//! are read as etcd reads them, SEC1 or PKCS#8.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::jwt_es512::{self, Es512Error, Es512Keys};

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
    #[error("auth: invalid {what} for ES512: {source}")]
    Es512Key {
        what: &'static str,
        source: Es512Error,
    },
    #[error("auth: no JWT crypto provider in this build")]
    NoProvider,
}

/// etcd's sign-method: one of jsonwebtoken's algorithms, or ES512 (done by hand around p521).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignMethod {
    Lib(Algorithm),
    Es512,
}

impl std::fmt::Display for SignMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // jsonwebtoken's Debug names are jwt-go's (RS256, EdDSA, …).
            Self::Lib(alg) => write!(f, "{alg:?}"),
            Self::Es512 => f.write_str(jwt_es512::ALG),
        }
    }
}

/// The parsed options, keys still as file contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtOptions {
    pub method: SignMethod,
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
        let method = sign_method(get(OPT_SIGN_METHOD))?;
        let unknown: Vec<&String> = opts
            .keys()
            .filter(|k| !KNOWN_OPTIONS.contains(&k.as_str()))
            .collect();
        if !unknown.is_empty() {
            tracing::warn!(keys = ?unknown, "unknown JWT options");
        }
        Ok(Self {
            method,
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

/// jwt-go's GetSigningMethod names (case-sensitive).
fn sign_method(name: &str) -> Result<SignMethod, JwtError> {
    if name == jwt_es512::ALG {
        return Ok(SignMethod::Es512);
    }
    name.parse()
        .map(SignMethod::Lib)
        .map_err(|_| JwtError::SignMethod(name.to_string()))
}

/// The claims etcd puts in a token (jwt.go's assign), in the order Go writes the map's keys
/// (sorted), so a token's claims part reads as etcd's would.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    exp: u64,
    revision: u64,
    username: String,
}

/// A member's signer and verifier.
pub struct JwtTokens {
    keys: Keys,
    ttl: Duration,
}

enum Keys {
    /// jsonwebtoken's algorithms. signer None: only the public key was given, so this
    /// member verifies but cannot sign.
    Lib {
        alg: Algorithm,
        signer: Option<EncodingKey>,
        verifier: DecodingKey,
        validation: Box<Validation>,
    },
    Es512(Box<Es512Keys>),
}

impl std::fmt::Debug for JwtTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtTokens")
            .field("method", &self.method().to_string())
            .field("verify_only", &self.verify_only())
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl JwtTokens {
    /// etcd's Key(): HMAC needs the secret (priv-key); RSA/EC/EdDSA need the private key to
    /// sign, and verify with the public key given or the private key's own public half.
    pub fn new(opts: &JwtOptions) -> Result<Self, JwtError> {
        let keys = match opts.method {
            SignMethod::Lib(alg) => lib_keys(alg, opts)?,
            SignMethod::Es512 => Keys::Es512(Box::new(es512_keys(opts)?)),
        };
        let tokens = Self {
            keys,
            ttl: opts.ttl,
        };
        // Both keys given: a probe token must verify, or the pair is not a pair.
        if !tokens.verify_only() && !opts.public_key.is_empty() {
            let probe = tokens.sign("", 1)?;
            if tokens.verify(&probe).is_none() {
                return Err(JwtError::KeyMismatch);
            }
        }
        Ok(tokens)
    }

    fn method(&self) -> SignMethod {
        match &self.keys {
            Keys::Lib { alg, .. } => SignMethod::Lib(*alg),
            Keys::Es512(_) => SignMethod::Es512,
        }
    }

    pub fn verify_only(&self) -> bool {
        match &self.keys {
            Keys::Lib { signer, .. } => signer.is_none(),
            Keys::Es512(keys) => keys.verify_only(),
        }
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

    fn sign(&self, user: &str, revision: u64) -> Result<String, JwtError> {
        let exp = (SystemTime::now() + self.ttl)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = Claims {
            username: user.to_string(),
            revision,
            exp,
        };
        match &self.keys {
            Keys::Lib { alg, signer, .. } => {
                let alg = *alg;
                let key_err = |source| JwtError::Key {
                    what: "priv-key",
                    alg,
                    source,
                };
                let Some(key) = signer else {
                    return Err(key_err(
                        jsonwebtoken::errors::ErrorKind::InvalidKeyFormat.into(),
                    ));
                };
                jsonwebtoken::encode(&Header::new(alg), &claims, key).map_err(key_err)
            }
            Keys::Es512(keys) => keys.sign(&claims).map_err(|source| JwtError::Es512Key {
                what: "priv-key",
                source,
            }),
        }
    }

    /// The user and auth revision a valid, unexpired token names (etcd's info).
    pub fn verify(&self, token: &str) -> Option<(String, u64)> {
        let claims = match &self.keys {
            Keys::Lib {
                verifier,
                validation,
                ..
            } => jsonwebtoken::decode::<Claims>(token, verifier, validation)
                .map(|data| data.claims)
                .map_err(|e| e.to_string()),
            Keys::Es512(keys) => keys.verify::<Claims>(token).map_err(|e| e.to_string()),
        };
        match claims {
            // jwt-go's exp check (now <= exp, no leeway); jsonwebtoken's Validation does the
            // same itself, this repeats it for ES512.
            Ok(c) if c.exp >= now_secs() => Some((c.username, c.revision)),
            Ok(_) => {
                tracing::debug!("expired JWT token");
                None
            }
            Err(e) => {
                tracing::debug!(error = %e, "invalid JWT token");
                None
            }
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// jsonwebtoken's keys and the checks jwt-go makes.
fn lib_keys(alg: Algorithm, opts: &JwtOptions) -> Result<Keys, JwtError> {
    if CryptoProvider::try_get_default().is_none() {
        return Err(JwtError::NoProvider);
    }
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
    Ok(Keys::Lib {
        alg,
        signer,
        verifier,
        validation: Box::new(validation),
    })
}

/// ES512's keys, read as etcd's ecKey reads them.
fn es512_keys(opts: &JwtOptions) -> Result<Es512Keys, JwtError> {
    let key_err = |what| move |source| JwtError::Es512Key { what, source };
    let signer = match opts.private_key.is_empty() {
        true => None,
        false => Some(jwt_es512::signing_key(&opts.private_key).map_err(key_err("priv-key"))?),
    };
    let public = match opts.public_key.is_empty() {
        true => None,
        false => Some(jwt_es512::verifying_key(&opts.public_key).map_err(key_err("pub-key"))?),
    };
    Es512Keys::new(signer, public).ok_or(JwtError::MissingKey)
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
