//! Keeps the C allocator from holding on to freed memory (glibc only).
//!
//! glibc's malloc gives a thread that finds the main arena busy an arena of its own, up to
//! eight per core, and keeps what is freed in each arena for reuse instead of returning it.
//! picolet's blocking work (every apiserver call, file reads that may stall) runs on pool threads
//! that come and go, so those arenas fill with free memory that stays resident: with the
//! apiserver unreachable, RSS kept rising although the memory in use did not (a heap profile
//! showed it flat; docs/figures.md). [`limit_arenas`] keeps every thread in one arena, and
//! [`run_trim`] hands the free pages back to the kernel once a minute.
//!
//! musl's allocator has no arenas and returns freed memory by itself: there both do nothing.

use std::time::Duration;

/// How often free memory is handed back.
pub const TRIM_PERIOD: Duration = Duration::from_secs(60);

/// One arena for every thread. Called first thing in `main`, before any other thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code, reason = "glibc's mallopt has no safe wrapper")]
    // SAFETY: mallopt only sets a malloc parameter; it takes no pointer and is safe to call at
    // any time, from any thread.
    unsafe {
        nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1);
    }
}

/// Returns the free memory of every arena to the kernel (`malloc_trim(0)`): free pages inside
/// the heap, not only its top. Takes a few hundred microseconds for picolet's heap.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code, reason = "glibc's malloc_trim has no safe wrapper")]
    // SAFETY: malloc_trim takes no pointer and locks the arenas itself; it only gives free
    // pages back (madvise), never memory in use.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Trims every [`TRIM_PERIOD`], for as long as picolet runs.
pub async fn run_trim() {
    let mut tick = crate::rt::interval(TRIM_PERIOD);
    loop {
        tick.tick().await;
        trim();
    }
}
