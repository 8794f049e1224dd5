//! etcd's auth, compared with the real etcd 3.4: the same etcdctl session (users, roles, prefix
//! permissions, auth enable/disable, wrong passwords, a no-password user) against etcd and against
//! a 3-member kiln-store must print the same; simple tokens expire after --auth-token-ttl on both;
//! auth state survives a member restart; JWT tokens (`--auth-token jwt,…`) are signed, verified
//! by a member holding only the public key, refused once the auth store moved on or they
//! expired, like etcd's, with RS256 and ES512 keys, and each side accepts the other's tokens.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::cluster::Cluster;
use common::{etcdctl, KillOnDrop};
use etcd_client::{Client, ConnectOptions, WatchOptions};

/// The token TTL both servers run with (seconds).
const TTL: u64 = 2;

fn have_etcd() -> bool {
    std::path::Path::new(common::ETCD).exists() && std::path::Path::new(common::ETCDCTL).exists()
}

/// The session: each step is etcdctl's arguments (global flags first are fine for etcdctl).
const SESSION: &[&[&str]] = &[
    &["auth", "enable"],
    &["user", "add", "root:rootpw", "--interactive=false"],
    &["role", "add", "reader"],
    &[
        "role",
        "grant-permission",
        "reader",
        "--prefix=true",
        "read",
        "/pub/",
    ],
    &["role", "grant-permission", "reader", "readwrite", "/own"],
    &["role", "add", "reader"],
    &["role", "add", ""],
    &["user", "add", "alice:alicepw", "--interactive=false"],
    &["user", "grant-role", "alice", "reader"],
    &["user", "grant-role", "alice", "missing"],
    &[
        "user",
        "add",
        "carol",
        "--no-password",
        "--interactive=false",
    ],
    &["put", "/pub/a", "0"],
    &["user", "grant-role", "root", "root"],
    &["auth", "enable"],
    // Auth on: no user at all, then root, then a user with a prefix READ grant.
    &["put", "/pub/a", "1"],
    &["get", "/pub/a"],
    &["--user=root:rootpw", "put", "/pub/a", "1"],
    &["--user=root:rootpw", "put", "/other", "x"],
    &["--user=alice:alicepw", "get", "/pub/a"],
    &["--user=alice:alicepw", "get", "/pub/", "--prefix"],
    &["--user=alice:alicepw", "put", "/pub/a", "2"],
    &["--user=alice:alicepw", "del", "/pub/a"],
    &["--user=alice:alicepw", "get", "/other"],
    &["--user=alice:alicepw", "get", "/", "--prefix"],
    &["--user=alice:alicepw", "get", "", "--from-key"],
    &["--user=alice:alicepw", "put", "/own", "mine"],
    &["--user=alice:alicepw", "get", "/own"],
    &["--user=alice:wrong", "get", "/pub/a"],
    &["--user=carol:anything", "get", "/pub/a"],
    &["--user=nobody:x", "get", "/pub/a"],
    &["--user=root:rootpw", "role", "get", "reader"],
    &["--user=root:rootpw", "user", "get", "alice"],
    &["--user=alice:alicepw", "user", "get", "alice"],
    &["--user=alice:alicepw", "role", "get", "reader"],
    &["--user=root:rootpw", "user", "list"],
    &["--user=root:rootpw", "role", "list"],
    &["--user=alice:alicepw", "user", "list"],
    &[
        "--user=alice:alicepw",
        "user",
        "add",
        "mallory:x",
        "--interactive=false",
    ],
    &[
        "--user=root:rootpw",
        "user",
        "add",
        "alice:x",
        "--interactive=false",
    ],
    &["--user=root:rootpw", "user", "get", "missing"],
    &["--user=root:rootpw", "user", "delete", "root"],
    &["--user=root:rootpw", "user", "revoke-role", "root", "root"],
    &["--user=root:rootpw", "role", "delete", "root"],
    &[
        "--user=root:rootpw",
        "role",
        "revoke-permission",
        "reader",
        "/nothing",
    ],
    &["--user=root:rootpw", "user", "revoke-role", "alice", "root"],
    &[
        "--user=root:rootpw",
        "user",
        "passwd",
        "alice",
        "--interactive=false",
    ],
    &["--user=alice:alicepw", "get", "/pub/a"],
    &["--user=alice:newpw", "get", "/pub/a"],
    &[
        "--user=root:rootpw",
        "role",
        "revoke-permission",
        "reader",
        "/pub/",
        "--prefix=true",
    ],
    &["--user=alice:newpw", "get", "/pub/a"],
    &["--user=root:rootpw", "auth", "disable"],
    &["put", "/pub/a", "3"],
    &["get", "/pub/a"],
];

/// Stdin for steps that read a password from it.
fn stdin_for(step: &[&str]) -> Option<&'static str> {
    step.contains(&"passwd").then_some("newpw\n")
}

/// What a user sees: exit status, stdout, and etcdctl's `Error:` lines (clientv3's retry logs
/// carry timestamps and addresses, so they are left out).
fn seen(step: &[&str], out: &Output) -> String {
    let errors: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("Error:"))
        .map(str::to_string)
        .collect();
    format!(
        "$ etcdctl {}\n[{}] {}{}",
        step.join(" "),
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        errors.join("\n")
    )
}

async fn run_session(endpoints: String) -> Vec<String> {
    tokio::task::spawn_blocking(move || {
        SESSION
            .iter()
            .map(|step| seen(step, &etcdctl(&endpoints, &[], step, stdin_for(step))))
            .collect()
    })
    .await
    .unwrap()
}

/// A real etcd 3.4 with the given --auth-token (simple ones live TTL), its client address, and
/// its process.
async fn start_etcd(dir: &std::path::Path, auth_token: &str) -> (std::net::SocketAddr, KillOnDrop) {
    let client_port = common::free_port();
    let peer = format!("http://127.0.0.1:{}", common::free_port());
    let client_url = format!("http://127.0.0.1:{client_port}");
    let child = KillOnDrop(
        Command::new(common::ETCD)
            .args([
                "--name=auth",
                &format!("--data-dir={}", dir.join("etcd").display()),
                &format!("--listen-client-urls={client_url}"),
                &format!("--advertise-client-urls={client_url}"),
                &format!("--listen-peer-urls={peer}"),
                &format!("--initial-advertise-peer-urls={peer}"),
                &format!("--initial-cluster=auth={peer}"),
                &format!("--auth-token={auth_token}"),
                &format!("--auth-token-ttl={TTL}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr = format!("127.0.0.1:{client_port}").parse().unwrap();
    common::wait_port(addr).await;
    let c = common::client(addr).await;
    common::cluster::retry("etcd ready", || {
        let mut c = c.clone();
        async move { c.get("ready", None).await }
    })
    .await;
    (addr, child)
}

fn kiln_cluster() -> Cluster {
    Cluster::new(3, |c| {
        c.auth_token_ttl = TTL;
        // Tests need not pay for etcd's production hash cost.
        c.bcrypt_cost = 4;
    })
}

async fn kiln_endpoints(cluster: &Cluster) -> String {
    cluster.leader().await;
    cluster
        .running()
        .iter()
        .map(|i| cluster.members[*i].handle().client_addr().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_auth_session_matches_etcd_and_survives_a_restart() {
    if !have_etcd() {
        eprintln!("skipping: etcd/etcdctl not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (etcd_addr, _etcd) = start_etcd(dir.path(), "simple").await;
    let expected = run_session(etcd_addr.to_string()).await;

    let mut cluster = kiln_cluster();
    cluster.start_all().await;
    let got = run_session(kiln_endpoints(&cluster).await).await;
    for (e, g) in expected.iter().zip(&got) {
        assert_eq!(g, e, "kiln-store and etcd differ");
    }
    assert_eq!(got.len(), expected.len());
    // The checks above are only worth something if the session really hit auth errors.
    let all = expected.join("\n");
    for text in [
        "etcdserver: user name is empty",
        "etcdserver: permission denied",
        "etcdserver: authentication failed, invalid user ID or password",
        "etcdserver: root user does not exist",
        "etcdserver: user name already exists",
    ] {
        assert!(all.contains(text), "etcd's session never showed {text:?}");
    }

    // Auth on again; a restarted member still knows users, roles and permissions.
    let ep = kiln_endpoints(&cluster).await;
    let out = tokio::task::spawn_blocking(move || {
        etcdctl(&ep, &[], &["--user=root:rootpw", "auth", "enable"], None)
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let last = cluster.members.len() - 1;
    cluster.stop(last).await;
    cluster.start(last).await;
    let ep = cluster.members[last].handle().client_addr().to_string();
    let (read, write) = tokio::task::spawn_blocking(move || {
        (
            etcdctl(&ep, &[], &["--user=root:rootpw", "get", "/pub/a"], None),
            etcdctl(&ep, &[], &["put", "/pub/a", "4"], None),
        )
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&read.stdout), "/pub/a\n3\n");
    assert!(
        String::from_utf8_lossy(&write.stderr).contains("Error: etcdserver: user name is empty"),
        "{write:?}"
    );
    cluster.shutdown().await;
}

/// Everything a long-lived client sees: a watch outside its grant, reads, and its token expiring
/// once unused for longer than the TTL.
async fn token_transcript(addr: std::net::SocketAddr) -> Vec<String> {
    let ep = addr.to_string();
    let setup: &[&[&str]] = &[
        &["user", "add", "root:rootpw", "--interactive=false"],
        &["user", "grant-role", "root", "root"],
        &["role", "add", "reader"],
        &[
            "role",
            "grant-permission",
            "reader",
            "--prefix=true",
            "read",
            "/pub/",
        ],
        &["user", "add", "alice:alicepw", "--interactive=false"],
        &["user", "grant-role", "alice", "reader"],
        &["put", "/pub/a", "1"],
        &["auth", "enable"],
    ];
    tokio::task::spawn_blocking(move || {
        for step in setup {
            let out = etcdctl(&ep, &[], step, None);
            assert!(out.status.success(), "{step:?}: {out:?}");
        }
    })
    .await
    .unwrap();
    let opts = ConnectOptions::new()
        .with_user("alice", "alicepw")
        .with_timeout(Duration::from_secs(10));
    let mut c = Client::connect([format!("http://{addr}")], Some(opts))
        .await
        .expect("alice connects");
    let mut t = Vec::new();
    let r = c.get("/pub/a", None).await.unwrap();
    t.push(format!("get /pub/a: {} kvs", r.kvs().len()));
    match c
        .watch("/other", Some(WatchOptions::new().with_prefix()))
        .await
    {
        Ok(mut stream) => {
            let w = stream.message().await.unwrap().unwrap();
            t.push(format!(
                "watch /other: created={} canceled={} reason={:?}",
                w.created(),
                w.canceled(),
                w.cancel_reason()
            ));
        }
        Err(e) => t.push(format!("watch /other: {e}")),
    }
    // Unused for longer than the TTL, the token is gone; every successful read restarts the
    // TTL, so wait longer each round until the server lets it go.
    let mut pause = Duration::from_secs(TTL + 1);
    let deadline = tokio::time::Instant::now() + common::WAIT * 3;
    loop {
        tokio::time::sleep(pause).await;
        match c.get("/pub/a", None).await {
            Err(etcd_client::Error::GRpcStatus(s)) => {
                t.push(format!("after the TTL: {:?} {}", s.code(), s.message()));
                break;
            }
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "token never expired: {other:?}"
                );
                pause *= 2;
            }
        }
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_tokens_expire_after_their_ttl_like_etcds() {
    if !have_etcd() {
        eprintln!("skipping: etcd/etcdctl not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (etcd_addr, _etcd) = start_etcd(dir.path(), "simple").await;
    let expected = token_transcript(etcd_addr).await;
    eprintln!("etcd: {expected:#?}");
    assert!(expected.last().unwrap().contains("invalid auth token"));

    let mut config = common::config(&dir.path().join("kiln"));
    config.auth_token_ttl = TTL;
    config.bcrypt_cost = 4;
    let store = common::start_with(config).await;
    let got = token_transcript(store.client_addr()).await;
    assert_eq!(got, expected);
    store.shutdown().await;
}

/// An RSA key pair from openssl (PKCS#8 private key, SPKI public key), as etcd's docs make them.
fn rsa_keys(dir: &std::path::Path) -> (String, String) {
    let key = dir.join("jwt.key");
    let public = dir.join("jwt.pub");
    for args in [
        vec!["genrsa", "-out", key.to_str().unwrap(), "2048"],
        vec![
            "rsa",
            "-in",
            key.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ],
    ] {
        let out = Command::new("openssl").args(&args).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    }
    (key.display().to_string(), public.display().to_string())
}

/// One unary etcd call with an explicit token (clients hide theirs).
async fn call<Req, Resp>(
    addr: std::net::SocketAddr,
    path: &'static str,
    req: Req,
    token: Option<&str>,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut request = tonic::Request::new(req);
    if let Some(t) = token {
        request
            .metadata_mut()
            .insert("token", t.parse().expect("ASCII token"));
    }
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary(request, path, codec)
        .await
        .map(|r| r.into_inner())
}

async fn authenticate(addr: std::net::SocketAddr) -> Result<String, tonic::Status> {
    let req = etcd_client::proto::PbAuthenticateRequest {
        name: "alice".into(),
        password: "alicepw".into(),
    };
    call::<_, etcd_client::proto::PbAuthenticateResponse>(
        addr,
        "/etcdserverpb.Auth/Authenticate",
        req,
        None,
    )
    .await
    .map(|r| r.token)
}

async fn get(addr: std::net::SocketAddr, token: &str, key: &str) -> String {
    let req = etcd_client::proto::PbRangeRequest {
        key: key.as_bytes().to_vec(),
        ..Default::default()
    };
    match call::<_, etcd_client::proto::PbRangeResponse>(
        addr,
        "/etcdserverpb.KV/Range",
        req,
        Some(token),
    )
    .await
    {
        Ok(r) => format!("get {key}: {} kvs", r.kvs.len()),
        Err(s) => format!("get {key}: {:?} {}", s.code(), s.message()),
    }
}

/// A JWT's header and claims, less `exp` (a time).
fn claims(token: &str) -> String {
    use base64::Engine;
    let part = |i: usize| -> serde_json::Value {
        let raw = token.split('.').nth(i).expect("a JWT has three parts");
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(raw)
            .expect("base64url");
        serde_json::from_slice(&json).expect("JSON")
    };
    let (header, body) = (part(0), part(1));
    assert!(body["exp"].as_u64().is_some(), "no exp: {body}");
    format!(
        "alg={} username={} revision={}",
        header["alg"], body["username"], body["revision"]
    )
}

/// The JWT token's life: signed by `sign`, checked by `verify` (another member on kiln-store,
/// one with the public key only), stale once the auth store changes, dead after its ttl.
async fn jwt_transcript(
    sign: std::net::SocketAddr,
    verify: std::net::SocketAddr,
    ttl: Duration,
) -> Vec<String> {
    let ep = sign.to_string();
    let setup: &[&[&str]] = &[
        &["user", "add", "root:rootpw", "--interactive=false"],
        &["user", "grant-role", "root", "root"],
        &["role", "add", "reader"],
        &[
            "role",
            "grant-permission",
            "reader",
            "--prefix=true",
            "read",
            "/pub/",
        ],
        &["user", "add", "alice:alicepw", "--interactive=false"],
        &["user", "grant-role", "alice", "reader"],
        &["put", "/pub/a", "1"],
        &["auth", "enable"],
        &["--user=root:rootpw", "get", "/pub/a"],
    ];
    let e = ep.clone();
    tokio::task::spawn_blocking(move || {
        for step in setup {
            let out = etcdctl(&e, &[], step, None);
            assert!(out.status.success(), "{step:?}: {out:?}");
        }
    })
    .await
    .unwrap();
    let mut t = Vec::new();
    let token = authenticate(sign).await.expect("alice signs in");
    t.push(format!("token: {}", claims(&token)));
    // The verifying member may apply the last auth change a moment after the signing one.
    let mut seen = get(verify, &token, "/pub/a").await;
    for _ in 0..20 {
        if seen.ends_with("1 kvs") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = get(verify, &token, "/pub/a").await;
    }
    t.push(format!("elsewhere: {seen}"));
    t.push(get(verify, "not.a.token", "/pub/a").await);
    t.push(get(sign, &token, "/other").await);
    let e = ep.clone();
    let out = tokio::task::spawn_blocking(move || {
        etcdctl(
            &e,
            &[],
            &[
                "--user=root:rootpw",
                "role",
                "grant-permission",
                "reader",
                "read",
                "/x",
            ],
            None,
        )
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    t.push(format!(
        "after an auth change: {}",
        get(sign, &token, "/pub/a").await
    ));
    let fresh = authenticate(sign).await.expect("alice signs in again");
    t.push(format!("fresh token: {}", claims(&fresh)));
    t.push(get(sign, &fresh, "/pub/a").await);
    tokio::time::sleep(ttl + Duration::from_millis(1500)).await;
    t.push(format!(
        "after the ttl: {}",
        get(sign, &fresh, "/pub/a").await
    ));
    t
}

/// A P-521 key pair from openssl, as the etcd docs' `openssl ecparam -name secp521r1 -genkey`
/// but with `-noout`: without it the file starts with an EC PARAMETERS block, on which etcd
/// 3.4 (and so kiln-store) fails at start. The public key is PKIX.
fn es512_keys(dir: &std::path::Path) -> (String, String) {
    let key = dir.join("es512.key");
    let public = dir.join("es512.pub");
    for args in [
        vec![
            "ecparam",
            "-name",
            "secp521r1",
            "-genkey",
            "-noout",
            "-out",
            key.to_str().unwrap(),
        ],
        vec![
            "ec",
            "-in",
            key.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ],
    ] {
        let out = Command::new("openssl").args(&args).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    }
    (key.display().to_string(), public.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_tokens_match_etcds_and_verify_on_a_public_key_only_member() {
    if !have_etcd() {
        eprintln!("skipping: etcd/etcdctl not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = rsa_keys(dir.path());
    jwt_session_matches_etcds(dir.path(), "RS256", &key, &public).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn es512_jwt_tokens_match_etcds() {
    if !have_etcd() {
        eprintln!("skipping: etcd/etcdctl not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = es512_keys(dir.path());
    jwt_session_matches_etcds(dir.path(), "ES512", &key, &public).await;
}

/// etcd 3.4 and a 3-member kiln-store (the last verifying with the public key alone), both on
/// `method` with the same keys: the same transcript, and each accepts the other's tokens.
async fn jwt_session_matches_etcds(dir: &std::path::Path, method: &str, key: &str, public: &str) {
    let ttl = Duration::from_secs(2);
    let flag = format!("jwt,pub-key={public},priv-key={key},sign-method={method},ttl=2s");
    let (etcd_addr, etcd) = start_etcd(dir, &flag).await;
    let expected = jwt_transcript(etcd_addr, etcd_addr, ttl).await;
    eprintln!("etcd: {expected:#?}");
    assert!(
        expected[0].contains(&format!("alg=\"{method}\"")),
        "{expected:?}"
    );
    assert!(expected[1].ends_with("1 kvs"), "{expected:?}");
    assert!(expected
        .iter()
        .any(|l| l.contains("revision of auth store is old")));

    let mut cluster = Cluster::new(3, |c| {
        c.auth_token = flag.clone();
        c.bcrypt_cost = 4;
    });
    // The last member verifies with the public key alone.
    cluster.members[2].config.auth_token =
        format!("jwt,pub-key={public},sign-method={method},ttl=2s");
    cluster.start_all().await;
    cluster.leader().await;
    let addr = |i: usize| cluster.members[i].handle().client_addr();
    let got = jwt_transcript(addr(0), addr(2), ttl).await;
    assert_eq!(got, expected);
    // Both auth stores are now at the same revision: a token either signs is good on the
    // other (the public-key-only member checks etcd's).
    let from_etcd = authenticate(etcd_addr)
        .await
        .expect("alice signs in on etcd");
    assert_eq!(
        get(addr(2), &from_etcd, "/pub/a").await,
        "get /pub/a: 1 kvs"
    );
    let from_kiln = authenticate(addr(0)).await.expect("alice signs in on kiln");
    assert_eq!(
        get(etcd_addr, &from_kiln, "/pub/a").await,
        "get /pub/a: 1 kvs"
    );
    drop(etcd);
    // It cannot sign: etcd's ErrVerifyOnly, unmapped, so code Unknown with the bare text.
    let refused = authenticate(addr(2)).await.unwrap_err();
    assert_eq!(
        (refused.code(), refused.message()),
        (
            tonic::Code::Unknown,
            "auth: token signing attempted with verify-only key"
        )
    );
    cluster.shutdown().await;

    // A key that does not parse stops the member at start, naming the flag.
    let mut config = common::config(&dir.join("bad"));
    config.auth_token = format!("jwt,priv-key={public},sign-method={method}");
    let err = kiln_store::start(config).await.err().expect("refused");
    assert!(
        err.to_string()
            .contains(&format!("auth: invalid priv-key for {method}")),
        "{err}"
    );
}
