//! The scheduling queue, pure (time is passed in): `active` pods wait for a cycle; a pod that did
//! not fit goes to `unschedulable` until a cluster change (node or pod) might help, and then waits
//! out its backoff (1 s doubling to 10 s, upstream's defaults) before it is tried again. Pods that
//! sit unschedulable for 5 minutes are retried anyway, like upstream's periodic flush.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::pod_info::PodKey;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_UNSCHEDULABLE_DURATION: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
pub struct SchedulingQueue {
    /// FIFO of (pod, generation); an entry whose generation is no longer the pod's in `in_active` was
    /// removed (lazily: taking it out of the deque would be O(n) per pod).
    active: VecDeque<(PodKey, u64)>,
    in_active: HashMap<PodKey, u64>,
    generation: u64,
    /// Ready time of each backing-off pod.
    backoff: HashMap<PodKey, Instant>,
    /// Since when each pod has been unschedulable.
    unschedulable: HashMap<PodKey, Instant>,
    attempts: HashMap<PodKey, u32>,
    /// Scheduling-relevant fingerprint of each known pod, to tell real updates from status writes.
    fingerprints: HashMap<PodKey, u64>,
    /// When the pod last failed (its backoff runs from here).
    last_failure: HashMap<PodKey, Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLengths {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
}

impl SchedulingQueue {
    pub fn backoff_duration(attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(16);
        (INITIAL_BACKOFF * (1u32 << shift)).min(MAX_BACKOFF)
    }

    fn push_active(&mut self, key: PodKey) {
        if !self.in_active.contains_key(&key) {
            self.generation += 1;
            self.in_active.insert(key.clone(), self.generation);
            self.active.push_back((key, self.generation));
        }
    }

    fn backoff_ready(&self, key: &str) -> Option<Instant> {
        let failed = self.last_failure.get(key)?;
        let attempts = self.attempts.get(key).copied().unwrap_or(0);
        Some(*failed + Self::backoff_duration(attempts))
    }

    /// A pending pod appeared or changed. New pods go straight to active; a known unschedulable
    /// pod whose spec changed may fit now, so it is retried (after its backoff).
    pub fn add_or_update(&mut self, key: &str, fingerprint: u64, now: Instant) {
        match self.fingerprints.insert(key.to_string(), fingerprint) {
            None => {
                if !self.backoff.contains_key(key) && !self.unschedulable.contains_key(key) {
                    self.push_active(key.to_string());
                }
            }
            Some(old) if old != fingerprint => {
                if self.unschedulable.remove(key).is_some() {
                    self.requeue_after_backoff(key, now);
                }
            }
            Some(_) => {}
        }
    }

    fn requeue_after_backoff(&mut self, key: &str, now: Instant) {
        match self.backoff_ready(key) {
            Some(ready) if ready > now => {
                self.backoff.insert(key.to_string(), ready);
            }
            _ => self.push_active(key.to_string()),
        }
    }

    /// The pod was bound, deleted, or is no longer ours: forget it everywhere.
    pub fn remove(&mut self, key: &str) {
        self.in_active.remove(key);
        self.backoff.remove(key);
        self.unschedulable.remove(key);
        self.attempts.remove(key);
        self.fingerprints.remove(key);
        self.last_failure.remove(key);
    }

    /// Forgets every pod the predicate rejects (after a relist: pods that no longer exist).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<PodKey> = self
            .fingerprints
            .keys()
            .filter(|k| !keep(k))
            .cloned()
            .collect();
        for key in gone {
            self.remove(&key);
        }
    }

    /// No node fits: park the pod until the cluster changes.
    pub fn mark_unschedulable(&mut self, key: &str, now: Instant) {
        *self.attempts.entry(key.to_string()).or_insert(0) += 1;
        self.last_failure.insert(key.to_string(), now);
        self.unschedulable.insert(key.to_string(), now);
    }

    /// A transient error (API write failed): retry after the backoff without waiting for an event.
    pub fn mark_error(&mut self, key: &str, now: Instant) {
        *self.attempts.entry(key.to_string()).or_insert(0) += 1;
        self.last_failure.insert(key.to_string(), now);
        let ready = self.backoff_ready(key).unwrap_or(now);
        self.backoff.insert(key.to_string(), ready);
    }

    /// What an unschedulable pod waited for happened (its preemption's API calls finished): it is
    /// retried after its backoff without waiting for a cluster event.
    pub fn activate(&mut self, key: &str, now: Instant) {
        if self.unschedulable.remove(key).is_some() {
            self.requeue_after_backoff(key, now);
        }
    }

    /// A node or pod changed in a way that may make room: every unschedulable pod is retried.
    pub fn move_all_to_active_or_backoff(&mut self, now: Instant) {
        let keys: Vec<PodKey> = self.unschedulable.drain().map(|(k, _)| k).collect();
        for key in keys {
            self.requeue_after_backoff(&key, now);
        }
    }

    /// Moves due pods (finished backoff, or unschedulable for too long) to active, then pops one.
    pub fn pop(&mut self, now: Instant) -> Option<PodKey> {
        let due: Vec<PodKey> = self
            .backoff
            .iter()
            .filter(|(_, ready)| **ready <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.backoff.remove(&key);
            self.push_active(key);
        }
        let stale: Vec<PodKey> = self
            .unschedulable
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= MAX_UNSCHEDULABLE_DURATION)
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            self.unschedulable.remove(&key);
            self.requeue_after_backoff(&key, now);
        }
        while let Some((key, generation)) = self.active.pop_front() {
            if self.in_active.get(&key) == Some(&generation) {
                self.in_active.remove(&key);
                return Some(key);
            }
        }
        None
    }

    /// When the next pod leaves backoff or the periodic flush is due, if ever.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let backoff = self.backoff.values().min().copied();
        let flush = self
            .unschedulable
            .values()
            .min()
            .map(|since| *since + MAX_UNSCHEDULABLE_DURATION);
        match (backoff, flush) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn lengths(&self) -> QueueLengths {
        QueueLengths {
            active: self.in_active.len(),
            backoff: self.backoff.len(),
            unschedulable: self.unschedulable.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_pods_are_fifo_and_not_duplicated() {
        let mut q = SchedulingQueue::default();
        let now = Instant::now();
        q.add_or_update("ns/a", 1, now);
        q.add_or_update("ns/b", 1, now);
        q.add_or_update("ns/a", 1, now);
        assert_eq!(q.pop(now).as_deref(), Some("ns/a"));
        assert_eq!(q.pop(now).as_deref(), Some("ns/b"));
        assert_eq!(q.pop(now), None);
    }

    #[test]
    fn unschedulable_pods_wait_for_a_cluster_event_then_their_backoff() {
        let mut q = SchedulingQueue::default();
        let t0 = Instant::now();
        q.add_or_update("ns/a", 1, t0);
        assert!(q.pop(t0).is_some());
        q.mark_unschedulable("ns/a", t0);
        assert_eq!(
            q.pop(t0 + Duration::from_secs(30)),
            None,
            "no event, no retry"
        );
        // A status-only update (same fingerprint) changes nothing.
        q.add_or_update("ns/a", 1, t0);
        assert_eq!(q.lengths().unschedulable, 1);
        q.move_all_to_active_or_backoff(t0 + Duration::from_millis(100));
        assert_eq!(q.lengths().backoff, 1);
        assert_eq!(
            q.pop(t0 + Duration::from_millis(500)),
            None,
            "still backing off"
        );
        assert_eq!(q.next_wakeup(), Some(t0 + INITIAL_BACKOFF));
        assert_eq!(q.pop(t0 + INITIAL_BACKOFF).as_deref(), Some("ns/a"));
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        assert_eq!(SchedulingQueue::backoff_duration(1), Duration::from_secs(1));
        assert_eq!(SchedulingQueue::backoff_duration(2), Duration::from_secs(2));
        assert_eq!(SchedulingQueue::backoff_duration(4), Duration::from_secs(8));
        assert_eq!(SchedulingQueue::backoff_duration(9), MAX_BACKOFF);
    }

    #[test]
    fn spec_change_retries_an_unschedulable_pod() {
        let mut q = SchedulingQueue::default();
        let t0 = Instant::now();
        q.add_or_update("ns/a", 1, t0);
        q.pop(t0);
        q.mark_unschedulable("ns/a", t0);
        q.add_or_update("ns/a", 2, t0 + Duration::from_secs(5));
        assert_eq!(q.pop(t0 + Duration::from_secs(5)).as_deref(), Some("ns/a"));
    }

    #[test]
    fn errors_retry_after_backoff_and_removed_pods_vanish() {
        let mut q = SchedulingQueue::default();
        let t0 = Instant::now();
        q.add_or_update("ns/a", 1, t0);
        q.pop(t0);
        q.mark_error("ns/a", t0);
        assert_eq!(q.pop(t0), None);
        assert_eq!(q.pop(t0 + INITIAL_BACKOFF).as_deref(), Some("ns/a"));
        q.mark_unschedulable("ns/a", t0);
        q.remove("ns/a");
        q.move_all_to_active_or_backoff(t0 + MAX_BACKOFF);
        assert_eq!(q.pop(t0 + MAX_BACKOFF), None);
        assert_eq!(q.next_wakeup(), None);
    }

    #[test]
    fn an_activated_pod_is_retried_after_its_backoff() {
        let mut q = SchedulingQueue::default();
        let t0 = Instant::now();
        q.add_or_update("ns/a", 1, t0);
        q.pop(t0);
        q.mark_unschedulable("ns/a", t0);
        q.activate("ns/b", t0);
        q.activate("ns/a", t0);
        assert_eq!(q.lengths().unschedulable, 0);
        assert_eq!(q.pop(t0), None, "still backing off");
        assert_eq!(q.pop(t0 + INITIAL_BACKOFF).as_deref(), Some("ns/a"));
    }

    #[test]
    fn long_unschedulable_pods_are_flushed() {
        let mut q = SchedulingQueue::default();
        let t0 = Instant::now();
        q.add_or_update("ns/a", 1, t0);
        q.pop(t0);
        q.mark_unschedulable("ns/a", t0);
        assert_eq!(
            q.pop(t0 + MAX_UNSCHEDULABLE_DURATION).as_deref(),
            Some("ns/a")
        );
    }

    #[test]
    fn a_removed_pod_is_not_popped_and_can_come_back() {
        let mut q = SchedulingQueue::default();
        let now = Instant::now();
        q.add_or_update("ns/a", 1, now);
        q.add_or_update("ns/b", 1, now);
        q.remove("ns/a");
        assert_eq!(q.lengths().active, 1);
        q.add_or_update("ns/a", 1, now);
        // Back at the end of the line, not at its old place.
        assert_eq!(q.pop(now).as_deref(), Some("ns/b"));
        assert_eq!(q.pop(now).as_deref(), Some("ns/a"));
        assert_eq!(q.pop(now), None, "the stale entry is skipped");
    }
}
