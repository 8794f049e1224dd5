//! Just enough JOSE for the discovery check: a compact JWS split into its header, claims and
//! signature, and its signature verified with a JWK (ES256 as kiln signs, RS256 as kube-apiserver
//! commonly does: the two algorithms upstream's checker accepts).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum JwtError {
    #[error("go-jose/go-jose: compact JWS format must have three parts")]
    Parts,
    #[error("illegal base64 data in the token's {0}")]
    Base64(&'static str),
    #[error("the token's {0} is not a JSON object")]
    Json(&'static str),
}

/// A parsed (not yet verified) compact JWS.
#[derive(Debug)]
pub struct Token {
    pub header: Value,
    pub claims: Value,
    signing_input: String,
    signature: Vec<u8>,
}

fn decode(part: &str, what: &'static str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| JwtError::Base64(what))
}

fn object(bytes: &[u8], what: &'static str) -> Result<Value, JwtError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(JwtError::Json(what)),
    }
}

impl Token {
    pub fn parse(raw: &str) -> Result<Token, JwtError> {
        let raw = raw.trim();
        let parts: Vec<&str> = raw.split('.').collect();
        let [header, claims, signature] = parts[..] else {
            return Err(JwtError::Parts);
        };
        Ok(Token {
            header: object(&decode(header, "header")?, "header")?,
            claims: object(&decode(claims, "payload")?, "payload")?,
            signing_input: format!("{header}.{claims}"),
            signature: decode(signature, "signature")?,
        })
    }

    pub fn alg(&self) -> &str {
        self.header["alg"].as_str().unwrap_or("")
    }

    pub fn kid(&self) -> &str {
        self.header["kid"].as_str().unwrap_or("")
    }

    /// Whether `jwk` (one key of a JWKS) verifies the signature under the header's algorithm.
    pub fn verified_by(&self, jwk: &Value) -> bool {
        let field = |name: &str| {
            jwk[name]
                .as_str()
                .and_then(|v| URL_SAFE_NO_PAD.decode(v).ok())
        };
        let message = self.signing_input.as_bytes();
        match (self.alg(), jwk["kty"].as_str()) {
            ("ES256", Some("EC")) if jwk["crv"] == "P-256" => {
                let (Some(x), Some(y)) = (field("x"), field("y")) else {
                    return false;
                };
                if x.len() != 32 || y.len() != 32 {
                    return false;
                }
                let mut point = vec![0x04];
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, &self.signature)
                    .is_ok()
            }
            ("RS256", Some("RSA")) => {
                let (Some(n), Some(e)) = (field("n"), field("e")) else {
                    return false;
                };
                RsaPublicKeyComponents { n, e }
                    .verify(
                        &signature::RSA_PKCS1_2048_8192_SHA256,
                        message,
                        &self.signature,
                    )
                    .is_ok()
            }
            _ => false,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    use serde_json::json;

    /// An ES256 key, its JWK (with `kid`) and a signer of claims.
    pub(crate) struct TestKey {
        pair: EcdsaKeyPair,
        pub jwk: Value,
    }

    impl TestKey {
        pub(crate) fn new(kid: &str) -> TestKey {
            let rng = SystemRandom::new();
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
            let pair =
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                    .unwrap();
            let public = pair.public_key().as_ref();
            let jwk = json!({
                "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&public[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&public[33..65]),
            });
            TestKey { pair, jwk }
        }

        pub(crate) fn sign(&self, claims: &Value) -> String {
            let header = json!({"alg": "ES256", "kid": self.jwk["kid"]});
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(header.to_string()),
                URL_SAFE_NO_PAD.encode(claims.to_string())
            );
            let sig = self
                .pair
                .sign(&SystemRandom::new(), input.as_bytes())
                .unwrap();
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
        }
    }

    #[test]
    fn a_token_verifies_with_its_key_only() {
        let key = TestKey::new("k1");
        let other = TestKey::new("k2");
        let token = Token::parse(&format!("{}\n", key.sign(&json!({"iss": "x"})))).unwrap();
        assert_eq!(token.claims["iss"], "x");
        assert_eq!((token.alg(), token.kid()), ("ES256", "k1"));
        assert!(token.verified_by(&key.jwk));
        assert!(!token.verified_by(&other.jwk));
        // A key of another type never verifies an ES256 signature.
        assert!(!token.verified_by(&json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"})));
    }

    #[test]
    fn a_malformed_token_is_refused() {
        assert_eq!(Token::parse("a.b").unwrap_err(), JwtError::Parts);
        assert_eq!(
            Token::parse("!!.e30.AA").unwrap_err(),
            JwtError::Base64("header")
        );
        assert_eq!(
            Token::parse("e30.WzFd.AA").unwrap_err(),
            JwtError::Json("payload")
        );
    }
}
