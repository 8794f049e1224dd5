//! `etcdctl snapshot save` against kiln-store, `kiln-store snapshot status|restore`, and the
//! NOSPACE alarm of --quota-backend-bytes.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{etcdctl_async, stdout, KillOnDrop};
use etcd_client::{CompactionOptions, GetOptions};

fn have_etcdctl() -> bool {
    std::path::Path::new(common::ETCDCTL).exists()
}

fn kiln_store(args: &[&str]) -> std::process::Output {
    let child = Command::new(env!("CARGO_BIN_EXE_kiln-store"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_output(KillOnDrop(child), Duration::from_secs(30))
}

fn s(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_snapshot_save_then_restore_into_a_new_cluster() {
    if !have_etcdctl() {
        eprintln!("skipping: {} not installed", common::ETCDCTL);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(&dir.path().join("orig")).await;
    let mut c = common::client(store.client_addr()).await;
    for i in 0..200 {
        c.put(format!("/snap/{i:03}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    c.put("/snap/000", "rewritten", None).await.unwrap();
    c.delete("/snap/199", None).await.unwrap();
    let lease = c.lease_grant(600, None).await.unwrap().id();
    c.put(
        "/leased",
        "x",
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .unwrap();
    let before = c
        .get("/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();

    let file = dir.path().join("backup.db");
    let out = etcdctl_async(
        store.client_addr().to_string(),
        vec![],
        vec!["snapshot".into(), "save".into(), file.display().to_string()],
    )
    .await;
    assert!(
        s(&out.stdout).contains("Snapshot saved") || s(&out.stderr).contains("Snapshot saved"),
        "{}{}",
        s(&out.stdout),
        s(&out.stderr)
    );
    let orig_cluster = store.cluster_id();
    store.shutdown().await;

    let status = kiln_store(&["snapshot", "status", file.to_str().unwrap(), "-w", "json"]);
    let status: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert_eq!(status["revision"], before.header().unwrap().revision());

    // Restore as a new single-member cluster.
    let port = common::free_port();
    let peer = format!("http://127.0.0.1:{port}");
    let data = dir.path().join("restored");
    let restore_args = [
        "snapshot".to_string(),
        "restore".into(),
        file.display().to_string(),
        format!("--data-dir={}", data.display()),
        "--name=restored".into(),
        format!("--initial-cluster=restored={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
    ];
    let args: Vec<&str> = restore_args.iter().map(String::as_str).collect();
    let out = kiln_store(&args);
    assert!(stdout(&out).contains("restored snapshot"));
    // Restoring over existing data is refused.
    let again = kiln_store(&args);
    assert!(!again.status.success());
    assert!(
        s(&again.stderr).contains("already exists"),
        "{}",
        s(&again.stderr)
    );

    let mut config = common::config(&data);
    config.name = "restored".into();
    config.initial_cluster = Some(format!("restored={peer}"));
    config.initial_advertise_peer_urls = vec![peer.clone()];
    config.listen_peer_urls = vec![peer.clone()];
    let restored = common::start_with(config).await;
    assert_ne!(restored.cluster_id(), orig_cluster, "a new cluster ID");
    let mut rc = common::client(restored.client_addr()).await;
    let after = rc
        .get("/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let view = |r: &etcd_client::GetResponse| -> Vec<_> {
        r.kvs()
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
            .collect()
    };
    assert_eq!(
        view(&after),
        view(&before),
        "identical keys, values, revisions"
    );
    assert_eq!(
        after.header().unwrap().revision(),
        before.header().unwrap().revision()
    );
    let leases = rc.leases().await.unwrap();
    assert_eq!(leases.leases().len(), 1);
    let members = rc.member_list().await.unwrap();
    assert_eq!(members.members().len(), 1);
    assert_eq!(members.members()[0].name(), "restored");
    // History came along too, and writing continues from the restored revision.
    let old = rc
        .get("/snap/000", Some(GetOptions::new().with_revision(2)))
        .await
        .unwrap();
    assert_eq!(old.kvs()[0].value(), b"value-0");
    let put = rc.put("/new", "y", None).await.unwrap();
    assert_eq!(
        put.header().unwrap().revision(),
        before.header().unwrap().revision() + 1
    );
    restored.shutdown().await;

    // A corrupt or truncated snapshot is refused, and nothing it made is left behind.
    let bytes = std::fs::read(&file).unwrap();
    let mut corrupt = bytes.clone();
    corrupt[100] ^= 0x55;
    let bad = dir.path().join("corrupt.db");
    std::fs::write(&bad, &corrupt).unwrap();
    let short = dir.path().join("short.db");
    std::fs::write(&short, &bytes[..bytes.len() / 2]).unwrap();
    for (f, what) in [(&bad, "checksum"), (&short, "checksum")] {
        let target = dir
            .path()
            .join(format!("from-{what}-{}", f.display().to_string().len()));
        let out = kiln_store(&[
            "snapshot",
            "restore",
            f.to_str().unwrap(),
            &format!("--data-dir={}", target.display()),
        ]);
        assert!(!out.status.success());
        assert!(s(&out.stderr).contains(what), "{}", s(&out.stderr));
        assert!(!target.exists(), "nothing written for a bad snapshot");
    }
    // Into an empty data dir given beforehand: left empty.
    let empty = dir.path().join("given-empty");
    std::fs::create_dir(&empty).unwrap();
    let out = kiln_store(&[
        "snapshot",
        "restore",
        bad.to_str().unwrap(),
        &format!("--data-dir={}", empty.display()),
    ]);
    assert!(!out.status.success());
    assert!(s(&out.stderr).contains("checksum"), "{}", s(&out.stderr));
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_raises_nospace_until_compacted_defragmented_and_disarmed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.quota_backend_bytes = 256 * 1024;
    let store = common::start_with(config).await;
    let mut c = common::client(store.client_addr()).await;
    let value = "v".repeat(4096);
    let mut refused = None;
    for i in 0..1000 {
        if let Err(e) = c.put(format!("/q/{i:04}"), value.clone(), None).await {
            refused = Some((i, e.to_string()));
            break;
        }
    }
    let (accepted, refused) = refused.expect("the quota is enforced");
    assert!(
        accepted >= 10,
        "only {accepted} puts of 4 KiB fit in 256 KiB"
    );
    assert!(
        refused.contains("etcdserver: mvcc: database space exceeded"),
        "{refused}"
    );
    let alarms = c
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(alarms.alarms().len(), 1);
    assert_eq!(alarms.alarms()[0].alarm(), etcd_client::AlarmType::Nospace);
    assert_eq!(alarms.alarms()[0].member_id(), store.member_id());
    // Still refused (the alarm holds), but reads and deletes work.
    assert!(c.put("/q/more", "x", None).await.is_err());
    let status = c.status().await.unwrap();
    assert!(
        status.errors().iter().any(|e| e.contains("NOSPACE")),
        "{:?}",
        status.errors()
    );
    let del = c
        .delete("/q/", Some(etcd_client::DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    assert!(del.deleted() > 0);
    let rev = del.header().unwrap().revision();
    c.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    c.defragment().await.unwrap();
    // Disarm, then writes work again.
    if have_etcdctl() {
        let ep = store.client_addr().to_string();
        let list = etcdctl_async(ep.clone(), vec![], vec!["alarm".into(), "list".into()]).await;
        assert_eq!(
            stdout(&list).trim(),
            format!("memberID:{} alarm:NOSPACE", store.member_id())
        );
        let disarm = etcdctl_async(ep, vec![], vec!["alarm".into(), "disarm".into()]).await;
        assert!(stdout(&disarm).contains("alarm:NOSPACE"));
    } else {
        let mut disarm = etcd_client::AlarmOptions::new();
        disarm.with_member(store.member_id());
        c.alarm(
            etcd_client::AlarmAction::Deactivate,
            etcd_client::AlarmType::Nospace,
            Some(disarm),
        )
        .await
        .unwrap();
    }
    let none = c
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert!(none.alarms().is_empty());
    c.put("/q/after", "small", None)
        .await
        .expect("writes work after compaction, defragment and disarm");
    store.shutdown().await;
}
