//! Closing the member database on shutdown, so the same data dir can be opened again at once.
//!
//! rocksdb releases its LOCK file only at the end of closing the database, which runs on
//! whichever thread drops the last `Arc<DB>`. Watching a weak handle's count is not enough: it
//! reaches 0 as that drop *starts*, while the close may still be running on another thread (the
//! Raft thread), and a restart in the same process then fails with "lock hold by current
//! process". So shutdown keeps one strong handle, waits (bounded) for every other to go, and
//! drops the last one itself.

use std::sync::Arc;
use std::time::Duration;

/// How often the remaining holders are counted.
const POLL: Duration = Duration::from_millis(20);

/// Waits up to `grace` until `last` is the only handle left, then drops it (on a blocking
/// thread: closing waits for background work). Returns how many other handles were still
/// alive at the deadline; 0 means the value was dropped before this returned.
pub async fn close_last<T: Send + Sync + 'static>(last: Arc<T>, grace: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + grace;
    while Arc::strong_count(&last) > 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    let others = Arc::strong_count(&last) - 1;
    // With others left, this drop only decrements the count; the last of them closes it.
    if tokio::task::spawn_blocking(move || drop(last))
        .await
        .is_err()
    {
        tracing::warn!("closing the database panicked");
    }
    others
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Stands in for the database: its drop is slow and marks the end of the close.
    struct SlowClose(Arc<AtomicBool>);
    impl Drop for SlowClose {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(100));
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn returns_only_after_the_close_has_finished_even_when_another_thread_held_it() {
        let closed = Arc::new(AtomicBool::new(false));
        let db = Arc::new(SlowClose(closed.clone()));
        let other = db.clone();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(other);
        });
        assert_eq!(close_last(db, Duration::from_secs(5)).await, 0);
        assert!(closed.load(Ordering::SeqCst), "closed before returning");
        holder.join().unwrap();
    }

    #[tokio::test]
    async fn a_holder_that_never_lets_go_is_waited_for_only_until_the_grace_ends() {
        let closed = Arc::new(AtomicBool::new(false));
        let db = Arc::new(SlowClose(closed.clone()));
        let kept = db.clone();
        assert_eq!(close_last(db, Duration::from_millis(100)).await, 1);
        assert!(
            !closed.load(Ordering::SeqCst),
            "still open: someone holds it"
        );
        drop(kept);
        assert!(closed.load(Ordering::SeqCst));
    }
}
