//! Watch over the etcd v3 API: live events, history from a past revision, prev_kv, cancel,
//! progress and the compacted-revision error.

mod common;

use etcd_client::{EventType, WatchOptions, WatchResponse, WatchStream};

async fn next(stream: &mut WatchStream) -> WatchResponse {
    tokio::time::timeout(common::WAIT, stream.message())
        .await
        .expect("watch response in time")
        .expect("watch stream ok")
        .expect("watch stream open")
}

/// Collects events until `n` have arrived.
async fn events(stream: &mut WatchStream, n: usize) -> Vec<(EventType, String, i64)> {
    let mut out = Vec::new();
    while out.len() < n {
        let resp = next(stream).await;
        for ev in resp.events() {
            let kv = ev.kv().unwrap();
            out.push((
                ev.event_type(),
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.mod_revision(),
            ));
        }
    }
    out
}

#[tokio::test]
async fn watch_from_past_revision_then_live() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;
    c.put("/w/a", "1", None).await.unwrap(); // rev 2
    c.put("/w/b", "1", None).await.unwrap(); // rev 3
    c.put("/other", "1", None).await.unwrap(); // rev 4
    c.delete("/w/a", None).await.unwrap(); // rev 5

    let mut stream = c
        .watch(
            "/w/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(2)
                    .with_prev_key(),
            ),
        )
        .await
        .unwrap();
    let created = next(&mut stream).await;
    assert!(created.created());
    let id = created.watch_id();

    let history = events(&mut stream, 3).await;
    assert_eq!(
        history,
        vec![
            (EventType::Put, "/w/a".into(), 2),
            (EventType::Put, "/w/b".into(), 3),
            (EventType::Delete, "/w/a".into(), 5),
        ]
    );

    // Live events after history, without gaps or duplicates.
    c.put("/w/b", "2", None).await.unwrap(); // rev 6
    c.put("/other", "2", None).await.unwrap(); // rev 7, filtered out
    c.put("/w/c", "1", None).await.unwrap(); // rev 8
    let resp = next(&mut stream).await;
    assert_eq!(resp.watch_id(), id);
    let ev = &resp.events()[0];
    assert_eq!(ev.kv().unwrap().mod_revision(), 6);
    assert_eq!(ev.prev_kv().unwrap().value(), b"1", "prev_kv requested");
    let live = events(&mut stream, 1).await;
    assert_eq!(live, vec![(EventType::Put, "/w/c".into(), 8)]);

    stream.cancel(id).await.unwrap();
    let canceled = next(&mut stream).await;
    assert!(canceled.canceled());
    store.shutdown().await;
}

#[tokio::test]
async fn watch_single_key_from_now_and_progress() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;
    c.put("k", "old", None).await.unwrap();
    let mut stream = c.watch("k", None).await.unwrap();
    assert!(next(&mut stream).await.created());
    c.put("k2", "x", None).await.unwrap();
    c.put("k", "new", None).await.unwrap(); // rev 4
    let got = events(&mut stream, 1).await;
    assert_eq!(got, vec![(EventType::Put, "k".into(), 4)]);
    let resp_rev = {
        stream.request_progress().await.unwrap();
        let p = next(&mut stream).await;
        assert!(p.events().is_empty());
        p.header().unwrap().revision()
    };
    assert_eq!(resp_rev, 4);
    store.shutdown().await;
}

#[tokio::test]
async fn watch_below_compaction_reports_compact_revision() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;
    for i in 0..4 {
        c.put("c", format!("{i}"), None).await.unwrap();
    }
    c.compact(4, None).await.unwrap();
    let mut stream = c
        .watch("c", Some(WatchOptions::new().with_start_revision(2)))
        .await
        .unwrap();
    let mut resp = next(&mut stream).await;
    if resp.created() && !resp.canceled() {
        resp = next(&mut stream).await;
    }
    assert!(resp.canceled());
    assert_eq!(resp.compact_revision(), 4);

    // Starting exactly at the compaction revision still works.
    let mut stream = c
        .watch("c", Some(WatchOptions::new().with_start_revision(4)))
        .await
        .unwrap();
    assert!(next(&mut stream).await.created());
    let got = events(&mut stream, 2).await;
    assert_eq!(
        got,
        vec![
            (EventType::Put, "c".into(), 4),
            (EventType::Put, "c".into(), 5)
        ]
    );
    store.shutdown().await;
}

/// The event history names changed keys and reads their versions from the key-value history: a
/// deletion at the compaction revision (its tombstone compacted away, its event kept) still replays.
#[tokio::test]
async fn watch_from_compaction_revision_replays_a_deletion_there() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;
    c.put("d", "v1", None).await.unwrap(); // rev 2
    c.delete("d", None).await.unwrap(); // rev 3
    c.compact(3, None).await.unwrap();
    c.put("d", "v2", None).await.unwrap(); // rev 4
    let mut stream = c
        .watch("d", Some(WatchOptions::new().with_start_revision(3)))
        .await
        .unwrap();
    assert!(next(&mut stream).await.created());
    let mut got = Vec::new();
    while got.len() < 2 {
        let resp = next(&mut stream).await;
        for ev in resp.events() {
            let kv = ev.kv().unwrap();
            got.push((ev.event_type(), kv.mod_revision(), kv.value().to_vec()));
        }
    }
    assert_eq!(
        got,
        vec![
            (EventType::Delete, 3, Vec::new()),
            (EventType::Put, 4, b"v2".to_vec())
        ]
    );
    store.shutdown().await;
}
