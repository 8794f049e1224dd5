//! Membership changes like etcd's: `etcdctl member add --learner`, start the new member with
//! the printed initial cluster and state existing, it catches up, promote, remove.

mod common;

use common::cluster::{member_config, retry, Cluster};
use common::{etcdctl, stdout};
use kiln_store::ClusterState;

/// Value of `KEY="..."` in etcdctl's member add output.
fn env_value(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=\"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{key} in {out}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn add_learner_then_promote_then_remove() {
    if !std::path::Path::new(common::ETCDCTL).exists() {
        eprintln!("skipping: {} not installed", common::ETCDCTL);
        return;
    }
    let mut cluster = Cluster::new(3, |_| {});
    cluster.start_all().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let mut c = cluster.client(follower).await;
    c.put("/m/before", "1", None).await.unwrap();
    // etcdctl prints the initial cluster from member names: wait until all are published.
    retry("members published", || {
        let mut c = c.clone();
        async move {
            let l = c.member_list().await.map_err(|e| e.to_string())?;
            if l.members().iter().all(|m| !m.name().is_empty()) {
                Ok(())
            } else {
                Err("unnamed member".to_string())
            }
        }
    })
    .await;

    // etcdctl member add (as a learner) against a follower.
    let peer_url = format!("https://127.0.0.1:{}", common::free_port());
    let ep = cluster.members[follower].handle().client_addr().to_string();
    let add_args = vec![
        "member".to_string(),
        "add".into(),
        "m3".into(),
        format!("--peer-urls={peer_url}"),
        "--learner".into(),
    ];
    let out = stdout(&common::etcdctl_async(ep.clone(), vec![], add_args).await);
    assert_eq!(env_value(&out, "ETCD_INITIAL_CLUSTER_STATE"), "existing");
    assert_eq!(env_value(&out, "ETCD_NAME"), "m3");
    let initial = env_value(&out, "ETCD_INITIAL_CLUSTER");
    assert!(initial.contains(&format!("m3={peer_url}")), "{initial}");
    assert_eq!(initial.split(',').count(), 4, "{initial}");

    // Start it, empty, with state existing: it gets the data from the leader.
    let mut config = member_config(cluster.root.path(), &cluster.pki, "m3", &peer_url);
    config.initial_cluster = Some(initial);
    config.initial_cluster_state = ClusterState::Existing;
    cluster.members.push(common::cluster::Member {
        name: "m3".into(),
        peer_url: peer_url.clone(),
        config,
        handle: None,
    });
    cluster.start(3).await;
    let rev = c
        .put("/m/after-add", "2", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    cluster.wait_revision(3, rev).await;
    let new_id = cluster.members[3].handle().member_id();
    let list = c.member_list().await.unwrap();
    let m3 = list
        .members()
        .iter()
        .find(|m| m.id() == new_id)
        .expect("m3 listed");
    assert!(m3.is_learner());
    assert_eq!(m3.peer_urls(), std::slice::from_ref(&peer_url));

    // A learner serves serializable reads of replicated data.
    let mut lc = cluster.client(3).await;
    let got = lc
        .get(
            "/m/before",
            Some(etcd_client::GetOptions::new().with_serializable()),
        )
        .await
        .unwrap();
    assert_eq!(got.kvs()[0].value(), b"1");

    // Promote (etcd refuses while the learner lags; retry until in sync).
    retry("promote", || {
        let mut c = c.clone();
        async move { c.member_promote(new_id).await }
    })
    .await;
    let list = c.member_list().await.unwrap();
    assert_eq!(list.members().len(), 4);
    assert!(list.members().iter().all(|m| !m.is_learner()));
    // Promoting a voter is refused with etcd's message.
    let err = c.member_promote(new_id).await.unwrap_err().to_string();
    assert!(err.contains("can only promote a learner member"), "{err}");

    // The new voter takes writes (forwarded) and reads linearizably.
    lc.put("/m/from-m3", "3", None).await.unwrap();
    let got = c.get("/m/from-m3", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"3");

    // MemberUpdate keeps the member (same URL here: the peer listener is bound to it).
    let updated = c
        .member_update(new_id, vec![peer_url.clone()])
        .await
        .unwrap();
    assert_eq!(updated.members().len(), 4);

    // Remove it with etcdctl; the cluster goes on with three.
    let remove = etcdctl(
        &ep,
        &[],
        &["member", "remove", &format!("{new_id:x}")],
        None,
    );
    assert!(stdout(&remove).contains("removed from cluster"));
    let list = c.member_list().await.unwrap();
    assert_eq!(list.members().len(), 3);
    assert!(list.members().iter().all(|m| m.id() != new_id));
    cluster.stop(3).await;
    retry("put after remove", || {
        let mut c = c.clone();
        async move { c.put("/m/after-remove", "4", None).await }
    })
    .await;
    let err = c.member_remove(new_id).await.unwrap_err().to_string();
    assert!(err.contains("member not found"), "{err}");
    cluster.shutdown().await;
}
