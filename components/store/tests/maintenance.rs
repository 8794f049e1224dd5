//! Maintenance Hash, HashKV and MoveLeader on three members, through the real etcdctl
//! (`endpoint hashkv --cluster`, `move-leader`) and the etcd-client crate.

mod common;

use common::cluster::{retry, Cluster};

fn have_etcdctl() -> bool {
    std::path::Path::new(common::ETCDCTL).exists()
}

/// `etcdctl endpoint hashkv --cluster` lines as (endpoint, hash).
fn parse_hashkv(out: &str) -> Vec<(String, u32)> {
    out.lines()
        .filter_map(|l| {
            let (ep, hash) = l.split_once(", ")?;
            Some((ep.to_string(), hash.trim().parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hashkv_agrees_across_members_and_move_leader_moves_it() {
    if !have_etcdctl() {
        eprintln!("skipping: {} not installed", common::ETCDCTL);
        return;
    }
    let mut cluster = Cluster::new(3, |_| {});
    cluster.start_all().await;
    let leader = cluster.leader().await;
    let mut c = cluster.client(leader).await;
    for i in 0..20 {
        c.put(format!("/hash/{i}"), format!("v{i}"), None)
            .await
            .unwrap();
    }
    c.delete("/hash/3", None).await.unwrap();
    let rev = c
        .get("/hash/0", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    for i in 0..3 {
        cluster.wait_revision(i, rev).await;
    }
    // `--cluster` dials the client URLs members publish after they start: wait for all three
    // (writes can be done before the last one published).
    retry("all members published", || {
        let mut c = c.clone();
        async move {
            let list = c.member_list().await.map_err(|e| e.to_string())?;
            let published = list
                .members()
                .iter()
                .filter(|m| !m.client_urls().is_empty())
                .count();
            if published == 3 {
                Ok(())
            } else {
                Err(format!("{published} of 3 published"))
            }
        }
    })
    .await;

    // Every member reports the same hash of the key space, through etcdctl: `--cluster` dials
    // every advertised http:// client URL, which also proves the `:authority` shim
    // (`src/authority.rs`) for etcdctl's per-endpoint connections.
    let ep = format!("http://{}", cluster.members[leader].handle().client_addr());
    let out = common::etcdctl_async(
        ep,
        vec![],
        vec![
            "endpoint".into(),
            "hashkv".into(),
            "--cluster".into(),
            format!("--rev={rev}"),
        ],
    )
    .await;
    let hashes = parse_hashkv(&common::stdout(&out));
    assert_eq!(hashes.len(), 3, "{hashes:?}");
    assert!(hashes.iter().all(|(_, h)| *h == hashes[0].1), "{hashes:?}");

    // ... and through the API, with the compact revision; the whole-backend Hash too.
    let mut per_member = Vec::new();
    for i in 0..3 {
        let mut mc = cluster.client(i).await;
        let h = mc.hash_kv(rev).await.unwrap();
        assert_eq!(h.compact_version(), 0);
        per_member.push(h.hash());
        assert_ne!(mc.hash().await.unwrap().hash(), 0);
    }
    assert!(per_member.iter().all(|h| *h == hashes[0].1));

    // The hash covers the data: an older revision and a later write hash differently, and
    // the old revision's hash stays the same after the write.
    let older = c.hash_kv(rev - 1).await.unwrap().hash();
    assert_ne!(older, per_member[0]);
    c.put("/hash/later", "x", None).await.unwrap();
    assert_ne!(c.hash_kv(0).await.unwrap().hash(), per_member[0]);
    assert_eq!(c.hash_kv(rev).await.unwrap().hash(), per_member[0]);
    // A future revision is refused like etcd does.
    let future = c.hash_kv(rev + 1000).await.unwrap_err().to_string();
    assert!(future.contains("future revision"), "{future}");

    // etcdctl move-leader (which finds the leader among the endpoints) moves leadership.
    let target = (leader + 1) % 3;
    let target_id = cluster.members[target].handle().member_id();
    let endpoints = (0..3)
        .map(|i| format!("http://{}", cluster.members[i].handle().client_addr()))
        .collect::<Vec<_>>()
        .join(",");
    let out = common::etcdctl_async(
        endpoints,
        vec![],
        vec!["move-leader".into(), format!("{target_id:x}")],
    )
    .await;
    let text = common::stdout(&out);
    assert!(
        text.contains("Leadership transferred from") && text.contains(&format!("to {target_id:x}")),
        "{text}"
    );
    assert_eq!(cluster.leader().await, target);

    // Writes go on under the new leader, and a learner-less unknown ID is refused.
    let mut tc = cluster.client(target).await;
    retry("write after the move", || {
        let mut tc = tc.clone();
        async move { tc.put("/hash/after-move", "y", None).await }
    })
    .await;
    let bad = tc.move_leader(0xdead_beef).await.unwrap_err().to_string();
    assert!(bad.contains("bad leader transferee"), "{bad}");
    cluster.shutdown().await;
}
