use super::*;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn json_secret(auths: serde_json::Value) -> PullSecret {
    PullSecret {
        type_: TYPE_DOCKER_CONFIG_JSON.into(),
        data: BTreeMap::from([(
            KEY_DOCKER_CONFIG_JSON.to_string(),
            serde_json::to_vec(&serde_json::json!({ "auths": auths })).unwrap(),
        )]),
    }
}

fn users(k: &Keyring, image: &str) -> Vec<String> {
    k.lookup(image).into_iter().map(|c| c.username).collect()
}

#[test]
fn repositories_are_normalized_like_docker_references() {
    for (image, repo) in [
        ("busybox", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox"),
        ("team/app:v1", "docker.io/team/app"),
        ("index.docker.io/team/app", "docker.io/team/app"),
        (
            "10.250.0.1:5001/kiln/busybox:1",
            "10.250.0.1:5001/kiln/busybox",
        ),
        ("localhost/app@sha256:abcd", "localhost/app"),
        ("reg.example.com/a/b:tag@sha256:ff", "reg.example.com/a/b"),
    ] {
        assert_eq!(repository(image), repo, "{image}");
    }
}

#[test]
fn the_most_specific_location_matches_first_and_others_too() {
    let k = Keyring::from_secrets(&[json_secret(serde_json::json!({
        "reg.example.com": {"username": "host", "password": "p1"},
        "https://reg.example.com/team": {"username": "team", "password": "p2"},
        "reg.example.com/team/app": {"username": "app", "password": "p3"},
        "other.example.com": {"username": "other", "password": "p4"},
    }))])
    .unwrap();
    assert_eq!(
        users(&k, "reg.example.com/team/app:1"),
        vec!["app", "team", "host"]
    );
    assert_eq!(users(&k, "reg.example.com/team/web"), vec!["team", "host"]);
    assert_eq!(users(&k, "reg.example.com/solo"), vec!["host"]);
    // Host labels and ports must match exactly.
    assert!(users(&k, "sub.reg.example.com/team/app").is_empty());
    assert!(users(&k, "reg.example.com:5000/team/app").is_empty());
    assert!(users(&k, "busybox").is_empty());
}

#[test]
fn ports_wildcards_and_docker_hub() {
    let k = Keyring::from_secrets(&[json_secret(serde_json::json!({
        "10.250.0.1:5001": {"auth": b64("lab:secret")},
        "*.corp.example": {"username": "wild", "password": "w"},
        "https://index.docker.io/v1/": {"username": "hub", "password": "h"},
    }))])
    .unwrap();
    let c = k.lookup("10.250.0.1:5001/kiln/private:1");
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].username.as_str(), c[0].password.as_str()),
        ("lab", "secret"),
        "auth decodes to user:password"
    );
    let auth = c[0].auth_config();
    assert_eq!(
        (auth.username.as_str(), auth.password.as_str()),
        ("lab", "secret")
    );
    assert!(users(&k, "10.250.0.1:5000/kiln/busybox:1").is_empty());
    assert!(users(&k, "10.250.0.1/kiln/busybox:1").is_empty());
    assert_eq!(users(&k, "reg.corp.example/app"), vec!["wild"]);
    assert!(
        users(&k, "a.b.corp.example/app").is_empty(),
        "* is one label"
    );
    // Docker Hub images: by `docker.io`, or through the index.docker.io fallback.
    assert_eq!(users(&k, "busybox:1"), vec!["hub"]);
    assert_eq!(users(&k, "docker.io/team/app"), vec!["hub"]);
}

#[test]
fn secret_types_keys_and_formats() {
    // dockercfg: the entries at the top level; several secrets add up, in order.
    let cfg = PullSecret {
        type_: TYPE_DOCKERCFG.into(),
        data: BTreeMap::from([(
            KEY_DOCKERCFG.to_string(),
            br#"{"reg.example.com": {"auth": "dTE6cDE"}}"#.to_vec(),
        )]),
    };
    let json =
        json_secret(serde_json::json!({"reg.example.com": {"username": "u2", "password": "p2"}}));
    let k = Keyring::from_secrets(&[cfg, json]).unwrap();
    let c = k.lookup("reg.example.com/app");
    assert_eq!(
        c.iter()
            .map(|c| (c.username.as_str(), c.password.as_str()))
            .collect::<Vec<_>>(),
        vec![("u1", "p1"), ("u2", "p2")],
        "unpadded auth decodes too"
    );
    // A secret of another type, or without the key its type needs, adds nothing.
    let mut opaque = json_secret(serde_json::json!({"reg.example.com": {"username": "x"}}));
    opaque.type_ = "Opaque".into();
    let mut wrong_key = json_secret(serde_json::json!({}));
    wrong_key.type_ = TYPE_DOCKERCFG.into();
    let k = Keyring::from_secrets(&[opaque, wrong_key]).unwrap();
    assert!(k.is_empty());
    // Bad content fails the keyring (the pull fails with it).
    let mut bad = json_secret(serde_json::json!({}));
    bad.data
        .insert(KEY_DOCKER_CONFIG_JSON.into(), b"{not json".to_vec());
    assert!(matches!(
        Keyring::from_secrets(&[bad]),
        Err(KeyringError::Json(_))
    ));
    let no_colon = json_secret(serde_json::json!({"r.io": {"auth": b64("nocolon")}}));
    assert_eq!(
        Keyring::from_secrets(&[no_colon]).unwrap_err().to_string(),
        "must be formatted as base64(username:password)"
    );
}

#[test]
fn debug_output_never_shows_passwords() {
    let k = Keyring::from_secrets(&[json_secret(
        serde_json::json!({"r.io": {"username": "u", "password": "hunter2"}}),
    )])
    .unwrap();
    assert!(!format!("{k:?}").contains("hunter2"));
    let s = json_secret(serde_json::json!({"r.io": {"username": "u", "password": "hunter2"}}));
    assert!(!format!("{s:?}").contains("hunter2"));
}
