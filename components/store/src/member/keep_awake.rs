//! Keeping threads awake while writes come back to back.
//!
//! A put crosses threads twice: the async worker hands it to the Raft thread, and the Raft
//! thread answers the worker once it is synced and applied. Between one put and the next each
//! of those threads has nothing to do and parks, and on a VM a parked thread's vCPU halts;
//! waking it is an interrupt to a halted vCPU, which the host has to schedule back in. At one
//! client every put paid for that on both threads, and it cost more than all of Raft's own
//! work (bench/README.md, session 11).
//!
//! So while writes come back to back — less than [`WINDOW`] apart — those threads stay awake
//! instead: a task on each runtime yields in a loop, each turn a non-blocking poll for I/O,
//! for as long as its [`Mode`] says the next piece of work is due, and hands its CPU to any
//! thread that wants it when that thread may be the one the write is waiting for. A member
//! that is idle, or sees a write now and then, parks exactly as before.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{watch, Notify};

/// Writes this close together make a steady stream. Longer than a put's whole round trip at
/// one client (client, network, sync: 0.3-0.6 ms here), so a steady writer is always caught
/// awake; short enough that a lull ends the spinning at once.
pub const WINDOW: Duration = Duration::from_millis(1);

/// Which thread a spinner keeps awake, and so when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The Raft thread: for [`WINDOW`] after each write, where the next proposal would
    /// otherwise find it parked (with many writers too: between batches it would park as
    /// well).
    Raft,
    /// An async worker: while exactly one write is in flight, waiting for its answer. With
    /// more in flight the worker has their requests and answers to serve, and a spinner would
    /// only take turns from them (16-client puts fell by a fifth).
    Worker,
}

const MODES: [Mode; 2] = [Mode::Raft, Mode::Worker];

/// The writes of one member, as its spinners see them; cheap to share.
#[derive(Debug)]
pub struct KeepAwake {
    epoch: Instant,
    /// When the latest write arrived, in ns since `epoch` (0: none yet).
    last_ns: AtomicU64,
    /// The gap before the latest write, in ns.
    gap_ns: AtomicU64,
    in_flight: AtomicUsize,
    raft_wake: Notify,
    worker_wake: Notify,
}

/// A write in flight (see [`KeepAwake::in_flight`]).
pub struct InFlight<'a>(&'a KeepAwake);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl KeepAwake {
    /// Follows a member's writes and starts a spinner on each of `raft` (the Raft thread's
    /// runtime) and `worker` (the async workers'); they end on `shutdown`.
    pub fn start(raft: &Handle, worker: &Handle, shutdown: &watch::Receiver<bool>) -> Arc<Self> {
        let this = Arc::new(Self::new());
        raft.spawn(spin(this.clone(), Mode::Raft, shutdown.clone()));
        worker.spawn(spin(this.clone(), Mode::Worker, shutdown.clone()));
        this
    }

    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last_ns: AtomicU64::new(0),
            gap_ns: AtomicU64::new(u64::MAX),
            in_flight: AtomicUsize::new(0),
            raft_wake: Notify::new(),
            worker_wake: Notify::new(),
        }
    }

    /// What `mode`'s spinner waits on while its thread may park.
    fn wake(&self, mode: Mode) -> &Notify {
        match mode {
            Mode::Raft => &self.raft_wake,
            Mode::Worker => &self.worker_wake,
        }
    }

    fn now_ns(&self) -> u64 {
        // +1 keeps 0 free for "none yet"; u64 nanoseconds last 584 years.
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// A write arrived; it is in flight until the guard is dropped (once it is answered).
    pub fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let now = self.now_ns();
        let last = self.last_ns.swap(now, Ordering::AcqRel);
        let gap = if last == 0 {
            u64::MAX
        } else {
            now.saturating_sub(last)
        };
        self.gap_ns.store(gap, Ordering::Release);
        // A spinner already awake takes no wakeup (the permit waits for its next round);
        // one asleep is woken only when this write starts a steady stream.
        for mode in MODES {
            if self.worth_spinning(mode, now) {
                self.wake(mode).notify_one();
            }
        }
        InFlight(self)
    }

    /// Whether the thread `mode` keeps should be awake at `now`.
    fn worth_spinning(&self, mode: Mode, now: u64) -> bool {
        let window = WINDOW.as_nanos() as u64;
        if self.gap_ns.load(Ordering::Acquire) > window {
            return false; // not a steady stream
        }
        match mode {
            Mode::Raft => now.saturating_sub(self.last_ns.load(Ordering::Acquire)) <= window,
            Mode::Worker => self.in_flight.load(Ordering::Acquire) == 1,
        }
    }

    /// Whether the spinner on `mode`'s thread should hand its CPU to any thread that wants
    /// it on every turn: always on the worker (it spins only for a lone write, while the
    /// Raft thread syncs it and wakes to apply it), and on the Raft thread while no write is
    /// in flight, when the writer's own thread is the one about to need a CPU.
    fn hands_over(&self, mode: Mode) -> bool {
        match mode {
            Mode::Worker => true,
            Mode::Raft => self.in_flight.load(Ordering::Acquire) == 0,
        }
    }
}

async fn spin(awake: Arc<KeepAwake>, mode: Mode, mut shutdown: watch::Receiver<bool>) {
    let wake = awake.wake(mode);
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        while awake.worth_spinning(mode, awake.now_ns()) {
            // Hand the thread a write waits for this CPU at once rather than whenever the
            // kernel preempts the spinner (1-client put p99 1.2 ms without, 0.3-0.6 with).
            // With many writes in flight the Raft thread is busy with them, and yielding to
            // other threads on every turn cost 16-client puts 5-15%.
            if awake.hands_over(mode) {
                std::thread::yield_now();
            }
            // One turn of the runtime: its other tasks, then a poll for I/O that does not
            // block.
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
    fn aged() -> KeepAwake {
        let mut a = KeepAwake::new();
        a.epoch -= 10 * WINDOW;
        a
    }

    /// As if the latest write had come `ago_ns` earlier than it did.
    fn backdate(a: &KeepAwake, ago_ns: u64) {
        a.last_ns.fetch_sub(ago_ns, Ordering::AcqRel);
    }

    #[test]
    fn a_lone_write_is_not_worth_spinning_for() {
        let a = KeepAwake::new();
        let held = a.in_flight();
        for mode in MODES {
            assert!(
                !a.worth_spinning(mode, a.now_ns()),
                "{mode:?}: no write came before it"
            );
        }
        drop(held);
    }

    #[test]
    fn the_raft_thread_stays_awake_through_a_stream_until_a_lull() {
        let a = aged();
        drop(a.in_flight());
        drop(a.in_flight());
        let now = a.now_ns();
        assert!(a.worth_spinning(Mode::Raft, now));
        assert!(a.worth_spinning(Mode::Raft, now + W / 2));
        assert!(
            !a.worth_spinning(Mode::Raft, now + 2 * W),
            "the window passed without a write"
        );
        // The next write after that lull is a lone write again.
        backdate(&a, 2 * W);
        drop(a.in_flight());
        assert!(!a.worth_spinning(Mode::Raft, a.now_ns()));
    }

    #[test]
    fn the_worker_stays_awake_only_for_a_lone_write_in_flight() {
        let a = KeepAwake::new();
        drop(a.in_flight());
        let first = a.in_flight();
        let now = a.now_ns();
        assert!(a.worth_spinning(Mode::Worker, now));
        assert!(
            a.worth_spinning(Mode::Worker, now + 2 * W),
            "still waiting for its answer"
        );
        let second = a.in_flight();
        assert!(
            !a.worth_spinning(Mode::Worker, a.now_ns()),
            "two in flight: work enough"
        );
        drop(first);
        assert!(a.worth_spinning(Mode::Worker, a.now_ns()));
        drop(second);
        assert!(
            !a.worth_spinning(Mode::Worker, a.now_ns()),
            "answered: nothing to wait for"
        );
    }

    #[test]
    fn the_raft_thread_hands_over_its_cpu_only_between_writes() {
        let a = KeepAwake::new();
        assert!(a.hands_over(Mode::Raft));
        let held = a.in_flight();
        assert!(a.hands_over(Mode::Worker));
        assert!(
            !a.hands_over(Mode::Raft),
            "a write in flight: its work comes first"
        );
        drop(held);
        assert!(a.hands_over(Mode::Raft));
    }

    #[test]
    fn the_spinners_let_other_tasks_run_and_end_with_the_member() {
        let raft = crate::member::raft::thread::RaftThread::spawn().unwrap();
        let worker = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (stop, stopped) = watch::channel(false);
        let a = KeepAwake::start(raft.handle(), worker.handle(), &stopped);
        drop(a.in_flight());
        let held = a.in_flight();
        assert!(a.worth_spinning(Mode::Worker, a.now_ns()));
        // The one worker still serves other tasks while its spinner runs.
        assert_eq!(worker.block_on(worker.spawn(async { 7 })).unwrap(), 7);
        drop(held);
        stop.send(true).unwrap();
        // Once stopped, both spinners are gone and no longer hold the shared state.
        for _ in 0..1000 {
            if Arc::strong_count(&a) == 1 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the spinners did not end on shutdown");
    }
}
