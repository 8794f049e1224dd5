//! Handing freed heap back to the kernel after a (re)list. Decoding a full list of Services and
//! EndpointSlices (pages of JSON, each object built in full before the index keeps its few fields)
//! peaks far above what the index holds afterwards, and glibc's malloc keeps that peak mapped in
//! its per-thread arenas: at 10 000 Services most of kiln-dns's resident memory was such free heap.
//! `malloc_trim` returns the free pages of every arena; it costs a few milliseconds, once per list.

/// Returns the free heap to the kernel (glibc); elsewhere nothing to do.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists under its locks; it has no
    // preconditions on the caller.
    unsafe {
        libc::malloc_trim(0);
    }
}
