//! The session threads' scheduling priority.
//!
//! Owns: [`lower_current_thread`]. Invariant: it only lowers a thread's priority (a positive
//! niceness, which needs no privilege); when the system refuses, the session runs at the
//! process's priority and says nothing (a slower primary is not an error).

/// Sets the calling thread's niceness to `nice` (on Linux niceness is per thread).
pub(super) fn lower_current_thread(nice: i32) {
    debug_assert!(nice > 0, "only lowers the priority");
    // SAFETY: gettid and setpriority take and return plain integers and touch no memory.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}
