//! Option parsing errors (etcd's texts) and tokens signed by one member, verified by another.

use super::*;

fn write(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn tokens(pairs: &[(&str, &str)]) -> Result<JwtTokens, JwtError> {
    JwtTokens::new(&JwtOptions::parse(&opts(pairs))?)
}

fn garbage_path(dir: &tempfile::TempDir) -> String {
    write(dir, "garbage.pem", "not a key")
}

/// A P-521 pair (SEC1 private key, as `openssl ecparam -genkey -noout` writes it): rcgen's
/// ring backend has no P-521.
fn p521_pair() -> (String, String) {
    use p521::elliptic_curve::Generate;
    use p521::pkcs8::{EncodePublicKey, LineEnding};
    let secret = p521::SecretKey::generate();
    let private = secret.to_sec1_pem(LineEnding::LF).unwrap().to_string();
    let public = secret
        .public_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    (private, public)
}

fn ec_pair(alg: &'static rcgen::SignatureAlgorithm) -> (String, String) {
    let kp = rcgen::KeyPair::generate_for(alg).unwrap();
    (kp.serialize_pem(), kp.public_key_pem())
}

#[test]
fn option_errors_carry_etcds_texts() {
    let dir = tempfile::tempdir().unwrap();
    let (private, _) = ec_pair(&rcgen::PKCS_ECDSA_P256_SHA256);
    let priv_path = write(&dir, "k", &private);
    let msg = |pairs: &[(&str, &str)]| tokens(pairs).unwrap_err().to_string();

    assert_eq!(
        msg(&[("priv-key", &priv_path)]),
        "auth: invalid auth options: auth: invalid auth signature method \"\""
    );
    assert_eq!(
        msg(&[("sign-method", "RS1024"), ("priv-key", &priv_path)]),
        "auth: invalid auth options: auth: invalid auth signature method \"RS1024\""
    );
    // A P-256 key is no ES512 key.
    assert!(msg(&[("sign-method", "ES512"), ("priv-key", &priv_path)])
        .starts_with("auth: invalid priv-key for ES512: "));
    assert!(
        msg(&[("sign-method", "ES512"), ("pub-key", &garbage_path(&dir))])
            .starts_with("auth: invalid pub-key for ES512: key must be PEM encoded")
    );
    assert_eq!(msg(&[("sign-method", "ES512")]), "auth: missing key data");
    assert!(msg(&[("sign-method", "ES256"), ("ttl", "5 minutes")])
        .starts_with("auth: invalid auth options: ttl \"5 minutes\""));
    assert!(
        msg(&[("sign-method", "ES256"), ("pub-key", "/nonexistent/k.pub")])
            .starts_with("auth: invalid auth options: reading pub-key \"/nonexistent/k.pub\"")
    );
    assert_eq!(msg(&[("sign-method", "ES256")]), "auth: missing key data");
    // HMAC's secret is the priv-key file; a public key alone is not one.
    assert_eq!(
        msg(&[("sign-method", "HS256"), ("pub-key", &priv_path)]),
        "auth: missing key data"
    );
    let (_, other_public) = ec_pair(&rcgen::PKCS_ECDSA_P256_SHA256);
    let other = write(&dir, "other.pub", &other_public);
    assert_eq!(
        msg(&[
            ("sign-method", "ES256"),
            ("priv-key", &priv_path),
            ("pub-key", &other)
        ]),
        "auth: public and private keys don't match"
    );
    let garbage = write(&dir, "garbage", "not a key");
    assert!(msg(&[("sign-method", "RS256"), ("priv-key", &garbage)])
        .starts_with("auth: invalid priv-key for RS256"));
}

#[test]
fn ttl_defaults_to_five_minutes_and_takes_go_durations() {
    let o = JwtOptions::parse(&opts(&[("sign-method", "HS256")])).unwrap();
    assert_eq!(o.ttl, Duration::from_secs(300));
    let o = JwtOptions::parse(&opts(&[("sign-method", "HS256"), ("ttl", "1m30s")])).unwrap();
    assert_eq!(o.ttl, Duration::from_secs(90));
    assert_eq!(o.method, SignMethod::Lib(Algorithm::HS256));
    let o = JwtOptions::parse(&opts(&[("sign-method", "ES512")])).unwrap();
    assert_eq!(
        (o.method, o.method.to_string()),
        (SignMethod::Es512, "ES512".into())
    );
}

#[test]
fn any_member_with_the_public_key_verifies_and_only_signers_sign() {
    let dir = tempfile::tempdir().unwrap();
    for (alg, method) in [
        (&rcgen::PKCS_ECDSA_P256_SHA256, "ES256"),
        (&rcgen::PKCS_ECDSA_P384_SHA384, "ES384"),
        (&rcgen::PKCS_ED25519, "EdDSA"),
    ] {
        let (private, public) = ec_pair(alg);
        let pk = write(&dir, &format!("{method}.key"), &private);
        let pb = write(&dir, &format!("{method}.pub"), &public);
        // jsonwebtoken derives an Ed25519 public key only from a v1 PKCS#8 key (OpenSSL's);
        // ring's, as rcgen writes it, is v2: that member needs the pub-key too.
        let signer = match method {
            "EdDSA" => tokens(&[("sign-method", method), ("priv-key", &pk), ("pub-key", &pb)]),
            _ => tokens(&[("sign-method", method), ("priv-key", &pk)]),
        }
        .unwrap();
        let both = tokens(&[("sign-method", method), ("priv-key", &pk), ("pub-key", &pb)]).unwrap();
        let verifier = tokens(&[("sign-method", method), ("pub-key", &pb)]).unwrap();
        assert!(verifier.verify_only() && !signer.verify_only());
        assert_eq!(verifier.assign("alice", 3), None);

        let token = signer.assign("alice", 7).unwrap();
        assert_eq!(verifier.verify(&token), Some(("alice".into(), 7)));
        assert_eq!(both.verify(&token), Some(("alice".into(), 7)));
        assert_eq!(signer.verify(&token), Some(("alice".into(), 7)));
        // Tampered: another user's name under the same signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            br#"{"username":"root","revision":7,"exp":99999999999}"#,
        );
        parts[1] = &forged;
        assert_eq!(verifier.verify(&parts.join(".")), None);
    }
}

#[test]
fn expired_and_wrongly_signed_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = write(&dir, "secret", "s3cr3t");
    let other = write(&dir, "other", "another secret");
    let short = tokens(&[
        ("sign-method", "HS256"),
        ("priv-key", &secret),
        ("ttl", "1s"),
    ])
    .unwrap();
    let token = short.assign("bob", 2).unwrap();
    assert_eq!(short.verify(&token), Some(("bob".into(), 2)));
    let stranger = tokens(&[("sign-method", "HS256"), ("priv-key", &other)]).unwrap();
    assert_eq!(stranger.verify(&token), None);
    // Signed with HS256, checked as HS512: etcd refuses a method other than its own.
    let hs512 = tokens(&[("sign-method", "HS512"), ("priv-key", &secret)]).unwrap();
    assert_eq!(hs512.verify(&token), None);
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(short.verify(&token), None);
}

#[test]
fn es512_tokens_verify_on_public_key_members_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = p521_pair();
    let pk = write(&dir, "es512.key", &private);
    let pb = write(&dir, "es512.pub", &public);
    let signer = tokens(&[("sign-method", "ES512"), ("priv-key", &pk), ("ttl", "1s")]).unwrap();
    let both = tokens(&[
        ("sign-method", "ES512"),
        ("priv-key", &pk),
        ("pub-key", &pb),
    ])
    .unwrap();
    let verifier = tokens(&[("sign-method", "ES512"), ("pub-key", &pb)]).unwrap();
    assert!(verifier.verify_only() && !signer.verify_only() && !both.verify_only());
    assert_eq!(verifier.assign("alice", 3), None);

    let token = signer.assign("alice", 7).unwrap();
    assert_eq!(verifier.verify(&token), Some(("alice".into(), 7)));
    assert_eq!(both.verify(&token), Some(("alice".into(), 7)));
    let mut parts: Vec<&str> = token.split('.').collect();
    let forged = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        br#"{"username":"root","revision":7,"exp":99999999999}"#,
    );
    parts[1] = &forged;
    assert_eq!(verifier.verify(&parts.join(".")), None);

    // Keys of two different pairs are refused at start.
    let (_, other_public) = p521_pair();
    let other = write(&dir, "other-es512.pub", &other_public);
    assert_eq!(
        tokens(&[
            ("sign-method", "ES512"),
            ("priv-key", &pk),
            ("pub-key", &other)
        ])
        .unwrap_err()
        .to_string(),
        "auth: public and private keys don't match"
    );
    // An ES512 token is no ES384 one.
    let (p384_private, _) = ec_pair(&rcgen::PKCS_ECDSA_P384_SHA384);
    let es384 = tokens(&[
        ("sign-method", "ES384"),
        ("priv-key", &write(&dir, "p384", &p384_private)),
    ])
    .unwrap();
    assert_eq!(es384.verify(&token), None);
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(verifier.verify(&token), None);
}
