//! The lessor: lease deadlines, kept in memory on every member.
//!
//! Leases themselves (id, granted TTL, attached keys) are replicated state; their deadlines are
//! not, as in etcd: a member that becomes leader (or restarts) gives every lease a full TTL,
//! and only the leader revokes expired leases, by proposing LeaseRevoke through Raft.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use etcd_client::proto::PbLeaseRevokeRequest;
use tokio::sync::watch;

use crate::command::{store_request::Op, KilnRaft, StoreRequest};
use crate::storage::mvcc::LeaseRecord;

/// etcd's minimum lease TTL with default timing (1.5 × election timeout, rounded up).
pub const MIN_TTL_SECONDS: i64 = 2;
/// etcd's maximum lease TTL.
pub const MAX_TTL_SECONDS: i64 = 9_000_000_000;

/// How long to wait before proposing the revocation of the same expired lease again.
const REVOKE_RETRY: Duration = Duration::from_secs(3);
const EXPIRY_TICK: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy)]
struct Timer {
    ttl: i64,
    deadline: Instant,
    revoke_proposed: Option<Instant>,
}

#[derive(Default)]
pub struct Lessor {
    timers: Mutex<HashMap<i64, Timer>>,
}

impl Lessor {
    pub fn new(records: &[LeaseRecord]) -> Self {
        let lessor = Self::default();
        lessor.reset(records);
        lessor
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i64, Timer>> {
        // A panic while holding this lock leaves plain data behind; keep serving.
        self.timers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces all timers, giving every lease a full TTL from now.
    pub fn reset(&self, records: &[LeaseRecord]) {
        let now = Instant::now();
        let mut timers = self.lock();
        timers.clear();
        for r in records {
            timers.insert(r.id, timer(r.ttl, now));
        }
    }

    pub fn granted(&self, record: LeaseRecord) {
        self.lock()
            .insert(record.id, timer(record.ttl, Instant::now()));
    }

    pub fn revoked(&self, id: i64) {
        self.lock().remove(&id);
    }

    /// Renews lease `id`; returns its TTL, or `None` if no such lease or it already expired
    /// (its revocation is on the way, as in etcd).
    pub fn renew(&self, id: i64) -> Option<i64> {
        let now = Instant::now();
        let mut timers = self.lock();
        let t = timers.get_mut(&id)?;
        if t.deadline <= now {
            return None;
        }
        *t = timer(t.ttl, now);
        Some(t.ttl)
    }

    /// (remaining seconds, granted TTL) of lease `id`.
    pub fn time_to_live(&self, id: i64) -> Option<(i64, i64)> {
        let timers = self.lock();
        let t = timers.get(&id)?;
        let remaining = t.deadline.saturating_duration_since(Instant::now());
        Some((remaining.as_secs() as i64, t.ttl))
    }

    /// Expired leases whose revocation is due (again), marked as proposed now.
    fn due(&self) -> Vec<i64> {
        let now = Instant::now();
        let mut out = Vec::new();
        for (id, t) in self.lock().iter_mut() {
            let retry_due = t
                .revoke_proposed
                .is_none_or(|at| now.duration_since(at) >= REVOKE_RETRY);
            if t.deadline <= now && retry_due {
                t.revoke_proposed = Some(now);
                out.push(*id);
            }
        }
        out
    }
}

fn timer(ttl: i64, now: Instant) -> Timer {
    let secs = ttl.clamp(0, MAX_TTL_SECONDS) as u64;
    Timer {
        ttl,
        deadline: now + Duration::from_secs(secs),
        revoke_proposed: None,
    }
}

/// Revokes expired leases through Raft while this member leads, until `shutdown` flips.
pub async fn run_expiry(lessor: Arc<Lessor>, raft: KilnRaft, mut shutdown: watch::Receiver<bool>) {
    let mut was_leader = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EXPIRY_TICK) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        let metrics = raft.metrics().borrow().clone();
        let leader = metrics.current_leader == Some(metrics.id);
        if !leader {
            was_leader = false;
            continue;
        }
        if !was_leader {
            // New leader: deadlines seen as a follower are not trusted; start afresh.
            let ids: Vec<LeaseRecord> = lessor
                .lock()
                .iter()
                .map(|(id, t)| LeaseRecord {
                    id: *id,
                    ttl: t.ttl,
                })
                .collect();
            lessor.reset(&ids);
            was_leader = true;
        }
        for id in lessor.due() {
            let req = StoreRequest::new(Op::LeaseRevoke(PbLeaseRevokeRequest { id }));
            match raft.client_write(req).await {
                Ok(resp) if resp.data.error_code == 0 => {
                    tracing::info!(lease = id, "lease expired and revoked");
                }
                Ok(resp) => {
                    tracing::debug!(lease = id, error = %resp.data.error_message, "revoking expired lease");
                    lessor.revoked(id);
                }
                Err(e) => tracing::warn!(lease = id, error = %e, "proposing lease revocation"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renew_resets_live_leases_and_refuses_expired_ones() {
        let lessor = Lessor::new(&[
            LeaseRecord { id: 1, ttl: 10 },
            LeaseRecord { id: 2, ttl: 0 },
        ]);
        assert_eq!(lessor.renew(1), Some(10));
        assert_eq!(lessor.renew(2), None, "already expired");
        assert_eq!(lessor.renew(3), None, "unknown");
        assert_eq!(lessor.due(), vec![2]);
        assert!(
            lessor.due().is_empty(),
            "revocation is not proposed twice at once"
        );
        lessor.revoked(1);
        assert_eq!(lessor.time_to_live(1), None);
    }
}
