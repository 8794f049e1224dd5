//! Three members on 127.0.0.1 with mutual-TLS peers: replication, forwarding, linearizable
//! reads on followers, leader loss, restart and catch-up (also from a Raft snapshot).

mod common;

use common::cluster::{retry, Cluster};
use etcd_client::GetOptions;

async fn get_value(c: &mut etcd_client::Client, key: &str) -> Option<Vec<u8>> {
    let r = c.get(key, None).await.expect("linearizable get");
    r.kvs().first().map(|kv| kv.value().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_on_any_member_are_seen_on_all_and_survive_leader_loss() {
    let mut cluster = Cluster::new(3, |_| {});
    cluster.start_all().await;
    let leader = cluster.leader().await;

    // A write on each member (followers forward to the leader) ...
    for i in 0..3 {
        let mut c = cluster.client(i).await;
        c.put(format!("/k/{i}"), format!("v{i}"), None)
            .await
            .expect("put on any member");
    }
    // ... is visible through a linearizable read on every member.
    for i in 0..3 {
        let mut c = cluster.client(i).await;
        for j in 0..3 {
            assert_eq!(
                get_value(&mut c, &format!("/k/{j}")).await,
                Some(format!("v{j}").into_bytes()),
                "member {i} sees /k/{j}"
            );
        }
    }

    // Members publish their names and client URLs; MemberList on a follower shows them.
    let follower = (leader + 1) % 3;
    let mut fc = cluster.client(follower).await;
    let members = retry("all members published", || {
        let mut fc = fc.clone();
        async move {
            let list = fc.member_list().await.map_err(|e| e.to_string())?;
            let named = list
                .members()
                .iter()
                .filter(|m| !m.name().is_empty() && !m.client_urls().is_empty())
                .count();
            if named == 3 {
                Ok(list)
            } else {
                Err(format!("{named} of 3 published"))
            }
        }
    })
    .await;
    let mut names: Vec<&str> = members.members().iter().map(|m| m.name()).collect();
    names.sort();
    assert_eq!(names, ["m0", "m1", "m2"]);
    assert!(members.members().iter().all(|m| !m.is_learner()));
    assert!(members
        .members()
        .iter()
        .all(|m| m.peer_urls()[0].starts_with("https://127.0.0.1:")));
    let status = fc.status().await.unwrap();
    assert_eq!(
        status.leader(),
        cluster.members[leader].handle().member_id()
    );

    // Kill the leader: a new one is elected and writes continue.
    let old_leader = leader;
    cluster.stop(old_leader).await;
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, old_leader);
    let survivor = cluster.running()[0];
    let mut sc = cluster.client(survivor).await;
    for n in 0..10 {
        retry("put after leader loss", || {
            let mut sc = sc.clone();
            async move { sc.put(format!("/after/{n}"), "x", None).await }
        })
        .await;
    }
    let target = sc
        .get("/after/9", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    assert_eq!(
        sc.get("/after/", Some(GetOptions::new().with_prefix()))
            .await
            .unwrap()
            .count(),
        10
    );

    // Restart the old leader on its data dir: it catches up.
    cluster.start(old_leader).await;
    cluster.wait_revision(old_leader, target).await;
    let mut oc = cluster.client(old_leader).await;
    let got = oc
        .get(
            "/after/",
            Some(GetOptions::new().with_prefix().with_serializable()),
        )
        .await
        .unwrap();
    assert_eq!(got.count(), 10, "restarted member has the writes it missed");
    assert_eq!(get_value(&mut oc, "/k/0").await, Some(b"v0".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lagging_member_catches_up_from_a_raft_snapshot() {
    // Snapshot every few entries and keep only a few entries behind it.
    let mut cluster = Cluster::new(3, |c| c.snapshot_count = 5);
    cluster.start_all().await;
    let leader = cluster.leader().await;
    let lagging = (leader + 1) % 3;
    let mut lc = cluster.client(lagging).await;
    lc.put("/snap/first", "1", None).await.unwrap();
    let behind = cluster.members[lagging]
        .handle()
        .raft()
        .metrics()
        .borrow()
        .last_log_index
        .unwrap_or(0);
    cluster.stop(lagging).await;

    let mut c = cluster.client(leader).await;
    for i in 0..60 {
        c.put(format!("/snap/{i:02}"), format!("v{i}"), None)
            .await
            .unwrap();
    }
    let target = c
        .get("/snap/59", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    // The leader no longer has the entries the stopped member lacks: only a snapshot helps.
    let purged = retry("leader purges its log", || {
        let m = cluster.members[leader]
            .handle()
            .raft()
            .metrics()
            .borrow()
            .clone();
        async move {
            match m.purged {
                Some(p) if p.index > behind => Ok(p.index),
                other => Err(format!("purged {other:?}, member at {behind}")),
            }
        }
    })
    .await;
    assert!(purged > behind);

    cluster.start(lagging).await;
    cluster.wait_revision(lagging, target).await;
    let mut lc = cluster.client(lagging).await;
    let got = lc
        .get(
            "/snap/",
            Some(GetOptions::new().with_prefix().with_serializable()),
        )
        .await
        .unwrap();
    assert_eq!(got.count(), 61);
    // And it keeps following afterwards.
    lc.put("/snap/later", "x", None).await.unwrap();
    cluster.wait_revision(leader, target + 1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_without_a_trusted_client_certificate_are_refused() {
    let mut cluster = Cluster::new(1, |_| {});
    cluster.start_all().await;
    let urls = vec![cluster.members[0].peer_url.clone()];
    let ask = |config: kiln_store::Config| {
        let urls = urls.clone();
        async move {
            let clients = kiln_store::peer_client::PeerClients::new(&config).unwrap();
            clients
                .call::<kiln_store::peer_client::ClusterInfo>(
                    &urls,
                    kiln_store::peer_client::PeerRequest::ClusterInfo,
                    std::time::Duration::from_secs(5),
                )
                .await
        }
    };
    // A peer with the cluster's peer certificate is served.
    let info = ask(cluster.members[0].config.clone())
        .await
        .expect("trusted peer");
    assert_eq!(info.cluster_id, cluster.members[0].handle().cluster_id());
    // One whose certificate another CA signed is not.
    let other = tempfile::tempdir().unwrap();
    let stranger = common::cluster::PeerPki::create(other.path());
    let mut config = cluster.members[0].config.clone();
    config.peer_cert_file = Some(stranger.cert.clone());
    config.peer_key_file = Some(stranger.key.clone());
    assert!(
        ask(config).await.is_err(),
        "untrusted client certificate refused"
    );
    cluster.shutdown().await;
}
