//! Consensus: openraft over rocksdb, with kiln-store's commands.

pub mod apply;
pub mod entry_codec;
pub mod log_store;
pub mod network;
pub mod state_machine;
pub mod thread;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, SnapshotPolicy};

use crate::command::{KilnRaft, MemberNode};
use crate::member::lease::Lessor;
use crate::member::waiters::Waiters;
use crate::peer::client::PeerClients;
use crate::storage::mvcc::Mvcc;
use log_store::LogStore;
use network::PeerNetworkFactory;
use state_machine::StateMachine;
use thread::RaftThread;

#[derive(Debug, thiserror::Error)]
pub enum RaftSetupError {
    #[error("invalid raft configuration: {0}")]
    Config(#[from] openraft::ConfigError),
    #[error("raft stopped: {0}")]
    Fatal(#[from] openraft::error::Fatal<u64>),
    #[error("initializing the cluster: {0}")]
    Initialize(String),
    #[error(transparent)]
    Log(#[from] crate::storage::raftlog::LogFileError),
    #[error("starting the raft thread: {0}")]
    Thread(std::io::Error),
}

/// Timing knobs, etcd's flags in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct RaftTiming {
    pub heartbeat_ms: u64,
    pub election_ms: u64,
    /// Applied entries between snapshots (etcd's --snapshot-count).
    pub snapshot_count: u64,
}

impl RaftTiming {
    /// openraft's `(election_timeout_min, election_timeout_max)` for etcd's `--election-timeout` E.
    ///
    /// etcd's follower campaigns after a random [E, 2E) without a heartbeat, and a voter that heard
    /// the leader within E refuses it. openraft's follower of a known leader waits its leader lease
    /// (= election_timeout_max) plus a random election timeout in [min, max) before it campaigns,
    /// and voters refuse for their own lease. Mapping E to [E, 2E) as before made a follower wait
    /// 3E–4E (failover took 4.1 s against etcd's ~2 s at E = 1 s, bench/store-failover.sh). With
    /// min + max = E the follower waits [E, E + max - min): never sooner than etcd's follower
    /// (no more disruptive), and every voter's lease (max < E) has run out when it asks.
    /// min stays above the heartbeat, as openraft requires.
    pub fn election_window(&self) -> (u64, u64) {
        let min = (self.election_ms / 4).max(self.heartbeat_ms + 1);
        let max = self.election_ms.saturating_sub(min).max(min + 1);
        (min, max)
    }
}

/// Starts the Raft member `id` on the opened stores, on a thread of its own (see [`thread`]);
/// Raft stops when the returned thread is dropped.
// Each argument is a separate, already-opened piece the state machine or log store keeps.
#[allow(clippy::too_many_arguments)]
pub async fn start(
    id: u64,
    timing: RaftTiming,
    mvcc: Arc<Mvcc>,
    lessor: Arc<Lessor>,
    member_dir: &std::path::Path,
    peers: Arc<PeerClients>,
    waiters: Arc<Waiters>,
    auth: Arc<crate::auth::AuthStore>,
) -> Result<(KilnRaft, RaftThread), RaftSetupError> {
    let config = Config {
        cluster_name: "kiln-store".into(),
        heartbeat_interval: timing.heartbeat_ms,
        election_timeout_min: timing.election_window().0,
        election_timeout_max: timing.election_window().1,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(timing.snapshot_count.max(1)),
        // Logs kept behind a snapshot for lagging followers (etcd's snapshot-catchup-entries);
        // a member further behind gets the snapshot instead.
        // openraft's 200 ms per snapshot chunk is too tight for 3 MiB over TLS on a busy host;
        // append-entries time out after one heartbeat interval, so keep batches moderate.
        install_snapshot_timeout: (timing.election_ms * 5).max(5_000),
        max_payload_entries: 64,
        max_in_snapshot_log_to_keep: timing.snapshot_count.clamp(1, 1000),
        ..Default::default()
    }
    .validate()?;
    // etcd's layout: the WAL in member/wal, snapshots in member/snap.
    let log_store = LogStore::open(mvcc.db().clone(), &member_dir.join("wal"), waiters.clone())?;
    let state_machine = StateMachine::new(mvcc, lessor, member_dir.join("snap"), waiters, auth);
    let thread = RaftThread::spawn().map_err(RaftSetupError::Thread)?;
    // openraft spawns its core, state machine worker and replication streams where it is
    // created.
    let raft = thread
        .handle()
        .spawn(KilnRaft::new(
            id,
            Arc::new(config),
            PeerNetworkFactory::new(peers),
            log_store,
            state_machine,
        ))
        .await
        .map_err(|e| RaftSetupError::Thread(std::io::Error::other(e.to_string())))??;
    Ok((raft, thread))
}

/// Makes sure the cluster is formed. A brand-new member of a new cluster initializes Raft with
/// the initial members (every founding member does, with the same membership, which openraft
/// allows); a member joining an existing cluster (`members` = None) waits for the leader to
/// replicate to it; a member with data keeps its stored membership. A lone voter campaigns at
/// once instead of waiting out an election timeout, and we wait (bounded) for it to lead.
pub async fn bootstrap(
    raft: &KilnRaft,
    id: u64,
    members: Option<BTreeMap<u64, MemberNode>>,
) -> Result<(), RaftSetupError> {
    if !raft.is_initialized().await? {
        if let Some(members) = members {
            tracing::info!(member = %format!("{id:x}"), members = members.len(), "initializing new cluster");
            match raft.initialize(members).await {
                Ok(()) => {}
                // Another founding member got there first and already replicated to us.
                Err(openraft::error::RaftError::APIError(
                    openraft::error::InitializeError::NotAllowed(_),
                )) => {}
                Err(e) => return Err(RaftSetupError::Initialize(e.to_string())),
            }
        } else {
            tracing::info!(member = %format!("{id:x}"), "joining existing cluster; waiting for the leader");
            return Ok(());
        }
    }
    let metrics = raft.metrics().borrow().clone();
    let voters: Vec<u64> = metrics.membership_config.voter_ids().collect();
    if voters != [id] {
        // Several members: a leader emerges once a quorum runs; do not block startup on it.
        return Ok(());
    }
    raft.trigger().elect().await?;
    let waited = raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.current_leader.is_some(), "leader elected")
        .await;
    if let Err(e) = waited {
        tracing::warn!(error = %e, "no leader yet; serving anyway");
    }
    Ok(())
}

#[cfg(test)]
mod timing_tests {
    use super::RaftTiming;

    fn window(heartbeat_ms: u64, election_ms: u64) -> (u64, u64) {
        RaftTiming {
            heartbeat_ms,
            election_ms,
            snapshot_count: 1,
        }
        .election_window()
    }

    #[test]
    fn a_follower_campaigns_after_e_to_one_and_a_half_e_and_voters_leases_have_run_out() {
        // etcd's defaults: the follower waits lease (max) + [min, max) = [1000, 1500) ms.
        assert_eq!(window(100, 1000), (250, 750));
        // The linearizability test's 50/400.
        assert_eq!(window(50, 400), (100, 300));
        for (h, e) in [(100, 1000), (50, 400), (100, 500), (250, 5000)] {
            let (min, max) = window(h, e);
            assert!(min > h && min < max, "{h}/{e}: {min}..{max}");
            assert_eq!(max + min, e, "{h}/{e}: never sooner than etcd's follower");
        }
    }

    #[test]
    fn a_short_election_timeout_still_gives_openraft_a_valid_window() {
        // Below etcd's 5x rule: min above the heartbeat, max above min.
        let (min, max) = window(100, 150);
        assert!(min > 100 && max > min, "{min}..{max}");
    }
}
