//! A work queue for the storage controllers, like client-go's: a key waits at most once, so a burst
//! of events for one object is one sync, and keys can come back after a delay (retries).

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

pub struct Queue<K> {
    waiting: Mutex<(VecDeque<K>, HashSet<K>)>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Send + 'static> Queue<K> {
    pub fn new() -> Arc<Queue<K>> {
        Arc::new(Queue {
            waiting: Mutex::new((VecDeque::new(), HashSet::new())),
            notify: Notify::new(),
        })
    }

    pub fn push(&self, key: K) {
        let mut w = self.waiting.lock().expect("queue");
        if w.1.insert(key.clone()) {
            w.0.push_back(key);
            self.notify.notify_one();
        }
    }

    pub fn push_after(self: &Arc<Self>, key: K, delay: Duration) {
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.push(key);
        });
    }

    pub async fn pop(&self) -> K {
        loop {
            {
                let mut w = self.waiting.lock().expect("queue");
                if let Some(k) = w.0.pop_front() {
                    w.1.remove(&k);
                    return k;
                }
            }
            self.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_waits_once_and_comes_in_order() {
        let q = Queue::new();
        q.push("a");
        q.push("b");
        q.push("a");
        assert_eq!(q.pop().await, "a");
        assert_eq!(q.pop().await, "b");
        q.push_after("c", Duration::from_millis(10));
        assert_eq!(q.pop().await, "c");
    }
}
