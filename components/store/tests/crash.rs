//! Crash safety of acknowledged writes on a single member: concurrent clients write while the
//! kiln-store process is killed (SIGKILL, by PID: no shutdown code runs) at a random moment,
//! then it restarts on the same data directory. Every write a client saw acknowledged must be
//! there with its value, and no write may have been applied twice (each key's modification
//! revision is its own). Several rounds, each killing a member that restarted from the last.
//!
//! A process kill leaves the page cache alone, so this checks what the process does before it
//! acknowledges (the log append is written and synced first, the state machine is rebuilt
//! from the log), not the disk's own flush.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::KillOnDrop;
use etcd_client::{Client, ConnectOptions, GetOptions};

const ROUNDS: usize = 4;
const WRITERS: usize = 8;

struct Ports {
    client: u16,
    peer: u16,
}

fn spawn(data: &Path, ports: &Ports, log: &Path) -> KillOnDrop {
    let client = format!("http://127.0.0.1:{}", ports.client);
    let peer = format!("http://127.0.0.1:{}", ports.peer);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("member log");
    let child = Command::new(env!("CARGO_BIN_EXE_kiln-store"))
        .args([
            "--name=crash".to_string(),
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=crash={peer}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn kiln-store");
    KillOnDrop(child)
}

/// A client once the member answers writes (it has elected itself).
async fn ready_client(port: u16) -> Client {
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(3));
        if let Ok(mut c) = Client::connect([format!("http://127.0.0.1:{port}")], Some(opts)).await {
            if c.put("ready", "1", None).await.is_ok() {
                return c;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "member on port {port} never took a write"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let log = dir.path().join("member.log");
    let ports = Ports {
        client: common::free_port(),
        peer: common::free_port(),
    };
    // key -> value of every acknowledged write, over all rounds.
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    for round in 0..ROUNDS {
        let mut member = spawn(&data, &ports, &log);
        let client = ready_client(ports.client).await;
        check_acknowledged(&client, &acked, round).await;
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let mut c = client.clone();
                let acked = acked.clone();
                tokio::spawn(async move {
                    for i in 0.. {
                        let key = format!("k/{round}/{w}/{i:06}");
                        let value = format!("v{round}-{w}-{i}");
                        if c.put(key.as_str(), value.as_str(), None).await.is_err() {
                            return;
                        }
                        acked.lock().unwrap().insert(key, value);
                    }
                })
            })
            .collect();
        // Kill at a different point of the write stream each round.
        let before = acked.lock().unwrap().len();
        let deadline = tokio::time::Instant::now() + common::WAIT;
        while acked.lock().unwrap().len() < before + 200 + 150 * round {
            assert!(
                tokio::time::Instant::now() < deadline,
                "writes stalled in round {round}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = member.0.kill();
        let _ = member.0.wait();
        for w in writers {
            w.abort();
            let _ = w.await;
        }
        drop(member);
    }
    let member = spawn(&data, &ports, &log);
    let client = ready_client(ports.client).await;
    check_acknowledged(&client, &acked, ROUNDS).await;
    drop(member);
}

/// Every acknowledged write is there with its value, each at a revision of its own.
async fn check_acknowledged(
    client: &Client,
    acked: &Arc<Mutex<BTreeMap<String, String>>>,
    round: usize,
) {
    let expected = acked.lock().unwrap().clone();
    let mut c = client.clone();
    let got = c
        .get("k/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("read back");
    let stored: BTreeMap<String, (String, i64)> = got
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_string(),
                (kv.value_str().unwrap().to_string(), kv.mod_revision()),
            )
        })
        .collect();
    for (key, value) in &expected {
        match stored.get(key) {
            Some((v, _)) => assert_eq!(v, value, "{key} after restart {round}"),
            None => panic!(
                "acknowledged write {key} lost after restart {round} ({} acknowledged, {} stored)",
                expected.len(),
                stored.len()
            ),
        }
    }
    let mut revisions: Vec<i64> = stored.values().map(|(_, r)| *r).collect();
    revisions.sort_unstable();
    let n = revisions.len();
    revisions.dedup();
    assert_eq!(
        revisions.len(),
        n,
        "two keys share a modification revision after restart {round}"
    );
    // Each key was written once: its only version.
    assert!(
        got.kvs().iter().all(|kv| kv.version() == 1),
        "a write was applied twice after restart {round}"
    );
}
