//! Concurrent writers: every write gets its own revision, and a watch sees all of them in
//! order, without gaps or duplicates.

mod common;

use std::collections::BTreeSet;

use etcd_client::WatchOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_get_unique_revisions_and_a_gap_free_watch() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let addr = store.client_addr();
    let mut watcher = common::client(addr).await;
    let mut stream = watcher
        .watch(
            "/c/",
            Some(WatchOptions::new().with_prefix().with_start_revision(2)),
        )
        .await
        .unwrap();

    const WRITERS: usize = 8;
    const PUTS: usize = 40;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        tasks.push(tokio::spawn(async move {
            let mut c = common::client(addr).await;
            let mut revs = Vec::new();
            for i in 0..PUTS {
                let r = c.put(format!("/c/{w}/{i}"), "v", None).await.unwrap();
                revs.push(r.header().unwrap().revision());
            }
            revs
        }));
    }
    let mut all = BTreeSet::new();
    for t in tasks {
        let revs = t.await.unwrap();
        assert!(
            revs.windows(2).all(|w| w[0] < w[1]),
            "one client's writes are ordered"
        );
        all.extend(revs);
    }
    let total = (WRITERS * PUTS) as i64;
    assert_eq!(all.len() as i64, total, "no two writes share a revision");
    assert_eq!(all.iter().next().copied(), Some(2));
    assert_eq!(all.iter().last().copied(), Some(total + 1));

    let mut seen = Vec::new();
    while (seen.len() as i64) < total {
        let resp = tokio::time::timeout(common::WAIT, stream.message())
            .await
            .expect("watch in time")
            .unwrap()
            .unwrap();
        seen.extend(resp.events().iter().map(|e| e.kv().unwrap().mod_revision()));
    }
    let expected: Vec<i64> = (2..=total + 1).collect();
    assert_eq!(seen, expected);
    store.shutdown().await;
}
