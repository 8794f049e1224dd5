//! ES512 (ECDSA on P-521 with SHA-512) tokens, which jsonwebtoken lacks: the JWS compact form
//! is assembled here and the signing and verifying are RustCrypto's `p521`.
//!
//! Keys are read as etcd 3.4 reads them (golang-jwt's ParseECPrivateKeyFromPEM and
//! ParseECPublicKeyFromPEM): only the first PEM block counts, a private key is SEC1 ("EC
//! PRIVATE KEY") or else PKCS#8, a public key PKIX ("PUBLIC KEY") or else a certificate's. So
//! `openssl ecparam -genkey` output that starts with an "EC PARAMETERS" block is refused by
//! both (make keys with `-noout`). A signature is r||s, 66 bytes each (RFC 7518 3.4), which is
//! what `p521`'s fixed-size signature already is.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p521::ecdsa::signature::{Signer, Verifier};
use p521::ecdsa::{Signature, SigningKey, VerifyingKey};
use p521::pkcs8::{DecodePrivateKey, DecodePublicKey};
use p521::{PublicKey, SecretKey};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The `alg` header value, as jwt-go names the method.
pub const ALG: &str = "ES512";

/// Key reading and token refusals; the texts are what kiln logs (etcd only logs its own).
#[derive(Debug, thiserror::Error)]
pub enum Es512Error {
    #[error("key must be PEM encoded: {0}")]
    Pem(String),
    #[error("key is not a valid P-521 ECDSA private key (SEC1: {sec1}; PKCS#8: {pkcs8})")]
    NotPrivateKey { sec1: String, pkcs8: String },
    #[error("key is not a valid P-521 ECDSA public key (PKIX: {pkix}; certificate: {cert})")]
    NotPublicKey { pkix: String, cert: String },
    #[error("token is not three base64url parts")]
    Malformed,
    #[error("token header names {0:?}, not ES512")]
    WrongAlg(String),
    #[error("signature is invalid")]
    Signature,
    #[error("token JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("token signing attempted with verify-only key")]
    VerifyOnly,
}

/// jwt-go's header for a new token (`{"alg":"ES512","typ":"JWT"}`, Go's sorted map keys).
#[derive(Serialize)]
struct NewHeader {
    alg: &'static str,
    typ: &'static str,
}

#[derive(serde::Deserialize)]
struct ParsedHeader {
    #[serde(default)]
    alg: String,
}

/// A member's ES512 signer (when it has the private key) and verifier.
#[derive(Clone)]
pub struct Es512Keys {
    signer: Option<SigningKey>,
    verifier: VerifyingKey,
}

impl Es512Keys {
    /// From a signing key, a public key, or both (then the given public key verifies; the
    /// caller checks the two belong together). None when neither is given.
    pub fn new(signer: Option<SigningKey>, public: Option<VerifyingKey>) -> Option<Self> {
        let verifier = match (&signer, public) {
            (_, Some(v)) => v,
            (Some(s), None) => *s.verifying_key(),
            (None, None) => return None,
        };
        Some(Self { signer, verifier })
    }

    pub fn verify_only(&self) -> bool {
        self.signer.is_none()
    }

    /// The compact JWS of `claims`.
    pub fn sign<C: Serialize>(&self, claims: &C) -> Result<String, Es512Error> {
        let key = self.signer.as_ref().ok_or(Es512Error::VerifyOnly)?;
        let header = serde_json::to_vec(&NewHeader {
            alg: ALG,
            typ: "JWT",
        })?;
        let mut token = URL_SAFE_NO_PAD.encode(header);
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims)?));
        let signature: Signature = key.sign(token.as_bytes());
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature.to_bytes()));
        Ok(token)
    }

    /// The claims of a token whose header names ES512 and whose signature is this key's.
    /// Claim checks (expiry) are the caller's.
    pub fn verify<C: DeserializeOwned>(&self, token: &str) -> Result<C, Es512Error> {
        let mut parts = token.split('.');
        let (Some(header), Some(claims), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Es512Error::Malformed);
        };
        let decode = |part: &str| {
            // jwt-go accepts segments with or without their `=` padding.
            URL_SAFE_NO_PAD
                .decode(part.trim_end_matches('='))
                .map_err(|_| Es512Error::Malformed)
        };
        let parsed: ParsedHeader = serde_json::from_slice(&decode(header)?)?;
        // etcd's keyfunc refuses any method but its own before looking at the signature.
        if parsed.alg != ALG {
            return Err(Es512Error::WrongAlg(parsed.alg));
        }
        let signature =
            Signature::from_slice(&decode(signature)?).map_err(|_| Es512Error::Signature)?;
        let signed = &token[..header.len() + 1 + claims.len()];
        self.verifier
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| Es512Error::Signature)?;
        Ok(serde_json::from_slice(&decode(claims)?)?)
    }
}

/// The first PEM block's DER bytes and label (Go's pem.Decode takes the first block only).
fn first_block(pem: &[u8]) -> Result<x509_parser::pem::Pem, Es512Error> {
    x509_parser::pem::parse_x509_pem(pem)
        .map(|(_, block)| block)
        .map_err(|e| Es512Error::Pem(e.to_string()))
}

/// A `priv-key` file's signing key.
pub fn signing_key(pem: &[u8]) -> Result<SigningKey, Es512Error> {
    private_key(pem).map(SigningKey::from)
}

/// A `pub-key` file's verifying key.
pub fn verifying_key(pem: &[u8]) -> Result<VerifyingKey, Es512Error> {
    public_key(pem).map(VerifyingKey::from)
}

fn private_key(pem: &[u8]) -> Result<SecretKey, Es512Error> {
    let der = first_block(pem)?.contents;
    SecretKey::from_sec1_der(&der).or_else(|sec1| {
        SecretKey::from_pkcs8_der(&der).map_err(|pkcs8| Es512Error::NotPrivateKey {
            sec1: sec1.to_string(),
            pkcs8: pkcs8.to_string(),
        })
    })
}

fn public_key(pem: &[u8]) -> Result<PublicKey, Es512Error> {
    let block = first_block(pem)?;
    PublicKey::from_public_key_der(&block.contents).or_else(|pkix| {
        let from_cert = block
            .parse_x509()
            .map_err(|e| e.to_string())
            .and_then(|cert| {
                PublicKey::from_public_key_der(cert.public_key().raw).map_err(|e| e.to_string())
            });
        from_cert.map_err(|cert| Es512Error::NotPublicKey {
            pkix: pkix.to_string(),
            cert,
        })
    })
}

#[cfg(test)]
#[path = "jwt_es512_tests.rs"]
mod tests;
