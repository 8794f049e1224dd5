//! The real etcdctl (API v3) against kiln-store: in-process for the KV/watch/lease commands,
//! and the kiln-store binary for endpoint status/health, member list and /health.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use base64::Engine as _;
use common::{etcdctl, stdout, KillOnDrop};

fn have_etcdctl() -> bool {
    std::path::Path::new(common::ETCDCTL).exists()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_kv_txn_watch_lease() {
    if !have_etcdctl() {
        eprintln!("skipping: {} not installed", common::ETCDCTL);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let ep = store.client_addr().to_string();
    let run = move |args: &'static [&'static str], stdin: Option<&'static str>| {
        let ep = ep.clone();
        tokio::task::spawn_blocking(move || etcdctl(&ep, &[], args, stdin))
    };

    assert_eq!(
        stdout(&run(&["put", "/e/a", "1"], None).await.unwrap()).trim(),
        "OK"
    );
    assert_eq!(
        stdout(&run(&["put", "/e/b", "2"], None).await.unwrap()).trim(),
        "OK"
    );
    assert_eq!(
        stdout(&run(&["put", "/f", "3"], None).await.unwrap()).trim(),
        "OK"
    );
    let got = stdout(&run(&["get", "--prefix", "/e/"], None).await.unwrap());
    assert_eq!(got, "/e/a\n1\n/e/b\n2\n");

    let json: serde_json::Value = serde_json::from_str(&stdout(
        &run(&["get", "/e/a", "-w", "json"], None).await.unwrap(),
    ))
    .unwrap();
    assert_eq!(json["header"]["revision"], 4);
    assert_eq!(json["kvs"][0]["key"], b64("/e/a"));
    assert_eq!(json["kvs"][0]["create_revision"], 2);
    assert_eq!(json["kvs"][0]["version"], 1);

    let old = stdout(&run(&["get", "/e/a", "--rev=1"], None).await.unwrap());
    assert_eq!(old, "", "key did not exist at revision 1");

    let txn = "value(\"/e/a\") = \"1\"\n\nput /e/a 10\n\nget /e/a\n\n";
    let out = stdout(&run(&["txn"], Some(txn)).await.unwrap());
    assert!(out.starts_with("SUCCESS"), "{out}");
    let out = stdout(&run(&["txn"], Some(txn)).await.unwrap());
    assert!(
        out.starts_with("FAILURE") && out.contains("/e/a\n10"),
        "{out}"
    );

    assert_eq!(
        stdout(&run(&["del", "/e/b"], None).await.unwrap()).trim(),
        "1"
    );
    let left = stdout(
        &run(&["get", "--prefix", "/e/", "-w", "json"], None)
            .await
            .unwrap(),
    );
    let left: serde_json::Value = serde_json::from_str(&left).unwrap();
    assert_eq!(left["count"], 1);

    // Watch from an old revision replays history in order.
    let mut child = KillOnDrop(
        Command::new(common::ETCDCTL)
            .env("ETCDCTL_API", "3")
            .args([
                &format!("--endpoints={}", store.client_addr()),
                "watch",
                "--prefix",
                "/e/",
                "--rev=2",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pipe = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let expected = [
        "PUT", "/e/a", "1", "PUT", "/e/b", "2", "PUT", "/e/a", "10", "DELETE", "/e/b",
    ];
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        while lines.len() < expected.len() {
            match rx.recv_timeout(common::WAIT) {
                Ok(l) => lines.push(l),
                Err(_) => break,
            }
        }
        lines
    })
    .await
    .unwrap();
    assert_eq!(lines, expected);
    drop(child);

    let lease = stdout(&run(&["lease", "grant", "100"], None).await.unwrap());
    // "lease 694d77aa9e38260f granted with TTL(100s)"
    let id = lease.split_whitespace().nth(1).unwrap().to_string();
    assert!(lease.contains("TTL(100s)"), "{lease}");
    let ep = store.client_addr().to_string();
    let id2 = id.clone();
    let out = tokio::task::spawn_blocking(move || {
        etcdctl(&ep, &[], &["put", "--lease", &id2, "/leased", "v"], None)
    })
    .await
    .unwrap();
    stdout(&out);
    let ep = store.client_addr().to_string();
    let out =
        tokio::task::spawn_blocking(move || etcdctl(&ep, &[], &["lease", "revoke", &id], None))
            .await
            .unwrap();
    assert!(stdout(&out).contains("revoked"));
    assert_eq!(stdout(&run(&["get", "/leased"], None).await.unwrap()), "");

    let compacted = stdout(&run(&["compaction", "3"], None).await.unwrap());
    assert!(compacted.contains("compacted revision 3"), "{compacted}");

    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_etcdctl_status_members_and_health() {
    if !have_etcdctl() {
        eprintln!("skipping: {} not installed", common::ETCDCTL);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let client_port = common::free_port();
    let metrics_port = common::free_port();
    let client_url = format!("http://127.0.0.1:{client_port}");
    let start = |dir: &std::path::Path| {
        KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_kiln-store"))
                .args([
                    "--name=cp1",
                    &format!("--data-dir={}", dir.display()),
                    &format!("--listen-client-urls={client_url}"),
                    &format!("--advertise-client-urls={client_url}"),
                    "--listen-peer-urls=http://127.0.0.1:0",
                    "--initial-advertise-peer-urls=http://127.0.0.1:12380",
                    "--initial-cluster=cp1=http://127.0.0.1:12380",
                    "--initial-cluster-state=new",
                    &format!("--listen-metrics-urls=http://127.0.0.1:{metrics_port}"),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mut child = start(dir.path());
    let addr: std::net::SocketAddr = format!("127.0.0.1:{client_port}").parse().unwrap();
    common::wait_port(addr).await;
    let ep = addr.to_string();

    let ep2 = ep.clone();
    let out = tokio::task::spawn_blocking(move || etcdctl(&ep2, &[], &["put", "x", "1"], None))
        .await
        .unwrap();
    stdout(&out);

    let ep2 = ep.clone();
    let status = tokio::task::spawn_blocking(move || {
        etcdctl(&ep2, &[], &["endpoint", "status", "-w", "json"], None)
    })
    .await
    .unwrap();
    let status: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    let s = &status[0]["Status"];
    assert_eq!(s["leader"], s["header"]["member_id"], "{status}");
    assert!(s["raftIndex"].as_u64().unwrap() >= 2, "{status}");
    assert!(s["raftTerm"].as_u64().unwrap() >= 1, "{status}");
    assert!(s["dbSize"].as_u64().unwrap() > 0, "{status}");

    let ep2 = ep.clone();
    let health =
        tokio::task::spawn_blocking(move || etcdctl(&ep2, &[], &["endpoint", "health"], None))
            .await
            .unwrap();
    // etcdctl 3.4 prints the health line on stderr.
    stdout(&health);
    assert!(
        String::from_utf8_lossy(&health.stderr).contains("is healthy"),
        "{health:?}"
    );

    let ep2 = ep.clone();
    let members =
        tokio::task::spawn_blocking(move || etcdctl(&ep2, &[], &["member", "list"], None))
            .await
            .unwrap();
    let members = stdout(&members);
    assert!(
        members.contains(", started, cp1, http://127.0.0.1:12380, ")
            && members.contains(&client_url),
        "{members}"
    );

    let body = http_get(&format!("127.0.0.1:{metrics_port}"), "/health").await;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains(r#"{"health":"true""#), "{body}");
    let metrics = http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics").await;
    assert!(metrics.contains("etcd_server_has_leader 1"), "{metrics}");

    // SIGTERM, restart on the same data dir: the key is still there.
    nix_term(&child);
    let exited = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + common::WAIT;
        loop {
            if let Ok(Some(status)) = child.0.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    assert!(exited.expect("exits on SIGTERM").success());
    let _child = start(dir.path());
    common::wait_port(addr).await;
    let ep2 = ep.clone();
    let got = tokio::task::spawn_blocking(move || etcdctl(&ep2, &[], &["get", "x"], None))
        .await
        .unwrap();
    assert_eq!(stdout(&got), "x\n1\n");
}

fn nix_term(child: &KillOnDrop) {
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(common::WAIT, tokio::net::TcpStream::connect(addr))
        .await
        .unwrap()
        .unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(common::WAIT, s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}
