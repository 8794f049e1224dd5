//! ES512 tokens: kiln's verify with the public key alone, tampering is caught, keys are read
//! as golang-jwt reads them, and a token etcd 3.4 signed verifies.

use super::*;
use p521::elliptic_curve::Generate;
use p521::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};

/// A fresh key as SEC1 PEM, PKCS#8 PEM and its PKIX public key PEM.
fn pems() -> (String, String, String) {
    let secret = SecretKey::generate();
    let sec1 = secret.to_sec1_pem(LineEnding::LF).unwrap().to_string();
    let pkcs8 = secret.to_pkcs8_pem(LineEnding::LF).unwrap().to_string();
    let public = secret
        .public_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    (sec1, pkcs8, public)
}

fn b64(part: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(part).unwrap()
}

#[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
struct Claims {
    username: String,
    revision: u64,
}

fn alice() -> Claims {
    Claims {
        username: "alice".into(),
        revision: 7,
    }
}

#[test]
fn signed_tokens_verify_with_the_public_key_alone() {
    let (sec1, pkcs8, public) = pems();
    let verifier = Es512Keys::new(None, Some(verifying_key(public.as_bytes()).unwrap())).unwrap();
    assert!(verifier.verify_only());
    assert!(matches!(
        verifier.sign(&alice()),
        Err(Es512Error::VerifyOnly)
    ));
    for private in [&sec1, &pkcs8] {
        let signer = Es512Keys::new(Some(signing_key(private.as_bytes()).unwrap()), None).unwrap();
        let token = signer.sign(&alice()).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3, "{token}");
        assert_eq!(b64(parts[0]), br#"{"alg":"ES512","typ":"JWT"}"#);
        // JWS ES512: r||s, 66 bytes each.
        assert_eq!(b64(parts[2]).len(), 132);
        assert_eq!(verifier.verify::<Claims>(&token).unwrap(), alice());
        // The signer checks with its own key's public half.
        assert_eq!(signer.verify::<Claims>(&token).unwrap(), alice());
    }
}

#[test]
fn tampered_and_foreign_tokens_are_refused() {
    let (private, _, public) = pems();
    let signer = Es512Keys::new(Some(signing_key(private.as_bytes()).unwrap()), None).unwrap();
    let verifier = Es512Keys::new(None, Some(verifying_key(public.as_bytes()).unwrap())).unwrap();
    let token = signer.sign(&alice()).unwrap();
    let parts: Vec<&str> = token.split('.').collect();

    let forged = URL_SAFE_NO_PAD.encode(br#"{"username":"root","revision":7}"#);
    let claims_swapped = [parts[0], &forged, parts[2]].join(".");
    assert!(matches!(
        verifier.verify::<Claims>(&claims_swapped),
        Err(Es512Error::Signature)
    ));
    let mut sig = b64(parts[2]);
    sig[10] ^= 1;
    let sig_flipped = [parts[0], parts[1], &URL_SAFE_NO_PAD.encode(&sig)].join(".");
    assert!(matches!(
        verifier.verify::<Claims>(&sig_flipped),
        Err(Es512Error::Signature)
    ));
    let short = [parts[0], parts[1], &URL_SAFE_NO_PAD.encode(&sig[..131])].join(".");
    assert!(matches!(
        verifier.verify::<Claims>(&short),
        Err(Es512Error::Signature)
    ));
    // Another method named in the header is refused before the signature is looked at.
    let hs = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS512","typ":"JWT"}"#);
    let other_alg = [&hs, parts[1], parts[2]].join(".");
    assert!(matches!(
        verifier.verify::<Claims>(&other_alg),
        Err(Es512Error::WrongAlg(a)) if a == "HS512"
    ));
    assert!(matches!(
        verifier.verify::<Claims>("a.b"),
        Err(Es512Error::Malformed)
    ));
    // Another key pair's verifier.
    let (_, _, stranger) = pems();
    let stranger = Es512Keys::new(None, Some(verifying_key(stranger.as_bytes()).unwrap())).unwrap();
    assert!(matches!(
        stranger.verify::<Claims>(&token),
        Err(Es512Error::Signature)
    ));
}

#[test]
fn keys_are_read_as_golang_jwt_reads_them() {
    let (sec1, _, public) = pems();
    // `openssl ecparam -genkey` without -noout: the first block is the parameters, which
    // etcd 3.4 fails on too ("asn1: structure error").
    let with_params =
        format!("-----BEGIN EC PARAMETERS-----\nBgUrgQQAIw==\n-----END EC PARAMETERS-----\n{sec1}");
    assert!(matches!(
        signing_key(with_params.as_bytes()),
        Err(Es512Error::NotPrivateKey { .. })
    ));
    // Text before the first block is skipped, as Go's pem.Decode does.
    let commented = format!("a comment\n{sec1}");
    assert!(signing_key(commented.as_bytes()).is_ok());
    assert!(matches!(signing_key(b"not a key"), Err(Es512Error::Pem(_))));
    // A public key is not a private one, nor the reverse.
    assert!(signing_key(public.as_bytes()).is_err());
    assert!(matches!(
        verifying_key(sec1.as_bytes()),
        Err(Es512Error::NotPublicKey { .. })
    ));
    // Another curve is not P-521.
    let p256 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    assert!(signing_key(p256.serialize_pem().as_bytes()).is_err());
    assert!(verifying_key(p256.public_key_pem().as_bytes()).is_err());
}

#[test]
fn a_certificate_names_the_public_key_too() {
    // golang-jwt falls back to a certificate's key; rcgen (ring) cannot make P-521 keys, so
    // the certificate is made by openssl when it is installed.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.pem");
    let cert = dir.path().join("c.pem");
    let (sec1, _, _) = pems();
    std::fs::write(&key, &sec1).unwrap();
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-new", "-x509", "-subj", "/CN=jwt", "-days", "1", "-key",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output();
    let Ok(out) = made else {
        eprintln!("skipping: no openssl");
        return;
    };
    assert!(out.status.success(), "{out:?}");
    let signer = Es512Keys::new(Some(signing_key(sec1.as_bytes()).unwrap()), None).unwrap();
    let from_cert = verifying_key(&std::fs::read(&cert).unwrap()).unwrap();
    let verifier = Es512Keys::new(None, Some(from_cert)).unwrap();
    let token = signer.sign(&alice()).unwrap();
    assert_eq!(verifier.verify::<Claims>(&token).unwrap(), alice());
}

/// The public key and a token etcd 3.4.23 (`--auth-token
/// jwt,…,sign-method=ES512`) handed alice from Authenticate.
const ETCD_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIGbMBAGByqGSM49AgEGBSuBBAAjA4GGAAQBqlZ45VaULUNrlobItGh1OHEP1SBX
lWW0VWE1mBsdTmobkF4ZD47bJeNL9sT/hv43+y7WbNeyt5tS68CV90xHpy8BvMgO
Y66xgOoFfnkhIKIokwvOSB+3551sm9Wq7ESujepm7Jmv5QeQEkXnAnn1RNNLVU4F
2RzGIVTtBFwLALpW+p4=
-----END PUBLIC KEY-----
";
const ETCD_TOKEN: &str = "eyJhbGciOiJFUzUxMiIsInR5cCI6IkpXVCJ9.\
eyJleHAiOjE3OTY2MDk0ODgsInJldmlzaW9uIjo0LCJ1c2VybmFtZSI6ImFsaWNlIn0.\
AZR7zpttA2tTzuz2ew7E_ga3IMz6BjTZOreK3A5noFT1iaPwUsL-9OgoMIp-HrvPmYQstfQVXoVlRHWsDllmTffFAdFt-te17\
AoENfA4TGvS5pMpNuxTNjrJM9NQQzeYZQGxb6pYeg4MJujX49pqNFUHLbL4iio_OaKBHYQGHVpw4Jj5";

#[derive(Debug, PartialEq, serde::Deserialize)]
struct EtcdClaims {
    exp: u64,
    revision: u64,
    username: String,
}

#[test]
fn a_token_etcd_signed_verifies() {
    let verifier = Es512Keys::new(
        None,
        Some(verifying_key(ETCD_PUBLIC_KEY.as_bytes()).unwrap()),
    )
    .unwrap();
    assert_eq!(
        verifier.verify::<EtcdClaims>(ETCD_TOKEN).unwrap(),
        EtcdClaims {
            exp: 1796609488,
            revision: 4,
            username: "alice".into()
        }
    );
    // The same signature over other claims is not etcd's.
    let mut parts: Vec<&str> = ETCD_TOKEN.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(br#"{"exp":1796609488,"revision":5,"username":"alice"}"#);
    parts[1] = &forged;
    assert!(verifier.verify::<EtcdClaims>(&parts.join(".")).is_err());
}
