//! The etcd v3 KV and Lease API of an in-process kiln-store, driven by the etcd-client crate.

mod common;

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};

#[tokio::test]
async fn put_get_revisions_follow_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;

    // A fresh etcd is at revision 1; every write bumps it by one.
    let r0 = c.get("nothing", None).await.unwrap();
    assert_eq!(r0.header().unwrap().revision(), 1);
    assert_eq!(r0.count(), 0);

    let p1 = c.put("/registry/pods/a", "v1", None).await.unwrap();
    assert_eq!(p1.header().unwrap().revision(), 2);
    let p2 = c
        .put(
            "/registry/pods/a",
            "v2",
            Some(PutOptions::new().with_prev_key()),
        )
        .await
        .unwrap();
    assert_eq!(p2.header().unwrap().revision(), 3);
    let prev = p2.prev_key().expect("prev kv");
    assert_eq!(prev.value(), b"v1");
    assert_eq!(prev.mod_revision(), 2);

    let g = c.get("/registry/pods/a", None).await.unwrap();
    let kv = &g.kvs()[0];
    assert_eq!(kv.value(), b"v2");
    assert_eq!(kv.create_revision(), 2);
    assert_eq!(kv.mod_revision(), 3);
    assert_eq!(kv.version(), 2);
    let h = g.header().unwrap();
    assert_eq!(h.revision(), 3);
    assert_eq!(h.member_id(), store.member_id());
    assert_eq!(h.cluster_id(), store.cluster_id());
    assert!(h.raft_term() >= 1);

    // Read at a past revision.
    let old = c
        .get("/registry/pods/a", Some(GetOptions::new().with_revision(2)))
        .await
        .unwrap();
    assert_eq!(old.kvs()[0].value(), b"v1");
    assert_eq!(old.kvs()[0].version(), 1);
    assert_eq!(old.header().unwrap().revision(), 3);

    // A future revision is refused like etcd.
    let err = c
        .get(
            "/registry/pods/a",
            Some(GetOptions::new().with_revision(99)),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("future revision"), "{err}");

    // Delete, then re-create: version restarts at 1 with a new create revision.
    let d = c.delete("/registry/pods/a", None).await.unwrap();
    assert_eq!(d.deleted(), 1);
    assert_eq!(d.header().unwrap().revision(), 4);
    let none = c.delete("/registry/pods/a", None).await.unwrap();
    assert_eq!(none.deleted(), 0);
    assert_eq!(
        none.header().unwrap().revision(),
        4,
        "no-op delete keeps the revision"
    );
    c.put("/registry/pods/a", "v3", None).await.unwrap();
    let kv = c.get("/registry/pods/a", None).await.unwrap().kvs()[0].clone();
    assert_eq!(
        (kv.create_revision(), kv.mod_revision(), kv.version()),
        (5, 5, 1)
    );

    store.shutdown().await;
}

#[tokio::test]
async fn ranges_prefix_limit_sort_count() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;
    for (k, v) in [
        ("/a/1", "x"),
        ("/a/2", "yy"),
        ("/a/3", "z"),
        ("/b/1", "w"),
        ("/a", "root"),
    ] {
        c.put(k, v, None).await.unwrap();
    }
    let p = c
        .get("/a/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let keys: Vec<&[u8]> = p.kvs().iter().map(|kv| kv.key()).collect();
    assert_eq!(keys, vec![&b"/a/1"[..], b"/a/2", b"/a/3"]);
    assert_eq!(p.count(), 3);
    assert!(!p.more());

    let lim = c
        .get("/a/", Some(GetOptions::new().with_prefix().with_limit(2)))
        .await
        .unwrap();
    assert_eq!(lim.kvs().len(), 2);
    assert_eq!(lim.count(), 3);
    assert!(lim.more());

    let all = c
        .get("\0", Some(GetOptions::new().with_from_key()))
        .await
        .unwrap();
    assert_eq!(all.count(), 5);
    let all2 = c
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .unwrap();
    assert_eq!(all2.count(), 5);

    let desc = c
        .get(
            "/a/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Key, SortOrder::Descend),
            ),
        )
        .await
        .unwrap();
    assert_eq!(desc.kvs()[0].key(), b"/a/3");

    let by_value = c
        .get(
            "/a/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Value, SortOrder::Descend)
                    .with_limit(1),
            ),
        )
        .await
        .unwrap();
    assert_eq!(by_value.kvs()[0].value(), b"z");
    assert!(by_value.more());

    let count = c
        .get(
            "/a/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    assert_eq!(count.count(), 3);
    assert!(count.kvs().is_empty());

    let keys_only = c
        .get("/b/1", Some(GetOptions::new().with_keys_only()))
        .await
        .unwrap();
    assert!(keys_only.kvs()[0].value().is_empty());

    let serial = c
        .get("/b/1", Some(GetOptions::new().with_serializable()))
        .await
        .unwrap();
    assert_eq!(serial.kvs()[0].value(), b"w");

    let del = c
        .delete(
            "/a/",
            Some(DeleteOptions::new().with_prefix().with_prev_key()),
        )
        .await
        .unwrap();
    assert_eq!(del.deleted(), 3);
    assert_eq!(del.prev_kvs().len(), 3);
    assert_eq!(
        del.header().unwrap().revision(),
        7,
        "one revision for the whole delete"
    );
    let left = c
        .get("\0", Some(GetOptions::new().with_from_key()))
        .await
        .unwrap();
    assert_eq!(left.count(), 2);

    store.shutdown().await;
}

#[tokio::test]
async fn txn_compare_and_swap_like_the_apiserver() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;

    // Create-if-absent (mod_revision == 0), as the apiserver's create does.
    let create = Txn::new()
        .when([Compare::mod_revision("/registry/x", CompareOp::Equal, 0)])
        .and_then([TxnOp::put("/registry/x", "one", None)])
        .or_else([TxnOp::get("/registry/x", None)]);
    let r = c.txn(create.clone()).await.unwrap();
    assert!(r.succeeded());
    assert_eq!(r.header().unwrap().revision(), 2);
    let r = c.txn(create).await.unwrap();
    assert!(!r.succeeded());
    assert_eq!(
        r.header().unwrap().revision(),
        2,
        "read-only branch does not bump"
    );
    match &r.op_responses()[0] {
        TxnOpResponse::Get(g) => assert_eq!(g.kvs()[0].value(), b"one"),
        other => panic!("unexpected {other:?}"),
    }

    // Update guarded by mod revision, with a read after the write in the same txn.
    let update = Txn::new()
        .when([Compare::mod_revision("/registry/x", CompareOp::Equal, 2)])
        .and_then([
            TxnOp::put("/registry/x", "two", None),
            TxnOp::get("/registry/x", None),
            TxnOp::txn(Txn::new().and_then([TxnOp::put("/registry/y", "nested", None)])),
        ]);
    let r = c.txn(update).await.unwrap();
    assert!(r.succeeded());
    assert_eq!(r.header().unwrap().revision(), 3);
    match &r.op_responses()[1] {
        TxnOpResponse::Get(g) => {
            assert_eq!(g.kvs()[0].value(), b"two", "reads see the txn's own writes");
            assert_eq!(g.kvs()[0].mod_revision(), 3);
        }
        other => panic!("unexpected {other:?}"),
    }
    let y = c.get("/registry/y", None).await.unwrap();
    assert_eq!(
        y.kvs()[0].mod_revision(),
        3,
        "nested writes share the txn revision"
    );

    // Value, version and create-revision compares.
    let r = c
        .txn(
            Txn::new()
                .when([
                    Compare::value("/registry/x", CompareOp::Equal, "two"),
                    Compare::version("/registry/x", CompareOp::Equal, 2),
                    Compare::create_revision("/registry/x", CompareOp::Less, 3),
                    Compare::value("/registry/missing", CompareOp::NotEqual, "a"),
                ])
                .and_then([TxnOp::delete("/registry/y", None)]),
        )
        .await
        .unwrap();
    assert!(
        !r.succeeded(),
        "value compare on a missing key always fails"
    );

    // Same key twice in one branch is refused like etcd.
    let err = c
        .txn(Txn::new().and_then([
            TxnOp::put("/registry/z", "1", None),
            TxnOp::put("/registry/z", "2", None),
        ]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("duplicate key"), "{err}");

    store.shutdown().await;
}

#[tokio::test]
async fn compaction_refuses_old_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;
    for i in 0..5 {
        c.put("k", format!("v{i}"), None).await.unwrap();
    }
    c.compact(4, None).await.unwrap();
    let at4 = c
        .get("k", Some(GetOptions::new().with_revision(4)))
        .await
        .unwrap();
    assert_eq!(at4.kvs()[0].value(), b"v2");
    let err = c
        .get("k", Some(GetOptions::new().with_revision(3)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("compacted"), "{err}");
    let err = c.compact(4, None).await.unwrap_err();
    assert!(err.to_string().contains("compacted"), "{err}");
    store.shutdown().await;
}

#[tokio::test]
async fn leases_attach_keys_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;

    let grant = c.lease_grant(2, None).await.unwrap();
    assert_eq!(grant.ttl(), 2);
    let id = grant.id();
    c.put("leased", "v", Some(PutOptions::new().with_lease(id)))
        .await
        .unwrap();
    let ttl = c
        .lease_time_to_live(
            id,
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .unwrap();
    assert_eq!(ttl.granted_ttl(), 2);
    assert_eq!(ttl.keys(), &[b"leased".to_vec()]);
    assert!(c
        .leases()
        .await
        .unwrap()
        .leases()
        .iter()
        .any(|l| l.id() == id));

    // A put with an unknown lease fails like etcd.
    let err = c
        .put("x", "v", Some(PutOptions::new().with_lease(12345)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lease not found"), "{err}");

    // No keep-alive: the lease expires and its key is deleted (bounded wait).
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        if c.get("leased", None).await.unwrap().count() == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ttl = c.lease_time_to_live(id, None).await.unwrap();
    assert_eq!(ttl.ttl(), -1);

    // Keep-alive and revoke.
    let id2 = c.lease_grant(30, None).await.unwrap().id();
    let (mut keeper, mut responses) = c.lease_keep_alive(id2).await.unwrap();
    keeper.keep_alive().await.unwrap();
    let ka = tokio::time::timeout(common::WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((ka.id(), ka.ttl()), (id2, 30));
    c.put("k2", "v", Some(PutOptions::new().with_lease(id2)))
        .await
        .unwrap();
    let rev = c.lease_revoke(id2).await.unwrap();
    let r = rev.header().unwrap().revision();
    let g = c.get("k2", None).await.unwrap();
    assert_eq!(g.count(), 0);
    assert_eq!(g.header().unwrap().revision(), r);

    store.shutdown().await;
}

#[tokio::test]
async fn maintenance_status_and_member_list() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::start(dir.path()).await;
    let mut c = common::client(store.client_addr()).await;
    c.put("a", "b", None).await.unwrap();
    let s = c.status().await.unwrap();
    assert_eq!(s.leader(), store.member_id());
    assert!(s.raft_index() >= 2);
    assert!(s.raft_term() >= 1);
    assert!(s.db_size() > 0);
    let m = c.member_list().await.unwrap();
    assert_eq!(m.members().len(), 1);
    assert_eq!(m.members()[0].id(), store.member_id());
    assert_eq!(m.members()[0].name(), "default");
    assert_eq!(
        m.members()[0].client_urls(),
        &[common::endpoint(store.client_addr())]
    );
    store.shutdown().await;
}
