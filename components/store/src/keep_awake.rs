//! Keeping a thread awake while writes come back to back.
//!
//! A put crosses threads twice: the async worker hands it to the Raft thread, and the Raft
//! thread answers the worker once it is synced and applied. Between one put and the next each
//! of those threads has nothing to do and parks, and on a VM a parked thread's vCPU halts;
//! waking it is an interrupt to a halted vCPU, which the host has to schedule back in. At one
//! client every put paid for that on both threads, and it cost more than all of Raft's own
//! work (bench/README.md, session 11).
//!
//! So a thread whose writes come back to back stays awake instead: a task on its runtime
//! yields in a loop, offering the CPU to any other thread that wants it on every turn, for as
//! long as its [`Mode`] says the next piece of work is due. Only a steady stream counts —
//! writes less than [`WINDOW`] apart — so a member that is idle, or sees a write now and then,
//! parks exactly as before.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

/// Writes this close together make a steady stream. Longer than a put's whole round trip at
/// one client (client, network, sync: 0.3-0.6 ms here), so a steady writer is always caught
/// awake; short enough that a lull ends the spinning at once.
pub const WINDOW: Duration = Duration::from_millis(1);

/// When a thread is worth keeping awake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// For [`WINDOW`] after each write of a steady stream: the Raft thread, which the next
    /// proposal would otherwise find parked.
    Stream,
    /// While exactly one write of a steady stream is in flight: the async worker waiting for
    /// its answer. With more in flight the worker has their requests and answers to serve,
    /// and a spinner would only take turns from them (16-client puts fell by a fifth).
    LoneWrite,
}

/// The activity a spinner follows; cheap to share between the threads that report it.
#[derive(Debug)]
pub struct KeepAwake {
    mode: Mode,
    epoch: Instant,
    /// When the latest write arrived, in ns since `epoch` (0: none yet).
    last_ns: AtomicU64,
    /// The gap before the latest write, in ns.
    gap_ns: AtomicU64,
    in_flight: AtomicUsize,
    wake: Notify,
}

/// A write in flight (see [`KeepAwake::in_flight`]).
pub struct InFlight<'a>(&'a KeepAwake);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl KeepAwake {
    /// Follows writes in `mode` and, if `enabled`, starts the spinner on `runtime` (the
    /// thread it keeps awake); the spinner ends on `shutdown`. Disabled, nothing spins.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        mode: Mode,
        enabled: bool,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let this = Arc::new(Self::new(mode));
        if enabled {
            runtime.spawn(spin(this.clone(), shutdown));
        }
        this
    }

    fn new(mode: Mode) -> Self {
        Self {
            mode,
            epoch: Instant::now(),
            last_ns: AtomicU64::new(0),
            gap_ns: AtomicU64::new(u64::MAX),
            in_flight: AtomicUsize::new(0),
            wake: Notify::new(),
        }
    }

    fn now_ns(&self) -> u64 {
        // +1 keeps 0 free for "none yet"; u64 nanoseconds last 584 years.
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// A write arrived. Report it on the thread being kept awake: waking the spinner from
    /// there is a wakeup within the thread, not one across.
    pub fn arrived(&self) {
        let now = self.now_ns();
        let last = self.last_ns.swap(now, Ordering::AcqRel);
        let gap = if last == 0 {
            u64::MAX
        } else {
            now.saturating_sub(last)
        };
        self.gap_ns.store(gap, Ordering::Release);
        if self.worth_spinning(now) {
            self.wake.notify_one();
        }
    }

    /// A write arrived and is in flight until the guard is dropped.
    pub fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.arrived();
        InFlight(self)
    }

    /// Whether the thread should be awake at `now`.
    fn worth_spinning(&self, now: u64) -> bool {
        let window = WINDOW.as_nanos() as u64;
        if self.gap_ns.load(Ordering::Acquire) > window {
            return false; // not a steady stream
        }
        match self.mode {
            Mode::Stream => now.saturating_sub(self.last_ns.load(Ordering::Acquire)) <= window,
            Mode::LoneWrite => self.in_flight.load(Ordering::Acquire) == 1,
        }
    }
}

async fn spin(awake: Arc<KeepAwake>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = awake.wake.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        while awake.worth_spinning(awake.now_ns()) {
            // Another thread that wants this CPU (the client, a compaction) gets it first;
            // then one turn of the runtime, which polls for I/O without blocking.
            std::thread::yield_now();
            tokio::task::yield_now().await;
            if *shutdown.borrow() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = WINDOW.as_nanos() as u64;

    /// One whose clock started long enough ago that writes can be backdated.
    fn aged(mode: Mode) -> KeepAwake {
        let mut a = KeepAwake::new(mode);
        a.epoch -= 10 * WINDOW;
        a
    }

    /// As if the latest write had come `ago_ns` earlier than it did.
    fn backdate(a: &KeepAwake, ago_ns: u64) {
        a.last_ns.fetch_sub(ago_ns, Ordering::AcqRel);
    }

    #[test]
    fn a_lone_write_is_not_worth_spinning_for() {
        for mode in [Mode::Stream, Mode::LoneWrite] {
            let a = KeepAwake::new(mode);
            let held = a.in_flight();
            assert!(
                !a.worth_spinning(a.now_ns()),
                "{mode:?}: no write came before it"
            );
            drop(held);
        }
    }

    #[test]
    fn a_stream_keeps_the_thread_awake_until_a_lull() {
        let a = aged(Mode::Stream);
        a.arrived();
        a.arrived();
        let now = a.now_ns();
        assert!(a.worth_spinning(now));
        assert!(a.worth_spinning(now + W / 2));
        assert!(
            !a.worth_spinning(now + 2 * W),
            "the window passed without a write"
        );
        // The next write after that lull is a lone write again.
        backdate(&a, 2 * W);
        a.arrived();
        assert!(!a.worth_spinning(a.now_ns()));
    }

    #[test]
    fn the_worker_stays_awake_only_for_a_lone_write_in_flight() {
        let a = KeepAwake::new(Mode::LoneWrite);
        drop(a.in_flight());
        let first = a.in_flight();
        let now = a.now_ns();
        assert!(a.worth_spinning(now));
        assert!(
            a.worth_spinning(now + 2 * W),
            "still waiting for its answer"
        );
        let second = a.in_flight();
        assert!(!a.worth_spinning(a.now_ns()), "two in flight: work enough");
        drop(first);
        assert!(a.worth_spinning(a.now_ns()));
        drop(second);
        assert!(
            !a.worth_spinning(a.now_ns()),
            "answered: nothing to wait for"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_spinner_lets_other_tasks_run_and_ends_with_the_member() {
        let (stop, stopped) = watch::channel(false);
        let a = KeepAwake::start(
            &tokio::runtime::Handle::current(),
            Mode::LoneWrite,
            true,
            stopped,
        );
        drop(a.in_flight());
        let held = a.in_flight();
        assert!(a.worth_spinning(a.now_ns()));
        // The one worker still serves other tasks while the spinner runs on it.
        let other = tokio::spawn(async { 7 });
        assert_eq!(other.await.unwrap(), 7);
        drop(held);
        stop.send(true).unwrap();
        // Once stopped, the spinner is gone and no longer holds the shared state.
        for _ in 0..1000 {
            if Arc::strong_count(&a) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the spinner did not end on shutdown");
    }
}
