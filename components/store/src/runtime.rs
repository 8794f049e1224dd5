//! The async runtime a member runs on.
//!
//! Half the CPUs (at least one) serve as async workers, not all of them as tokio's default
//! would have it. Raft (its core, state machine worker and the proposer) runs on a thread of
//! its own beside them (`member/raft/thread.rs`), with the log sync inline; the workers serve the
//! client side: gRPC connections, watches, reads. Every hand-off to a parked second worker
//! costs a cross-CPU wakeup, and range reads and snapshots already run on blocking threads.
//! On a 2-CPU host one worker serves as many puts as two at 1 and 16 clients (within the
//! noise; session 8 in bench/README.md), and leaves the other CPU to the Raft thread and to
//! what shares a control-plane host with the store. `TOKIO_WORKER_THREADS` still sets the
//! count.

/// Async workers for a host with `cpus` CPUs.
pub fn workers(cpus: usize) -> usize {
    (cpus / 2).max(1)
}

/// The multi-threaded runtime with [`workers`] workers, unless `TOKIO_WORKER_THREADS` says.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        builder.worker_threads(workers(cpus));
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::workers;

    #[test]
    fn half_the_cpus_and_never_none() {
        assert_eq!(workers(1), 1);
        assert_eq!(workers(2), 1);
        assert_eq!(workers(3), 1);
        assert_eq!(workers(8), 4);
    }
}
