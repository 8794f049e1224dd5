//! Requests only the leader can serve — writes, the read index for linearizable reads, lease
//! keep-alives and membership changes — and forwarding them there from any member, so clients
//! may talk to any member (as with etcd, whose followers forward proposals to the leader).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::error::{ChangeMembershipError, CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::ChangeMembers;
use tokio::time::Instant;

use crate::command::MemberNode;
use crate::etcd_error::EtcdError;
use crate::member::context::StoreContext;
use crate::peer::forward::{ForwardError, LeaderOp, LeaderReply, MemberChange};
use crate::peer::PeerRequest;

/// etcd's default request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);
/// Pause between attempts while leadership settles.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

fn not_leader(leader_id: Option<u64>, leader_node: Option<MemberNode>) -> ForwardError {
    let err = if leader_id.is_some() {
        EtcdError::NotLeader
    } else {
        EtcdError::NoLeader
    };
    ForwardError {
        not_leader: true,
        leader: leader_id.zip(leader_node),
        ..ForwardError::etcd(err)
    }
}

/// Not leader, with the current leader from this member's Raft metrics.
pub fn not_leader_here(ctx: &StoreContext) -> ForwardError {
    let m = ctx.raft.metrics().borrow().clone();
    let node = m
        .current_leader
        .and_then(|l| m.membership_config.membership().get_node(&l).cloned());
    not_leader(m.current_leader, node)
}

fn is_leader(ctx: &StoreContext) -> bool {
    let m = ctx.raft.metrics().borrow().clone();
    m.current_leader == Some(m.id)
}

pub(crate) fn write_err(e: RaftError<u64, ClientWriteError<u64, MemberNode>>) -> ForwardError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            not_leader(f.leader_id, f.leader_node)
        }
        // Another membership change is still uncommitted (openraft refuses to overlap them;
        // etcd would queue): nothing was proposed, so the caller retries like "not leader".
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(p),
        )) => ForwardError {
            not_leader: true,
            ..ForwardError::failed_precondition(format!("etcdserver: {p}"))
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            ForwardError::failed_precondition(format!("etcdserver: {c}"))
        }
        RaftError::Fatal(_) => ForwardError::etcd(EtcdError::Stopped),
    }
}

async fn bounded<T>(
    fut: impl std::future::Future<Output = Result<T, ForwardError>>,
) -> Result<T, ForwardError> {
    tokio::time::timeout(REQUEST_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| Err(ForwardError::etcd(EtcdError::Timeout)))
}

/// Serves `op` on this member if it leads; otherwise answers "not leader" with a hint.
pub async fn execute_local(ctx: &StoreContext, op: LeaderOp) -> Result<LeaderReply, ForwardError> {
    match op {
        LeaderOp::Write(req) => {
            bounded(async {
                let (index, response) = ctx.proposer.propose(req).await?;
                Ok(LeaderReply::Write { index, response })
            })
            .await
        }
        LeaderOp::ReadIndex => {
            if crate::member::sole_voter::reads_locally(&ctx.raft.metrics().borrow()) {
                return Ok(LeaderReply::ReadIndex {
                    index: ctx.mvcc.applied_index(),
                });
            }
            bounded(async {
                let (read, _) = ctx.raft.get_read_log_id().await.map_err(|e| match e {
                    RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => {
                        not_leader(f.leader_id, f.leader_node)
                    }
                    // Heartbeats went unanswered (an election, a partition): retryable like
                    // "not leader" — leadership may be moving — and a timeout if it persists.
                    RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)) => ForwardError {
                        not_leader: true,
                        ..ForwardError::etcd(EtcdError::Timeout)
                    },
                    RaftError::Fatal(_) => ForwardError::etcd(EtcdError::Stopped),
                })?;
                Ok(LeaderReply::ReadIndex {
                    index: read.map_or(0, |l| l.index),
                })
            })
            .await
        }
        LeaderOp::LeaseKeepAlive(id) => {
            if !is_leader(ctx) {
                return Err(not_leader_here(ctx));
            }
            Ok(LeaderReply::Lease {
                ttl: ctx.lessor.renew(id).map(|ttl| (ttl, ttl)),
            })
        }
        LeaderOp::LeaseTimeToLive(id) => {
            if !is_leader(ctx) {
                return Err(not_leader_here(ctx));
            }
            Ok(LeaderReply::Lease {
                ttl: ctx.lessor.time_to_live(id),
            })
        }
        LeaderOp::Member(change) => bounded(member_change(ctx, change)).await,
        LeaderOp::MoveLeader(target) => {
            bounded(crate::member::transfer::move_leader(ctx, target)).await
        }
    }
}

fn member_missing() -> ForwardError {
    ForwardError::not_found("etcdserver: member not found")
}

async fn member_change(
    ctx: &StoreContext,
    change: MemberChange,
) -> Result<LeaderReply, ForwardError> {
    if !is_leader(ctx) {
        return Err(not_leader_here(ctx));
    }
    // Start from a committed membership: one still in flight (a member publishing its name,
    // say) would make openraft refuse this change.
    let _ = ctx
        .raft
        .wait(Some(REQUEST_TIMEOUT / 2))
        .metrics(
            |m| {
                let at = m.membership_config.log_id().as_ref().map(|l| l.index);
                at <= m.last_applied.as_ref().map(|l| l.index)
            },
            "membership committed",
        )
        .await;
    let metrics = ctx.raft.metrics().borrow().clone();
    let membership = metrics.membership_config.membership().clone();
    let node = |id: u64| membership.get_node(&id).cloned();
    let is_voter = |id: u64| membership.voter_ids().any(|v| v == id);
    let raft = &ctx.raft;
    let index = match change {
        MemberChange::Add {
            id,
            node: n,
            learner,
        } => {
            if node(id).is_some() {
                return Err(ForwardError::failed_precondition(
                    "etcdserver: member ID already exist",
                ));
            }
            let taken = membership
                .nodes()
                .any(|(_, m)| m.peer_urls.iter().any(|u| n.peer_urls.contains(u)));
            if taken {
                return Err(ForwardError::failed_precondition(
                    "etcdserver: Peer URLs already exists",
                ));
            }
            let added = raft.add_learner(id, n, false).await.map_err(write_err)?;
            if learner {
                added.log_id.index
            } else {
                let ids = BTreeSet::from([id]);
                let r = raft
                    .change_membership(ChangeMembers::AddVoterIds(ids), false)
                    .await
                    .map_err(write_err)?;
                r.log_id.index
            }
        }
        MemberChange::Remove { id } => {
            if node(id).is_none() {
                return Err(member_missing());
            }
            let ids = BTreeSet::from([id]);
            let change = if is_voter(id) {
                ChangeMembers::RemoveVoters(ids)
            } else {
                ChangeMembers::RemoveNodes(ids)
            };
            raft.change_membership(change, false)
                .await
                .map_err(write_err)?
                .log_id
                .index
        }
        MemberChange::Update { id, peer_urls } => {
            let mut n = node(id).ok_or_else(member_missing)?;
            n.peer_urls = peer_urls;
            let nodes = BTreeMap::from([(id, n)]);
            raft.change_membership(ChangeMembers::SetNodes(nodes), false)
                .await
                .map_err(write_err)?
                .log_id
                .index
        }
        MemberChange::Promote { id } => {
            node(id).ok_or_else(member_missing)?;
            if is_voter(id) {
                return Err(ForwardError::failed_precondition(
                    "etcdserver: can only promote a learner member",
                ));
            }
            // etcd promotes a learner only once it has 90% of the leader's log.
            let matched = metrics
                .replication
                .as_ref()
                .and_then(|r| r.get(&id).cloned().flatten())
                .map_or(0, |l| l.index);
            let last = metrics.last_log_index.unwrap_or(0);
            if matched * 10 < last * 9 {
                return Err(ForwardError::failed_precondition(
                    "etcdserver: can only promote a learner member which is in sync with leader",
                ));
            }
            let ids = BTreeSet::from([id]);
            raft.change_membership(ChangeMembers::AddVoterIds(ids), false)
                .await
                .map_err(write_err)?
                .log_id
                .index
        }
        MemberChange::Publish {
            id,
            name,
            client_urls,
        } => {
            let mut n = node(id).ok_or_else(member_missing)?;
            n.name = name;
            n.client_urls = client_urls;
            let nodes = BTreeMap::from([(id, n)]);
            raft.change_membership(ChangeMembers::SetNodes(nodes), false)
                .await
                .map_err(write_err)?
                .log_id
                .index
        }
    };
    Ok(LeaderReply::Member { index })
}

/// Serves `op` on the leader, wherever it is: locally when this member leads, otherwise over
/// the peer transport; retries (bounded) while no leader is known or leadership moves.
pub async fn leader_call(ctx: &StoreContext, op: LeaderOp) -> Result<LeaderReply, ForwardError> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    // Reads and lease queries change nothing, so they may be retried after any failure.
    let idempotent = matches!(
        op,
        LeaderOp::ReadIndex
            | LeaderOp::LeaseTimeToLive(_)
            | LeaderOp::LeaseKeepAlive(_)
            | LeaderOp::MoveLeader(_)
    );
    let mut last: ForwardError;
    loop {
        let e = match execute_local(ctx, op.clone()).await {
            Ok(r) => return Ok(r),
            Err(e) if !e.not_leader => return Err(e),
            Err(e) => e,
        };
        last = e.clone();
        if let Some((_, node)) = e.leader.filter(|(id, _)| *id != ctx.member_id) {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let answer = ctx
                .peers
                .call::<Result<LeaderReply, ForwardError>>(
                    &node.peer_urls,
                    PeerRequest::Leader(op.clone()),
                    remaining.max(Duration::from_millis(100)),
                )
                .await;
            match answer {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(fe)) if !fe.not_leader => return Err(fe),
                Ok(Err(fe)) => last = fe,
                Err(pe) if idempotent || pe.not_sent() => {
                    tracing::debug!(error = %pe, "forwarding to the leader");
                    last = ForwardError::unavailable(pe.to_string());
                }
                Err(pe) => return Err(ForwardError::unavailable(pe.to_string())),
            }
        }
        if Instant::now() + RETRY_PAUSE >= deadline {
            return Err(last);
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Waits (bounded) until this member applied Raft log `index`.
pub async fn wait_applied(ctx: &StoreContext, index: u64) -> Result<(), ForwardError> {
    // The state machine's own mark is set before it hands results back, so a write applied
    // here passes at once; Raft's metrics lag behind it (they are flushed later).
    if ctx.mvcc.applied_index() >= index {
        return Ok(());
    }
    let applied = ctx
        .raft
        .metrics()
        .borrow()
        .last_applied
        .map_or(0, |l| l.index);
    if applied >= index {
        return Ok(());
    }
    ctx.raft
        .wait(Some(REQUEST_TIMEOUT))
        .applied_index_at_least(Some(index), "catching up with the leader")
        .await
        .map(|_| ())
        .map_err(|_| {
            tracing::warn!(
                index,
                applied = ctx.mvcc.applied_index(),
                "gave up waiting for this member to apply a read's index"
            );
            ForwardError::etcd(EtcdError::Timeout)
        })
}

/// etcd's "publish": once the cluster knows this member, record its name and client URLs in
/// the membership (MemberList shows them), retrying until it sticks or the server stops.
pub async fn publish_self(
    ctx: std::sync::Arc<StoreContext>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let current = ctx
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&ctx.member_id)
            .cloned();
        if let Some(node) = current {
            if node.name == ctx.name && node.client_urls == ctx.advertise_client_urls {
                tracing::info!("published member name and client URLs");
                return;
            }
            let change = MemberChange::Publish {
                id: ctx.member_id,
                name: ctx.name.clone(),
                client_urls: ctx.advertise_client_urls.clone(),
            };
            if let Err(e) = leader_call(&ctx, LeaderOp::Member(change)).await {
                tracing::debug!(error = %e, "publishing member attributes");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}
