//! The async runtime a member runs on.
//!
//! Half the CPUs (at least one) serve as async workers, not all of them as tokio's default
//! would have it. A write's way through the member is a chain of hand-offs (gRPC connection,
//! proposer, Raft core, state machine), each cheap, and every hand-off to a parked second
//! worker costs a cross-CPU wakeup; the heavy parts already run on blocking threads beside
//! the workers (the log fsync, range reads, snapshots). On a 2-CPU host one worker serves
//! 1.15-1.3x the puts of two at 1 and 16 clients, and as many ranges (bench/store.sh). The
//! other CPUs are left to those blocking threads and to what shares a control-plane host
//! with the store. `TOKIO_WORKER_THREADS` still sets the count.

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
