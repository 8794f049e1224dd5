//! MoveLeader: handing leadership to another voter.
//!
//! openraft 0.9 has no leader transfer (no TimeoutNow message), so the leader does it in steps:
//! it waits until the transferee has its whole log (a candidate with less log loses), stops
//! its own heartbeats and elections so the voters' leader leases run out, and asks the
//! transferee to campaign. The transferee campaigns until it leads; its first vote request
//! that finds the leases expired wins (its log is complete), and the old leader follows the
//! higher term. The old leader's heartbeats and elections come back however this ends.

use std::time::Duration;

use tokio::time::Instant;

use crate::command::KilnRaft;
use crate::etcd_error::EtcdError;
use crate::member::context::StoreContext;
use crate::peer::forward::{ForwardError, LeaderReply};
use crate::peer::PeerRequest;

/// Bound on a whole transfer (etcdctl gives up after 5 s by default).
const TRANSFER_TIMEOUT: Duration = Duration::from_millis(4500);
/// How long a campaign waits for its vote requests before trying a higher term.
const CAMPAIGN_ROUND: Duration = Duration::from_millis(300);
const POLL: Duration = Duration::from_millis(20);

/// One transfer at a time: a second one finishing first would turn heartbeats back on under
/// the first.
static IN_PROGRESS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Turns the old leader's heartbeats and elections off for as long as it lives.
struct Pause<'a>(&'a KilnRaft);

impl<'a> Pause<'a> {
    fn new(raft: &'a KilnRaft) -> Self {
        raft.runtime_config().heartbeat(false);
        raft.runtime_config().elect(false);
        Pause(raft)
    }
}

impl Drop for Pause<'_> {
    fn drop(&mut self) {
        self.0.runtime_config().heartbeat(true);
        self.0.runtime_config().elect(true);
    }
}

fn timed_out() -> ForwardError {
    ForwardError::etcd(EtcdError::LeaderTransferTimeout)
}

/// On the leader: moves leadership to `target`.
pub async fn move_leader(ctx: &StoreContext, target: u64) -> Result<LeaderReply, ForwardError> {
    let m = ctx.raft.metrics().borrow().clone();
    if m.current_leader != Some(m.id) {
        return Err(crate::member::leader::not_leader_here(ctx));
    }
    if target == m.id {
        return Ok(LeaderReply::Moved);
    }
    let membership = m.membership_config.membership();
    let node = match membership.get_node(&target) {
        Some(n) if membership.voter_ids().any(|v| v == target) => n.clone(),
        _ => return Err(ForwardError::etcd(EtcdError::BadLeaderTransferee)),
    };
    let deadline = Instant::now() + TRANSFER_TIMEOUT;
    let _one = tokio::time::timeout(TRANSFER_TIMEOUT, IN_PROGRESS.lock())
        .await
        .map_err(|_| timed_out())?;
    // The transferee must hold everything the leader has.
    loop {
        let m = ctx.raft.metrics().borrow().clone();
        let matched = m
            .replication
            .as_ref()
            .and_then(|r| r.get(&target).cloned().flatten())
            .map(|l| l.index);
        if matched.is_some() && matched >= m.last_log_index {
            break;
        }
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        tokio::time::sleep(POLL).await;
    }
    let _pause = Pause::new(&ctx.raft);
    tracing::info!(target = %format!("{target:x}"), "transferring leadership");
    let remaining = deadline.saturating_duration_since(Instant::now());
    let answer = ctx
        .peers
        .call::<Result<(), ForwardError>>(&node.peer_urls, PeerRequest::Campaign, remaining)
        .await;
    match answer {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(e) => {
            return Err(ForwardError::unavailable(format!(
                "etcdserver: leader transfer: {e}"
            )))
        }
    }
    // Return once this member follows the new leader, so the next request lands right.
    while ctx.raft.metrics().borrow().current_leader != Some(target) {
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        tokio::time::sleep(POLL).await;
    }
    tracing::info!(target = %format!("{target:x}"), "leadership transferred");
    Ok(LeaderReply::Moved)
}

/// On the transferee: campaigns (in rising terms) until it leads.
pub async fn campaign(ctx: &StoreContext) -> Result<(), ForwardError> {
    let deadline = Instant::now() + TRANSFER_TIMEOUT;
    loop {
        if ctx.raft.metrics().borrow().current_leader == Some(ctx.member_id) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        ctx.raft
            .trigger()
            .elect()
            .await
            .map_err(|_| ForwardError::etcd(EtcdError::Stopped))?;
        let _ = ctx
            .raft
            .wait(Some(CAMPAIGN_ROUND))
            .metrics(
                |m| m.current_leader == Some(ctx.member_id),
                "leading after a campaign",
            )
            .await;
    }
}
