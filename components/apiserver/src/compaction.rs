//! Compaction of the store's history, as upstream's API server does it (`--etcd-compaction-interval`,
//! k8s.io/apiserver's etcd3 compactor): kube-apiserver, not etcd, keeps the history bounded — etcd and
//! kiln-store run without auto-compaction under it, so without this loop the store grows with every
//! write forever (and list continue tokens and watch resourceVersions never expire).
//!
//! Every interval, each API server tries one transaction on the shared key `compact_rev_key`: if its
//! version is still the one this server saw last round, it writes the current revision there (bumping
//! the version) and compacts to the revision written the round before. Of several API servers only one
//! wins each round (the others see a newer version and just follow it), and history of at least one
//! interval is always kept: a client's resourceVersion stays valid for one to two intervals.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use tokio::sync::watch;

/// The key the API servers coordinate on (upstream's, so a kiln API server and a kube-apiserver on
/// the same etcd would take turns too).
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// Where one server stands: the key's version it last saw, and the revision to compact to next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    pub version: i64,
    pub revision: i64,
}

/// One round: claims the key if nobody else did since `last`, compacts to `last.revision` when it did
/// (never on the first round: there is nothing of a previous interval to drop yet).
pub async fn compact(client: &mut Client, last: Round) -> Result<Round, etcd_client::Error> {
    let key = COMPACT_REV_KEY;
    let txn = Txn::new()
        .when([Compare::version(key, CompareOp::Equal, last.version)])
        .and_then([TxnOp::put(key, last.revision.to_string(), None)])
        .or_else([TxnOp::get(key, None)]);
    let resp = client.txn(txn).await?;
    let current = resp.header().map_or(0, |h| h.revision());
    if !resp.succeeded() {
        // Another server won this round: follow its count, compact nothing ourselves.
        let version = resp
            .op_responses()
            .into_iter()
            .find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.version()),
                _ => None,
            })
            .unwrap_or(0);
        return Ok(Round {
            version,
            revision: current,
        });
    }
    if last.revision > 0 {
        client.compact(last.revision, None).await?;
        tracing::info!(revision = last.revision, "compacted the store's history");
    }
    Ok(Round {
        version: last.version + 1,
        revision: current,
    })
}

/// Every `interval` until `stop`; zero disables compaction (upstream's `--etcd-compaction-interval=0`).
pub async fn run(mut client: Client, interval: Duration, mut stop: watch::Receiver<bool>) {
    if interval.is_zero() {
        tracing::info!("store compaction disabled (--etcd-compaction-interval=0)");
        return;
    }
    let mut round = Round::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match compact(&mut client, round).await {
            Ok(next) => round = next,
            // A compaction below the store's own compaction point is done already; anything else is
            // retried next round from where this server stood.
            Err(e) => tracing::warn!(error = %e, "store compaction failed; retrying next interval"),
        }
    }
}
