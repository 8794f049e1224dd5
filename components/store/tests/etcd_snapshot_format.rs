//! Snapshots in etcd's own format, both ways, against the real etcd 3.4 tools (/usr/bin/etcd,
//! /usr/bin/etcdctl from Debian's etcd-server and etcd-client):
//! - kiln-store's Maintenance.Snapshot, saved with `etcdctl snapshot save`, reads with `etcdctl snapshot
//!   status` (the same hash, revision and key count `kiln-store snapshot status` computes), restores with
//!   `etcdctl snapshot restore`, and a real etcd started on it serves every key at the same revisions and
//!   versions, with the lease;
//! - a real etcd's snapshot restores with `kiln-store snapshot restore`, and kiln-store serves every key
//!   at the same revisions, with the lease, and goes on from the same revision.
//!
//! kiln-store runs as a 3-member cluster (the snapshot is taken from a follower); the real etcd as one
//! member.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{stdout, KillOnDrop};
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

fn have_etcd() -> bool {
    Path::new(common::ETCD).exists() && Path::new(common::ETCDCTL).exists()
}

fn run(program: &str, args: &[String]) -> std::process::Output {
    let child = Command::new(program)
        .env("ETCDCTL_API", "3")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_output(KillOnDrop(child), Duration::from_secs(60))
}

/// (key, value, create_revision, mod_revision, version, lease) of every key.
type View = Vec<(Vec<u8>, Vec<u8>, i64, i64, i64, i64)>;

async fn everything(c: &mut Client) -> (View, i64) {
    let r = c
        .get(vec![0u8], Some(GetOptions::new().with_from_key()))
        .await
        .unwrap();
    let view = r
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key().to_vec(),
                kv.value().to_vec(),
                kv.create_revision(),
                kv.mod_revision(),
                kv.version(),
                kv.lease(),
            )
        })
        .collect();
    (view, r.header().unwrap().revision())
}

/// Writes of every kind: puts, overwrites, deletes (one of a range), a multi-key transaction, a lease
/// with two keys, a compaction, and writes after it. Returns the lease.
async fn write_history(c: &mut Client) -> i64 {
    for i in 0..300 {
        c.put(format!("/k/{i:03}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    c.put("/k/000", "rewritten", None).await.unwrap();
    c.put("/k/001", vec![0u8; 10_000], None).await.unwrap();
    c.delete("/k/299", None).await.unwrap();
    c.delete(
        "/k/28",
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    c.txn(
        Txn::new()
            .when([Compare::version("/k/002", CompareOp::Greater, 0)])
            .and_then([
                TxnOp::put("/t/b", "1", None),
                TxnOp::put("/t/a", "2", None),
                TxnOp::delete("/k/003", None),
            ]),
    )
    .await
    .unwrap();
    let lease = c.lease_grant(900, None).await.unwrap().id();
    for k in ["/leased/1", "/leased/2"] {
        c.put(k, "x", Some(PutOptions::new().with_lease(lease)))
            .await
            .unwrap();
    }
    let compact_at = c.put("/k/004", "v2", None).await.unwrap();
    let compact_at = compact_at.header().unwrap().revision();
    c.compact(compact_at, None).await.unwrap();
    c.put("/k/004", "v3", None).await.unwrap();
    c.delete("/k/005", None).await.unwrap();
    c.put("/after", "compaction", None).await.unwrap();
    lease
}

async fn start_etcd(data_dir: &Path, name: &str) -> (KillOnDrop, SocketAddr, String) {
    let client_port = common::free_port();
    let peer = format!("http://127.0.0.1:{}", common::free_port());
    let client_url = format!("http://127.0.0.1:{client_port}");
    let etcd = KillOnDrop(
        Command::new(common::ETCD)
            .args([
                format!("--name={name}"),
                format!("--data-dir={}", data_dir.display()),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster={name}={peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = format!("127.0.0.1:{client_port}").parse().unwrap();
    common::wait_port(addr).await;
    (etcd, addr, peer)
}

async fn ready(addr: SocketAddr) -> Client {
    let mut c = common::client(addr).await;
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while c.get("missing", None).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd never became ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c
}

fn save(endpoint: SocketAddr, file: &Path) {
    let out = run(
        common::ETCDCTL,
        &[
            format!("--endpoints=http://{endpoint}"),
            "snapshot".into(),
            "save".into(),
            file.display().to_string(),
        ],
    );
    stdout(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_store_snapshot_is_read_and_restored_by_etcd() {
    if !have_etcd() {
        eprintln!(
            "skipping: {} or {} not installed",
            common::ETCD,
            common::ETCDCTL
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = common::cluster::Cluster::new(3, |_| {});
    cluster.start_all().await;
    let leader = cluster.leader().await;
    let mut c = cluster.client(leader).await;
    let lease = write_history(&mut c).await;
    let (before, revision) = everything(&mut c).await;
    assert!(before.iter().any(|kv| kv.5 == lease));

    // From a follower: every member's state machine is the same, so is its snapshot.
    let follower = (leader + 1) % 3;
    cluster.wait_revision(follower, revision).await;
    let file = dir.path().join("kiln.db");
    save(cluster.members[follower].handle().client_addr(), &file);
    cluster.shutdown().await;

    // etcdctl reads it, and agrees with kiln-store's own status of it.
    let status = run(
        common::ETCDCTL,
        &[
            "snapshot".into(),
            "status".into(),
            file.display().to_string(),
            "-w".into(),
            "json".into(),
        ],
    );
    let etcd_status: serde_json::Value = serde_json::from_str(stdout(&status).trim()).unwrap();
    assert_eq!(etcd_status["revision"], revision, "{etcd_status}");
    let ours = run(
        env!("CARGO_BIN_EXE_kiln-store"),
        &[
            "snapshot".into(),
            "status".into(),
            file.display().to_string(),
            "-w".into(),
            "json".into(),
        ],
    );
    let ours: serde_json::Value = serde_json::from_str(stdout(&ours).trim()).unwrap();
    for field in ["hash", "revision", "totalKey", "totalSize"] {
        assert_eq!(
            ours[field], etcd_status[field],
            "{field}: {ours} vs {etcd_status}"
        );
    }
    // Every version since the compaction, one per key before it, and the other buckets' entries.
    assert!(etcd_status["totalKey"].as_u64().unwrap() > before.len() as u64);

    // etcdctl restores it and a real etcd serves it.
    let restored = dir.path().join("etcd-restored");
    let peer = format!("http://127.0.0.1:{}", common::free_port());
    let out = run(
        common::ETCDCTL,
        &[
            "snapshot".into(),
            "restore".into(),
            file.display().to_string(),
            format!("--data-dir={}", restored.display()),
            "--name=r".into(),
            format!("--initial-cluster=r={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
        ],
    );
    stdout(&out);
    let (_etcd, addr, _) = start_etcd(&restored, "r").await;
    let mut e = ready(addr).await;
    let (after, etcd_revision) = everything(&mut e).await;
    assert_eq!(
        after, before,
        "every key, value, revision, version and lease"
    );
    assert_eq!(etcd_revision, revision);
    let ttl = e
        .lease_time_to_live(
            lease,
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .unwrap();
    assert!(ttl.ttl() > 0, "the lease exists in etcd");
    let mut attached: Vec<_> = ttl.keys().to_vec();
    attached.sort();
    assert_eq!(attached, vec![b"/leased/1".to_vec(), b"/leased/2".to_vec()]);
    // History after the compaction came along; before it, etcd reports it compacted.
    let old = e
        .get(
            "/k/004",
            Some(GetOptions::new().with_revision(revision - 3)),
        )
        .await
        .unwrap();
    assert_eq!(old.kvs()[0].value(), b"v2");
    let compacted = e
        .get("/k/004", Some(GetOptions::new().with_revision(2)))
        .await
        .unwrap_err();
    assert!(compacted.to_string().contains("compacted"), "{compacted}");
    let put = e.put("/new", "y", None).await.unwrap();
    assert_eq!(put.header().unwrap().revision(), revision + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_snapshot_restores_into_kiln_store() {
    if !have_etcd() {
        eprintln!(
            "skipping: {} or {} not installed",
            common::ETCD,
            common::ETCDCTL
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (etcd, addr, _) = start_etcd(&dir.path().join("etcd"), "src").await;
    let mut e = ready(addr).await;
    let lease = write_history(&mut e).await;
    let (before, revision) = everything(&mut e).await;
    let file = dir.path().join("etcd.db");
    save(addr, &file);
    drop(etcd);

    let ours = run(
        env!("CARGO_BIN_EXE_kiln-store"),
        &[
            "snapshot".into(),
            "status".into(),
            file.display().to_string(),
            "-w".into(),
            "json".into(),
        ],
    );
    let etcd_status = run(
        common::ETCDCTL,
        &[
            "snapshot".into(),
            "status".into(),
            file.display().to_string(),
            "-w".into(),
            "json".into(),
        ],
    );
    let ours: serde_json::Value = serde_json::from_str(stdout(&ours).trim()).unwrap();
    let theirs: serde_json::Value = serde_json::from_str(stdout(&etcd_status).trim()).unwrap();
    assert_eq!(ours, theirs, "kiln-store's status of a real etcd snapshot");

    let port = common::free_port();
    let peer = format!("http://127.0.0.1:{port}");
    let data = dir.path().join("kiln-restored");
    let out = run(
        env!("CARGO_BIN_EXE_kiln-store"),
        &[
            "snapshot".into(),
            "restore".into(),
            file.display().to_string(),
            format!("--data-dir={}", data.display()),
            "--name=restored".into(),
            format!("--initial-cluster=restored={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
        ],
    );
    assert!(stdout(&out).contains("restored snapshot"));
    let mut config = common::config(&data);
    config.name = "restored".into();
    config.initial_cluster = Some(format!("restored={peer}"));
    config.initial_advertise_peer_urls = vec![peer.clone()];
    config.listen_peer_urls = vec![peer.clone()];
    let store = common::start_with(config).await;
    let mut c = common::client(store.client_addr()).await;
    let (after, kiln_revision) = everything(&mut c).await;
    assert_eq!(
        after, before,
        "every key, value, revision, version and lease"
    );
    assert_eq!(kiln_revision, revision);
    let ttl = c
        .lease_time_to_live(
            lease,
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .unwrap();
    assert!(ttl.ttl() > 0, "the lease exists in kiln-store");
    let mut attached: Vec<_> = ttl.keys().to_vec();
    attached.sort();
    assert_eq!(attached, vec![b"/leased/1".to_vec(), b"/leased/2".to_vec()]);
    let old = c
        .get(
            "/k/004",
            Some(GetOptions::new().with_revision(revision - 3)),
        )
        .await
        .unwrap();
    assert_eq!(old.kvs()[0].value(), b"v2");
    let put = c.put("/new", "y", None).await.unwrap();
    assert_eq!(put.header().unwrap().revision(), revision + 1);
    store.shutdown().await;
}
