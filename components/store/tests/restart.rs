//! Data and revisions survive a restart on the same data dir.

mod common;

use etcd_client::GetOptions;

#[tokio::test]
async fn restart_keeps_data_revision_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let (member, cluster) = {
        let store = common::start(dir.path()).await;
        let mut c = common::client(store.client_addr()).await;
        for i in 0..20 {
            c.put(format!("/r/{i:02}"), format!("v{i}"), None)
                .await
                .unwrap();
        }
        c.put("/r/00", "again", None).await.unwrap();
        c.delete("/r/19", None).await.unwrap();
        assert_eq!(store.revision(), 23);
        let ids = (store.member_id(), store.cluster_id());
        store.shutdown().await;
        ids
    };

    let store = common::start(dir.path()).await;
    assert_eq!((store.member_id(), store.cluster_id()), (member, cluster));
    let mut c = common::client(store.client_addr()).await;
    let all = c
        .get("/r/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(all.count(), 19);
    assert_eq!(all.header().unwrap().revision(), 23);
    let k0 = &all.kvs()[0];
    assert_eq!(
        (
            k0.value(),
            k0.create_revision(),
            k0.mod_revision(),
            k0.version()
        ),
        (&b"again"[..], 2, 22, 2)
    );
    let old = c
        .get("/r/00", Some(GetOptions::new().with_revision(2)))
        .await
        .unwrap();
    assert_eq!(old.kvs()[0].value(), b"v0");
    // Writing continues from the stored revision.
    let p = c.put("/r/new", "x", None).await.unwrap();
    assert_eq!(p.header().unwrap().revision(), 24);
    store.shutdown().await;
}

#[tokio::test]
async fn data_dir_of_another_member_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    store.shutdown().await;
    let mut config = common::config(dir.path());
    config.name = "someone-else".into();
    config.initial_cluster = Some("someone-else=http://127.0.0.1:2380".into());
    let err = kiln_store::start(config).await.err().expect("refused");
    assert!(err.to_string().contains("belongs to member"), "{err}");
}

#[tokio::test]
async fn restart_after_raft_snapshots_and_log_purge() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    // Snapshot (and purge the log) every few entries.
    config.snapshot_count = 5;
    {
        let store = common::start_with(config.clone()).await;
        let mut c = common::client(store.client_addr()).await;
        for i in 0..40 {
            c.put(format!("/s/{i:02}"), "v", None).await.unwrap();
        }
        store.shutdown().await;
    }
    assert!(
        dir.path().join("member/snap/current.snap").exists(),
        "a raft snapshot was built"
    );
    let store = common::start_with(config).await;
    let mut c = common::client(store.client_addr()).await;
    let all = c
        .get("/s/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(all.count(), 40);
    assert_eq!(all.header().unwrap().revision(), 41);
    c.put("/s/after", "v", None).await.unwrap();
    store.shutdown().await;
}

/// `shutdown` returns only once the database is closed: reopening the same data dir right
/// away, again and again, never finds rocksdb's lock still held (the Raft thread used to drop
/// the last handle, and close the database, after `shutdown` had returned).
#[tokio::test]
async fn immediate_restarts_never_see_the_database_lock() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    // Snapshots keep rocksdb and the Raft thread busy right up to the shutdown.
    config.snapshot_count = 3;
    for round in 0..12 {
        let store = tokio::time::timeout(common::WAIT, kiln_store::start(config.clone()))
            .await
            .expect("store starts in time")
            .unwrap_or_else(|e| panic!("restart {round}: {e}"));
        let mut c = common::client(store.client_addr()).await;
        for i in 0..4 {
            c.put(format!("/l/{round:02}/{i}"), "v", None)
                .await
                .unwrap();
        }
        drop(c);
        store.shutdown().await;
    }
    let store = common::start_with(config).await;
    let mut c = common::client(store.client_addr()).await;
    let all = c
        .get("/l/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(all.count(), 48);
    store.shutdown().await;
}
