//! glibc malloc tuning, applied once at start before any other thread exists.
//!
//! glibc gives a thread that finds the arenas busy an arena of its own (up to 8 per core), and
//! each keeps the memory its thread freed: with the UDP receive threads (server.rs), the runtime
//! workers and the watches, kiln-dns's RSS at 10 000 Services grew ~5 MiB under load that way.
//! Measured with bench/dns.sh at 10 000 Services (docs/benchmarks.md "Cluster DNS", 2026-12-07):
//! RSS after the load 33.5 MiB with glibc's default, 29.5 MiB with 2 arenas, 25.6 MiB with 1 —
//! 2 keeps the two receive threads from queueing on one arena lock.

/// At most this many malloc arenas (`M_ARENA_MAX`).
pub const ARENA_MAX: i32 = 2;

/// Caps glibc's arenas at [`ARENA_MAX`], unless `MALLOC_ARENA_MAX` is set (glibc applies that
/// itself, and an operator's choice wins). No-op on other C libraries.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; called before any other thread runs.
        let ok = unsafe { libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX) };
        if ok != 1 {
            eprintln!("kiln-dns: mallopt(M_ARENA_MAX) failed; glibc's default arenas stay");
        }
    }
}
