//! etcd's auth, compared with the real etcd 3.4: the same etcdctl session (users, roles, prefix
//! permissions, auth enable/disable, wrong passwords, a no-password user) against etcd and against
//! a 3-member kiln-store must print the same; simple tokens expire after --auth-token-ttl on both;
//! auth state survives a member restart.

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

/// A real etcd 3.4 with the given token TTL, its client address, and its process.
async fn start_etcd(dir: &std::path::Path) -> (std::net::SocketAddr, KillOnDrop) {
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
                "--auth-token=simple",
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
    let (etcd_addr, _etcd) = start_etcd(dir.path()).await;
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
    let (etcd_addr, _etcd) = start_etcd(dir.path()).await;
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
