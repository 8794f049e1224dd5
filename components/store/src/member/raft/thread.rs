//! The thread a member's Raft runs on: its own single-threaded runtime, apart from the async
//! workers that serve clients.
//!
//! openraft 0.9's core waits for each log append to be synced before it does anything else, so
//! the sync is done right on this thread (`LogStore::append`) instead of being handed to a
//! blocking thread and back. The core, the proposer that feeds it batches, and the state
//! machine worker all run here, one after the other without cross-thread wakeups; the client
//! side (gRPC connections, watches, reads) keeps the async workers. The cycle a write batch
//! goes through — sync, commit, next batch proposed, next append — then never waits behind
//! client work, which on a 2-CPU host is what held 16 clients at one batch per 0.46 ms with
//! the sync itself taking 0.21 ms (bench/README.md, session 8).

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// How long the runtime waits, once stopped, for blocking work it started (snapshot builds).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The Raft thread; stops (ending every task on it) when dropped.
pub struct RaftThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    /// Joined by [`RaftThread::stop_and_join`]: the thread's tasks (and the blocking work they
    /// started) are only gone, with the database handles they hold, once it has ended.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RaftThread {
    /// Starts the thread and its runtime.
    pub fn spawn() -> std::io::Result<Self> {
        let (stop, stopped) = oneshot::channel::<()>();
        let (started, start_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kiln-raft".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                };
                let _ = started.send(Ok(rt.handle().clone()));
                // Runs the tasks spawned onto the handle until told to stop (or the owner is
                // gone); dropping the runtime then drops them.
                rt.block_on(async {
                    let _ = stopped.await;
                });
                rt.shutdown_timeout(STOP_GRACE);
            })?;
        let handle = start_rx
            .recv()
            .map_err(|_| std::io::Error::other("the raft thread ended before it started"))??;
        Ok(Self {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits until it has ended, so every task that ran on it has been
    /// dropped. Blocks: call it from a blocking context (`spawn_blocking`), not on a runtime
    /// worker. Plain `drop` only asks the thread to stop and returns at once.
    pub fn stop_and_join(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::warn!("the raft thread panicked");
            }
        }
    }

    /// Where Raft's tasks are spawned.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for RaftThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_on_the_thread_and_end_with_it() {
        let thread = RaftThread::spawn().unwrap();
        let name = thread
            .handle()
            .block_on(async { std::thread::current().name().map(str::to_owned) });
        // block_on runs the future on the caller; a spawned task runs on the raft thread.
        assert_ne!(name.as_deref(), Some("kiln-raft"));
        let (tx, rx) = std::sync::mpsc::channel();
        thread.handle().spawn(async move {
            let _ = tx.send(std::thread::current().name().map(str::to_owned));
        });
        assert_eq!(rx.recv().unwrap().as_deref(), Some("kiln-raft"));

        // A task still pending when the thread stops is dropped, not leaked.
        let (held, gone) = oneshot::channel::<()>();
        thread.handle().spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        drop(thread);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let waited =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), gone).await });
        assert!(matches!(waited, Ok(Err(_))), "the pending task was dropped");
    }

    #[test]
    fn stop_and_join_returns_only_after_the_tasks_are_dropped() {
        let thread = RaftThread::spawn().unwrap();
        let held = std::sync::Arc::new(());
        let (running, is_running) = std::sync::mpsc::channel();
        let in_task = held.clone();
        thread.handle().spawn(async move {
            let _held = in_task;
            let _ = running.send(());
            std::future::pending::<()>().await;
        });
        is_running.recv().unwrap();
        // Dropping the task's last clone is slow on purpose: a plain stop would return first.
        struct SlowDrop(Option<std::sync::Arc<()>>);
        impl Drop for SlowDrop {
            fn drop(&mut self) {
                std::thread::sleep(Duration::from_millis(200));
                self.0.take();
            }
        }
        let slow = SlowDrop(Some(held.clone()));
        thread.handle().spawn(async move {
            let _slow = slow;
            std::future::pending::<()>().await;
        });
        thread.stop_and_join();
        assert_eq!(
            std::sync::Arc::strong_count(&held),
            1,
            "no task still holds it"
        );
    }
}
