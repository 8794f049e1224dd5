//! The same client sequence against the real etcd (/usr/bin/etcd) and kiln-store must observe
//! the same revisions, versions, counts, flags and errors.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, WatchOptions,
};

fn err(e: etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("error {:?}: {}", s.code(), s.message()),
        other => format!("error {other}"),
    }
}

fn kvs(kvs: &[etcd_client::KeyValue]) -> String {
    kvs.iter()
        .map(|kv| {
            format!(
                "{}={} c{} m{} v{}",
                String::from_utf8_lossy(kv.key()),
                String::from_utf8_lossy(kv.value()),
                kv.create_revision(),
                kv.mod_revision(),
                kv.version()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the scenario and writes down everything a client can observe (except IDs and terms).
async fn transcript(c: &mut Client) -> Vec<String> {
    let mut t = Vec::new();
    let r = c.get("missing", None).await.unwrap();
    t.push(format!(
        "get missing rev={} count={}",
        r.header().unwrap().revision(),
        r.count()
    ));
    for (k, v) in [
        ("a", "1"),
        ("b", "1"),
        ("c/1", "x"),
        ("c/2", "yy"),
        ("c/3", "z"),
    ] {
        let r = c.put(k, v, None).await.unwrap();
        t.push(format!("put {k} rev={}", r.header().unwrap().revision()));
    }
    let r = c
        .put("a", "2", Some(PutOptions::new().with_prev_key()))
        .await
        .unwrap();
    t.push(format!(
        "put a prev={} rev={}",
        kvs(r
            .prev_key()
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()
            .as_slice()),
        r.header().unwrap().revision()
    ));
    let r = c
        .get("c/", Some(GetOptions::new().with_prefix().with_limit(2)))
        .await
        .unwrap();
    t.push(format!(
        "prefix limit: {} count={} more={} rev={}",
        kvs(r.kvs()),
        r.count(),
        r.more(),
        r.header().unwrap().revision()
    ));
    let r = c
        .get(
            "",
            Some(
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Mod, SortOrder::Descend)
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    t.push(format!(
        "all by mod desc: {} count={}",
        kvs(r.kvs()),
        r.count()
    ));
    let r = c
        .get(
            "c/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    t.push(format!(
        "count only: [{}] count={} more={}",
        kvs(r.kvs()),
        r.count(),
        r.more()
    ));
    let r = c
        .get("a", Some(GetOptions::new().with_revision(2)))
        .await
        .unwrap();
    t.push(format!("a@2: {}", kvs(r.kvs())));
    t.push(format!(
        "future: {}",
        c.get("a", Some(GetOptions::new().with_revision(100)))
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));
    let r = c
        .delete(
            "c/",
            Some(DeleteOptions::new().with_prefix().with_prev_key()),
        )
        .await
        .unwrap();
    t.push(format!(
        "del c/ deleted={} prev={} rev={}",
        r.deleted(),
        kvs(r.prev_kvs()),
        r.header().unwrap().revision()
    ));
    let r = c.delete("nothing", None).await.unwrap();
    t.push(format!(
        "del nothing deleted={} rev={}",
        r.deleted(),
        r.header().unwrap().revision()
    ));

    let create = Txn::new()
        .when([Compare::mod_revision("t", CompareOp::Equal, 0)])
        .and_then([TxnOp::put("t", "1", None), TxnOp::get("t", None)])
        .or_else([TxnOp::get("t", None)]);
    for round in 0..2 {
        let r = c.txn(create.clone()).await.unwrap();
        let ops: Vec<String> = r
            .op_responses()
            .iter()
            .map(|op| match op {
                TxnOpResponse::Put(p) => format!("put rev={}", p.header().unwrap().revision()),
                TxnOpResponse::Get(g) => format!(
                    "get {} rev={}",
                    kvs(g.kvs()),
                    g.header().unwrap().revision()
                ),
                TxnOpResponse::Delete(d) => format!("del {}", d.deleted()),
                TxnOpResponse::Txn(x) => format!("txn {}", x.succeeded()),
            })
            .collect();
        t.push(format!(
            "txn#{round} succeeded={} rev={} ops={ops:?}",
            r.succeeded(),
            r.header().unwrap().revision()
        ));
    }
    let nested = Txn::new()
        .when([
            Compare::value("a", CompareOp::Equal, "2"),
            Compare::version("a", CompareOp::Greater, 1),
        ])
        .and_then([
            TxnOp::delete("b", None),
            TxnOp::txn(
                Txn::new()
                    .when([Compare::create_revision("t", CompareOp::Less, 1)])
                    .and_then([TxnOp::put("n", "then", None)])
                    .or_else([TxnOp::put("n", "else", None)]),
            ),
        ]);
    let r = c.txn(nested).await.unwrap();
    t.push(format!(
        "nested succeeded={} rev={}",
        r.succeeded(),
        r.header().unwrap().revision()
    ));
    t.push(format!("n: {}", kvs(c.get("n", None).await.unwrap().kvs())));
    let dup = Txn::new().and_then([TxnOp::put("d", "1", None), TxnOp::put("d", "2", None)]);
    t.push(format!(
        "dup: {}",
        c.txn(dup)
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));
    t.push(format!(
        "ignore_value missing: {}",
        c.put("nope", "", Some(PutOptions::new().with_ignore_value()))
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));
    t.push(format!(
        "empty key: {}",
        c.put("", "v", None)
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));
    t.push(format!(
        "unknown lease: {}",
        c.put("l", "v", Some(PutOptions::new().with_lease(424242)))
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));

    let g = c.lease_grant(1, None).await.unwrap();
    t.push(format!(
        "lease ttl={} rev={}",
        g.ttl(),
        g.header().unwrap().revision()
    ));
    let r = c
        .put("leased", "v", Some(PutOptions::new().with_lease(g.id())))
        .await
        .unwrap();
    t.push(format!("put leased rev={}", r.header().unwrap().revision()));
    let r = c.lease_revoke(g.id()).await.unwrap();
    t.push(format!("revoke rev={}", r.header().unwrap().revision()));
    t.push(format!(
        "leased after revoke count={}",
        c.get("leased", None).await.unwrap().count()
    ));
    t.push(format!(
        "revoke again: {}",
        c.lease_revoke(g.id())
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));

    // Watch everything from revision 2 with prev_kv; flatten (batching may differ).
    let current = c.get("a", None).await.unwrap().header().unwrap().revision();
    let mut stream = c
        .watch(
            "",
            Some(
                WatchOptions::new()
                    .with_all_keys()
                    .with_start_revision(2)
                    .with_prev_key(),
            ),
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut last = 0;
    while last < current {
        let resp = tokio::time::timeout(common::WAIT, stream.message())
            .await
            .expect("watch in time")
            .unwrap()
            .unwrap();
        for ev in resp.events() {
            let kv = ev.kv().unwrap();
            last = kv.mod_revision();
            events.push(format!(
                "{:?} {} m{} v{} prev={}",
                ev.event_type(),
                String::from_utf8_lossy(kv.key()),
                kv.mod_revision(),
                kv.version(),
                ev.prev_kv()
                    .map(|p| String::from_utf8_lossy(p.value()).into_owned())
                    .unwrap_or_default()
            ));
        }
    }
    t.extend(events);

    let r = c.compact(current - 3, None).await.unwrap();
    t.push(format!("compact rev={}", r.header().unwrap().revision()));
    t.push(format!(
        "get compacted: {}",
        c.get("a", Some(GetOptions::new().with_revision(current - 4)))
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));
    t.push(format!(
        "compact again: {}",
        c.compact(current - 3, None)
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(err)
    ));
    let mut stream = c
        .watch("a", Some(WatchOptions::new().with_start_revision(2)))
        .await
        .unwrap();
    loop {
        let resp = tokio::time::timeout(common::WAIT, stream.message())
            .await
            .expect("watch in time")
            .unwrap()
            .unwrap();
        if resp.canceled() {
            t.push(format!(
                "watch compacted: compact_revision={}",
                resp.compact_revision()
            ));
            break;
        }
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_answers_as_real_etcd() {
    if !std::path::Path::new(common::ETCD).exists() {
        eprintln!("skipping: {} not installed", common::ETCD);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let client_port = common::free_port();
    let peer_port = common::free_port();
    let peer = format!("http://127.0.0.1:{peer_port}");
    let client_url = format!("http://127.0.0.1:{client_port}");
    let _etcd = common::KillOnDrop(
        Command::new(common::ETCD)
            .args([
                "--name=cmp",
                &format!("--data-dir={}", dir.path().join("etcd").display()),
                &format!("--listen-client-urls={client_url}"),
                &format!("--advertise-client-urls={client_url}"),
                &format!("--listen-peer-urls={peer}"),
                &format!("--initial-advertise-peer-urls={peer}"),
                &format!("--initial-cluster=cmp={peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let etcd_addr = format!("127.0.0.1:{client_port}").parse().unwrap();
    common::wait_port(etcd_addr).await;
    let mut etcd = common::client(etcd_addr).await;
    // etcd answers once it has elected itself; wait (bounded) for a first successful read.
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while etcd.get("missing", None).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd never became ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let expected = transcript(&mut etcd).await;
    eprintln!("etcd transcript: {expected:#?}");

    let store = common::start(&dir.path().join("kiln")).await;
    let mut kiln = common::client(store.client_addr()).await;
    let actual = transcript(&mut kiln).await;
    store.shutdown().await;

    for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
        assert_eq!(
            e, a,
            "step {i} differs\netcd: {expected:#?}\nkiln: {actual:#?}"
        );
    }
    assert_eq!(expected.len(), actual.len());
}
