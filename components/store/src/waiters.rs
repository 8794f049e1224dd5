//! Proposals waiting for their answer, so the state machine can hand a write's response
//! straight to its caller.
//!
//! openraft 0.9 routes every response from the state machine back through its core task,
//! and that task spends each log append blocked on the fsync: the answers of one batch then
//! wait out the next batch's fsync. The proposer registers each proposal here under an id it
//! puts into the command (`StoreRequest::proposal`); the state machine of the member that
//! proposed it sends the response as soon as the entry is applied and published. Entries
//! proposed elsewhere, or replayed after a restart, find nobody here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::raft::types::StoreResponse;

/// Applied at Raft log index, with the command's response.
pub type Answer = (u64, StoreResponse);

/// One proposal's channels: its answer, and word that its log append is synced.
struct Waiting {
    answer: oneshot::Sender<Answer>,
    flushed: Option<oneshot::Sender<()>>,
}

pub struct Waiters {
    /// Proposal ids start at a random point per process, so ids of a past run (in log entries
    /// replayed after a restart) or of another member do not meet a waiter here.
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, Waiting>>,
}

impl Default for Waiters {
    fn default() -> Self {
        Self::new()
    }
}

impl Waiters {
    pub fn new() -> Self {
        Self {
            next: AtomicU64::new(rand::random::<u64>() >> 1 | 1),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh proposal id (never 0), the receiver its answer arrives on and the one that
    /// hears when its log entry is synced. The caller must [`Self::forget`] the id once it
    /// stops waiting.
    pub fn register(&self) -> (u64, oneshot::Receiver<Answer>, oneshot::Receiver<()>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed).max(1);
        let (answer, answer_rx) = oneshot::channel();
        let (flushed, flushed_rx) = oneshot::channel();
        let w = Waiting {
            answer,
            flushed: Some(flushed),
        };
        self.waiting().insert(id, w);
        (id, answer_rx, flushed_rx)
    }

    /// The log entries of these proposals are synced (called by the log store).
    pub fn flushed(&self, ids: impl Iterator<Item = u64>) {
        let mut waiting = self.waiting();
        if waiting.is_empty() {
            return;
        }
        for id in ids {
            if let Some(tx) = waiting.get_mut(&id).and_then(|w| w.flushed.take()) {
                let _ = tx.send(());
            }
        }
    }

    pub fn forget(&self, id: u64) {
        self.waiting().remove(&id);
    }

    /// The sender for proposal `id`, if someone here waits for it.
    pub fn take(&self, id: u64) -> Option<oneshot::Sender<Answer>> {
        if id == 0 {
            return None;
        }
        self.waiting().remove(&id).map(|w| w.answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reaches_its_waiter_once() {
        let w = Waiters::new();
        let (id, mut rx, mut flushed) = w.register();
        assert_ne!(id, 0);
        w.flushed([id].into_iter());
        assert!(flushed.try_recv().is_ok());
        let tx = w.take(id).expect("registered");
        assert!(w.take(id).is_none());
        tx.send((4, StoreResponse::default())).unwrap();
        assert_eq!(rx.try_recv().unwrap().0, 4);
    }

    #[test]
    fn forgotten_and_unknown_ids_find_nobody() {
        let w = Waiters::new();
        let (id, _rx, _flushed) = w.register();
        w.forget(id);
        assert!(w.take(id).is_none());
        assert!(w.take(0).is_none());
        assert!(w.take(id.wrapping_add(12345)).is_none());
    }
}
