//! Callers waiting for the commands they proposed, so the state machine can hand each its
//! response directly.
//!
//! openraft 0.9 routes every response from the state machine back through its core task,
//! and that task spends each log append blocked on the fsync: the answers of one batch then
//! wait out the next batch's fsync. The proposer registers each batch here under an id it
//! puts into the command (`StoreRequest::proposal`), with one channel per caller; the state
//! machine of the member that proposed it answers every caller as soon as the entry is
//! applied and published. Whoever takes a batch's entry answers all of its callers, exactly
//! once: the state machine (applied), or the proposer when openraft reports the proposal
//! failed or never answers. Entries proposed elsewhere, or replayed after a restart, find
//! nobody here.
//!
//! Every caller waits on its own oneshot channel, nothing shared: a caller that gives up
//! only drops its receiver.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::command::{store_response, StoreResponse};
use crate::peer::forward::ForwardError;

/// Applied at Raft log index, with the command's own response; or why it was not.
pub type Answer = Result<(u64, StoreResponse), ForwardError>;

/// The callers of one proposal, in the order of the batch's commands.
pub struct Callers {
    /// The proposal is one command as it is, not a batch entry.
    lone: bool,
    senders: Vec<oneshot::Sender<Answer>>,
}

impl Callers {
    pub fn new(lone: bool, senders: Vec<oneshot::Sender<Answer>>) -> Self {
        Self { lone, senders }
    }

    /// Answers every caller: a batch's response is split into its commands' responses.
    /// Callers that stopped waiting are fine to miss.
    pub fn answer(self, answer: Answer) {
        let (index, response) = match answer {
            Err(e) => {
                for tx in self.senders {
                    let _ = tx.send(Err(e.clone()));
                }
                return;
            }
            Ok(r) => r,
        };
        if self.lone {
            if let Some(tx) = self.senders.into_iter().next() {
                let _ = tx.send(Ok((index, response)));
            }
            return;
        }
        let parts = match response.result {
            Some(store_response::Result::Batch(b)) if b.responses.len() == self.senders.len() => {
                b.responses
            }
            _ => {
                let e = ForwardError::internal(
                    "state machine answered a command batch with something else",
                );
                for tx in self.senders {
                    let _ = tx.send(Err(e.clone()));
                }
                return;
            }
        };
        for (tx, part) in self.senders.into_iter().zip(parts) {
            let _ = tx.send(Ok((index, part)));
        }
    }
}

/// One proposal's callers and word that its log append is synced.
struct Waiting {
    callers: Callers,
    /// Dropped unsent when the entry is taken: the proposer's wait ends either way.
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

    /// Registers `callers` under a fresh proposal id (never 0). The receiver hears when the
    /// proposal's log entry is synced, or closes once the proposal is answered (whichever
    /// comes first). Whoever registers must see to it that the id is taken in the end.
    pub fn register(&self, callers: Callers) -> (u64, oneshot::Receiver<()>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed).max(1);
        let (flushed, flushed_rx) = oneshot::channel();
        let w = Waiting {
            callers,
            flushed: Some(flushed),
        };
        self.waiting().insert(id, w);
        (id, flushed_rx)
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

    /// The callers of proposal `id`, if they are still waiting here; they are then the
    /// taker's to answer.
    pub fn take(&self, id: u64) -> Option<Callers> {
        if id == 0 {
            return None;
        }
        self.waiting().remove(&id).map(|w| w.callers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::StoreBatchResponse;

    fn callers(n: usize, lone: bool) -> (Callers, Vec<oneshot::Receiver<Answer>>) {
        let (txs, rxs) = (0..n).map(|_| oneshot::channel()).unzip();
        (Callers::new(lone, txs), rxs)
    }

    fn revision_of(r: &StoreResponse) -> i64 {
        r.error_code as i64
    }

    #[test]
    fn a_batch_answer_reaches_each_caller_with_its_own_part_once() {
        let w = Waiters::new();
        let (c, mut rxs) = callers(3, false);
        let (id, mut flushed) = w.register(c);
        assert_ne!(id, 0);
        w.flushed([id].into_iter());
        assert!(flushed.try_recv().is_ok());
        let parts = (0..3)
            .map(|i| StoreResponse {
                error_code: i,
                ..Default::default()
            })
            .collect();
        let whole = StoreResponse::ok(store_response::Result::Batch(StoreBatchResponse {
            responses: parts,
        }));
        w.take(id).expect("registered").answer(Ok((7, whole)));
        assert!(w.take(id).is_none(), "taken once");
        for (i, rx) in rxs.iter_mut().enumerate() {
            let (index, part) = rx.try_recv().unwrap().unwrap();
            assert_eq!((index, revision_of(&part)), (7, i as i64));
        }
    }

    #[test]
    fn an_error_reaches_every_caller_and_a_taken_entry_closes_the_flush_wait() {
        let w = Waiters::new();
        let (c, mut rxs) = callers(2, false);
        let (id, mut flushed) = w.register(c);
        let callers = w.take(id).expect("registered");
        // Taken before its append was synced: the proposer's wait ends all the same.
        assert!(matches!(
            flushed.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        callers.answer(Err(ForwardError::unavailable("gone")));
        for rx in rxs.iter_mut() {
            assert!(rx.try_recv().unwrap().is_err());
        }
    }

    #[test]
    fn a_batch_answered_with_the_wrong_shape_fails_its_callers() {
        let (c, mut rxs) = callers(2, false);
        c.answer(Ok((3, StoreResponse::default())));
        for rx in rxs.iter_mut() {
            assert!(rx.try_recv().unwrap().is_err());
        }
        let (c, mut rxs) = callers(1, true);
        c.answer(Ok((3, StoreResponse::default())));
        assert_eq!(rxs[0].try_recv().unwrap().unwrap().0, 3);
    }

    #[test]
    fn unknown_ids_find_nobody() {
        let w = Waiters::new();
        let (c, _rxs) = callers(1, true);
        let (id, _flushed) = w.register(c);
        assert!(w.take(0).is_none());
        assert!(w.take(id.wrapping_add(12345)).is_none());
        assert!(w.take(id).is_some());
    }
}
