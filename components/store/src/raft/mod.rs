//! Consensus: openraft over rocksdb, with kiln-store's commands.

pub mod log_store;
pub mod network;
pub mod snapshot;
pub mod state_machine;
pub mod types;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, SnapshotPolicy};

use crate::lease::Lessor;
use crate::mvcc::Mvcc;
use log_store::LogStore;
use network::PeerNetworkFactory;
use state_machine::StateMachine;
use types::{KilnRaft, MemberNode};

#[derive(Debug, thiserror::Error)]
pub enum RaftSetupError {
    #[error("invalid raft configuration: {0}")]
    Config(#[from] openraft::ConfigError),
    #[error("raft stopped: {0}")]
    Fatal(#[from] openraft::error::Fatal<u64>),
    #[error("initializing the cluster: {0}")]
    Initialize(String),
}

/// Timing knobs, etcd's flags in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct RaftTiming {
    pub heartbeat_ms: u64,
    pub election_ms: u64,
    /// Applied entries between snapshots (etcd's --snapshot-count).
    pub snapshot_count: u64,
}

/// Starts the Raft member `id` on the opened stores.
pub async fn start(
    id: u64,
    timing: RaftTiming,
    mvcc: Arc<Mvcc>,
    lessor: Arc<Lessor>,
    snapshot_dir: std::path::PathBuf,
) -> Result<KilnRaft, RaftSetupError> {
    let config = Config {
        cluster_name: "kiln-store".into(),
        heartbeat_interval: timing.heartbeat_ms,
        election_timeout_min: timing.election_ms,
        election_timeout_max: timing.election_ms * 2,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(timing.snapshot_count.max(1)),
        max_in_snapshot_log_to_keep: 1000,
        ..Default::default()
    }
    .validate()?;
    let log_store = LogStore::new(mvcc.db().clone());
    let state_machine = StateMachine::new(mvcc, lessor, snapshot_dir);
    let raft = KilnRaft::new(
        id,
        Arc::new(config),
        PeerNetworkFactory,
        log_store,
        state_machine,
    )
    .await?;
    Ok(raft)
}

/// Makes sure the cluster is formed: a brand-new member initializes it with `members`; a member
/// with data keeps its stored membership. A single voter campaigns at once instead of waiting
/// out an election timeout, then we wait (bounded) for a leader.
pub async fn bootstrap(
    raft: &KilnRaft,
    id: u64,
    members: BTreeMap<u64, MemberNode>,
) -> Result<(), RaftSetupError> {
    if !raft.is_initialized().await? {
        tracing::info!(member = %format!("{id:x}"), members = members.len(), "initializing new cluster");
        raft.initialize(members)
            .await
            .map_err(|e| RaftSetupError::Initialize(e.to_string()))?;
    } else {
        let metrics = raft.metrics().borrow().clone();
        let voters: Vec<u64> = metrics.membership_config.voter_ids().collect();
        if voters == [id] {
            raft.trigger().elect().await?;
        }
    }
    let waited = raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.current_leader.is_some(), "leader elected")
        .await;
    if let Err(e) = waited {
        tracing::warn!(error = %e, "no leader yet; serving anyway");
    }
    Ok(())
}
