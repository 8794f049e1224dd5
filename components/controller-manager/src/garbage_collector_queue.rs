//! The collector's work queue, with client-go's workqueue semantics: a UID waits at most once, is
//! handed to one worker at a time (added again while a worker has it, it comes back once that
//! worker is done), and a failed one returns after a per-UID exponential back-off.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The first retry's delay; doubled per consecutive failure of the same UID.
const RETRY_BASE: Duration = Duration::from_millis(250);
/// The longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(30);

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    /// Waiting to be handed out (in `queue`, or to be put there once its worker is done).
    dirty: HashSet<String>,
    /// With a worker now.
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
}

#[derive(Default)]
pub struct WorkQueue {
    state: Mutex<State>,
    ready: Notify,
}

impl WorkQueue {
    pub fn new() -> Arc<WorkQueue> {
        Arc::new(WorkQueue::default())
    }

    pub fn add(&self, uid: String) {
        let mut s = self.state.lock().expect("gc queue");
        if !s.dirty.insert(uid.clone()) || s.processing.contains(&uid) {
            return;
        }
        s.queue.push_back(uid);
        drop(s);
        self.ready.notify_one();
    }

    pub fn add_after(self: &Arc<Self>, uid: String, delay: Duration) {
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(uid);
        });
    }

    /// The next UID, once there is one; the caller owns it until [`WorkQueue::done`].
    pub async fn get(&self) -> String {
        loop {
            if let Some(uid) = self.try_get() {
                return uid;
            }
            self.ready.notified().await;
        }
    }

    pub fn try_get(&self) -> Option<String> {
        let mut s = self.state.lock().expect("gc queue");
        let uid = s.queue.pop_front()?;
        s.dirty.remove(&uid);
        s.processing.insert(uid.clone());
        Some(uid)
    }

    pub fn done(&self, uid: &str) {
        let mut s = self.state.lock().expect("gc queue");
        s.processing.remove(uid);
        if s.dirty.contains(uid) {
            s.queue.push_back(uid.to_string());
            drop(s);
            self.ready.notify_one();
        }
    }

    /// Back after this UID's next back-off delay.
    pub fn retry(self: &Arc<Self>, uid: String) {
        let delay = {
            let mut s = self.state.lock().expect("gc queue");
            let n = s.failures.entry(uid.clone()).or_default();
            *n = n.saturating_add(1);
            backoff(*n)
        };
        self.add_after(uid, delay);
    }

    /// The UID succeeded: its next failure starts the back-off over.
    pub fn forget(&self, uid: &str) {
        self.state.lock().expect("gc queue").failures.remove(uid);
    }

    /// UIDs waiting for a worker.
    pub fn queued(&self) -> usize {
        self.state.lock().expect("gc queue").queue.len()
    }
}

/// The delay before the `failures`-th retry.
fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    RETRY_BASE.saturating_mul(factor).min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_waits_once_in_order() {
        let q = WorkQueue::new();
        q.add("a".into());
        q.add("b".into());
        q.add("a".into());
        assert_eq!(q.queued(), 2);
        assert_eq!(q.try_get().as_deref(), Some("a"));
        assert_eq!(q.try_get().as_deref(), Some("b"));
        assert_eq!(q.try_get(), None);
    }

    #[test]
    fn a_uid_added_while_processed_comes_back_after_done() {
        let q = WorkQueue::new();
        q.add("a".into());
        let a = q.try_get().unwrap();
        // Not handed to a second worker meanwhile, however often it is added.
        q.add("a".into());
        q.add("a".into());
        assert_eq!(q.try_get(), None);
        q.done(&a);
        assert_eq!(q.try_get().as_deref(), Some("a"));
        q.done("a");
        assert_eq!(q.try_get(), None);
    }

    #[test]
    fn retries_back_off_exponentially_up_to_a_bound() {
        assert_eq!(backoff(1), RETRY_BASE);
        assert_eq!(backoff(2), RETRY_BASE * 2);
        assert_eq!(backoff(4), RETRY_BASE * 8);
        assert_eq!(backoff(40), RETRY_MAX);
    }

    #[tokio::test]
    async fn a_waiting_worker_gets_what_is_added_later() {
        let q = WorkQueue::new();
        let worker = {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        };
        tokio::task::yield_now().await;
        q.add("late".into());
        assert_eq!(worker.await.unwrap(), "late");
        q.retry("again".into());
        assert_eq!(q.get().await, "again");
    }
}
