//! Service-account JWTs as upstream issues them: ES256 (the kiln sa.key is ECDSA P-256, PKCS#8),
//! header `kid` = base64url(sha256(SPKI DER)), claims `iss`, `sub`, `aud`, `exp`, `iat`, `nbf`,
//! `jti` and the private `kubernetes.io` claim. Signing and verification only; no I/O beyond
//! reading the key files once at start.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum JwtError {
    #[error("reading {path}: {message}")]
    KeyFile { path: String, message: String },
    #[error("{0} holds no ECDSA P-256 key (PKCS#8 private key or PUBLIC KEY expected)")]
    NoKey(String),
    #[error("malformed token")]
    Malformed,
    #[error("unsupported token algorithm")]
    Algorithm,
    #[error("token signature is invalid")]
    Signature,
    #[error("token has expired")]
    Expired,
    #[error("token is not yet valid")]
    NotYetValid,
    #[error("token issuer is not accepted")]
    Issuer,
    #[error("token audiences are not accepted")]
    Audience,
}

/// One verification key: the uncompressed P-256 point and its key id.
#[derive(Debug, Clone)]
struct PublicKey {
    kid: String,
    point: Vec<u8>,
}

/// The keys and claims policy for service-account tokens.
pub struct ServiceAccountKeys {
    signer: Option<(EcdsaKeyPair, String)>,
    verifiers: Vec<PublicKey>,
    pub issuer: String,
    pub audiences: Vec<String>,
}

impl std::fmt::Debug for ServiceAccountKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountKeys")
            .field("signs", &self.signer.is_some())
            .field("verifiers", &self.verifiers.len())
            .field("issuer", &self.issuer)
            .finish()
    }
}

/// The SPKI DER of an uncompressed P-256 point (for the key id, which upstream hashes over DER).
fn spki_der(point: &[u8]) -> Vec<u8> {
    // SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING { 0x00, point } }
    let mut out = vec![
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    out.extend_from_slice(point);
    out
}

fn kid(point: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(spki_der(point)))
}

fn key_pair(pkcs8: &[u8]) -> Option<EcdsaKeyPair> {
    EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        pkcs8,
        &SystemRandom::new(),
    )
    .ok()
}

/// Every P-256 key in a PEM file: private keys (PKCS#8) yield their public half too.
fn read_keys(path: &str) -> Result<(Vec<EcdsaKeyPair>, Vec<Vec<u8>>), JwtError> {
    let pem = std::fs::read(path).map_err(|e| JwtError::KeyFile {
        path: path.to_string(),
        message: e.to_string(),
    })?;
    let mut private = Vec::new();
    let mut public = Vec::new();
    for item in rustls_pemfile::read_all(&mut pem.as_slice()) {
        match item {
            Ok(rustls_pemfile::Item::Pkcs8Key(k)) => {
                if let Some(pair) = key_pair(k.secret_pkcs8_der()) {
                    public.push(pair.public_key().as_ref().to_vec());
                    private.push(pair);
                }
            }
            Ok(rustls_pemfile::Item::SubjectPublicKeyInfo(spki)) => {
                if let Ok((_, info)) = SubjectPublicKeyInfo::from_der(spki.as_ref()) {
                    let point = info.subject_public_key.data.to_vec();
                    if point.len() == 65 && point[0] == 4 {
                        public.push(point);
                    }
                }
            }
            _ => {}
        }
    }
    if private.is_empty() && public.is_empty() {
        return Err(JwtError::NoKey(path.to_string()));
    }
    Ok((private, public))
}

impl ServiceAccountKeys {
    /// `signing`: --service-account-signing-key-file; `verify`: --service-account-key-file (any
    /// number; the signing key always verifies too).
    pub fn load(
        signing: Option<&str>,
        verify: &[String],
        issuer: &str,
        audiences: Vec<String>,
    ) -> Result<Self, JwtError> {
        let mut verifiers = Vec::new();
        let mut signer = None;
        if let Some(path) = signing {
            let (mut private, _) = read_keys(path)?;
            if private.is_empty() {
                return Err(JwtError::NoKey(path.to_string()));
            }
            let pair = private.remove(0);
            let point = pair.public_key().as_ref().to_vec();
            let id = kid(&point);
            verifiers.push(PublicKey {
                kid: id.clone(),
                point,
            });
            signer = Some((pair, id));
        }
        for path in verify {
            let (_, public) = read_keys(path)?;
            for point in public {
                verifiers.push(PublicKey {
                    kid: kid(&point),
                    point,
                });
            }
        }
        Ok(ServiceAccountKeys {
            signer,
            verifiers,
            issuer: issuer.to_string(),
            audiences,
        })
    }

    /// The verification keys as a JSON Web Key Set (`/openid/v1/jwks`).
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = self
            .verifiers
            .iter()
            .filter(|k| k.point.len() == 65)
            .map(|k| {
                json!({
                    "use": "sig", "kty": "EC", "kid": k.kid, "crv": "P-256", "alg": "ES256",
                    "x": URL_SAFE_NO_PAD.encode(&k.point[1..33]),
                    "y": URL_SAFE_NO_PAD.encode(&k.point[33..65]),
                })
            })
            .collect();
        json!({ "keys": keys })
    }

    pub fn can_sign(&self) -> bool {
        self.signer.is_some()
    }

    /// Signs `claims` (a JSON object) into a compact JWS; `None` without a signing key.
    pub fn sign(&self, claims: &Value) -> Option<String> {
        let (pair, kid) = self.signer.as_ref()?;
        let header = json!({"alg": "ES256", "kid": kid});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = pair
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .ok()?;
        Some(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(sig.as_ref())
        ))
    }

    /// Checks signature, issuer, audience and lifetime; returns the claims.
    pub fn verify(&self, token: &str, now: i64) -> Result<Value, JwtError> {
        self.verify_for(token, now, &self.audiences)
            .map(|(claims, _)| claims)
    }

    /// [`verify`](Self::verify) for the audiences a caller names (a TokenReview's spec.audiences):
    /// the claims and the audiences both the token and the caller have.
    pub fn verify_for(
        &self,
        token: &str,
        now: i64,
        wanted: &[String],
    ) -> Result<(Value, Vec<String>), JwtError> {
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Malformed);
        };
        let decode = |p: &str| URL_SAFE_NO_PAD.decode(p).map_err(|_| JwtError::Malformed);
        let header: Value = serde_json::from_slice(&decode(h)?).map_err(|_| JwtError::Malformed)?;
        if header["alg"] != "ES256" {
            return Err(JwtError::Algorithm);
        }
        let sig = decode(s)?;
        let input = format!("{h}.{c}");
        let kid = header["kid"].as_str();
        let valid = self
            .verifiers
            .iter()
            .filter(|k| kid.is_none_or(|id| id == k.kid))
            .any(|k| {
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &k.point)
                    .verify(input.as_bytes(), &sig)
                    .is_ok()
            });
        if !valid {
            return Err(JwtError::Signature);
        }
        let claims: Value = serde_json::from_slice(&decode(c)?).map_err(|_| JwtError::Malformed)?;
        if claims["iss"] != self.issuer.as_str() {
            return Err(JwtError::Issuer);
        }
        let auds: Vec<&str> = match &claims["aud"] {
            Value::String(a) => vec![a.as_str()],
            Value::Array(l) => l.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let matched: Vec<String> = wanted
            .iter()
            .filter(|w| auds.contains(&w.as_str()))
            .cloned()
            .collect();
        if matched.is_empty() {
            return Err(JwtError::Audience);
        }
        // Upstream allows 60 s of clock skew.
        if claims["exp"].as_i64().is_none_or(|exp| now > exp + 60) {
            return Err(JwtError::Expired);
        }
        if claims["nbf"].as_i64().is_some_and(|nbf| now + 60 < nbf) {
            return Err(JwtError::NotYetValid);
        }
        Ok((claims, matched))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(dir: &std::path::Path) -> ServiceAccountKeys {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref())
        );
        let path = dir.join("sa.key");
        std::fs::write(&path, pem).unwrap();
        ServiceAccountKeys::load(
            Some(path.to_str().unwrap()),
            &[],
            "https://kubernetes.default.svc.cluster.local",
            vec!["https://kubernetes.default.svc.cluster.local".into()],
        )
        .unwrap()
    }

    #[test]
    fn sign_then_verify_and_reject_tampering() {
        let dir = std::env::temp_dir().join(format!("kiln-jwt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let k = keys(&dir);
        let claims = json!({"iss": "https://kubernetes.default.svc.cluster.local",
            "aud": ["https://kubernetes.default.svc.cluster.local"], "exp": 2000, "nbf": 1000,
            "sub": "system:serviceaccount:default:default"});
        let token = k.sign(&claims).unwrap();
        assert_eq!(k.verify(&token, 1500).unwrap()["sub"], claims["sub"]);
        assert_eq!(k.verify(&token, 3000), Err(JwtError::Expired));
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(
            json!({"iss": claims["iss"], "aud": claims["aud"], "exp": 2000, "sub": "system:serviceaccount:kube-system:admin"}).to_string(),
        );
        parts[1] = &forged;
        assert_eq!(k.verify(&parts.join("."), 1500), Err(JwtError::Signature));
        let other = keys(&dir);
        assert_eq!(other.verify(&token, 1500), Err(JwtError::Signature));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
