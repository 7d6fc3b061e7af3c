//! Thread scheduling priority.
//!
//! Owns: [`lower_thread_priority`]. Invariant: it only lowers the calling thread's priority (a
//! positive niceness, which needs no privilege), so work that must not slow a neighbour (a
//! standby's read sessions beside its log apply, a lab's load generator beside the server it
//! drives) can give way without the caller being able to raise anything by mistake.

use std::io;

/// Sets the calling thread's niceness to `nice` (1..=19; on Linux niceness is per thread, and
/// threads and processes the thread creates afterwards inherit it).
///
/// Returns the system's error when it refuses, and `InvalidInput` for a niceness outside
/// 1..=19 (0 would be no change; a negative one would raise the priority).
pub fn lower_thread_priority(nice: i32) -> io::Result<()> {
    if !(1..=19).contains(&nice) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("niceness {nice} is outside 1..=19 (only lowering the priority is allowed)"),
        ));
    }
    // SAFETY: gettid and setpriority take and return plain integers and touch no memory.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's niceness, as the kernel reports it.
    fn niceness() -> i32 {
        // SAFETY: as above.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn lowers_only_the_calling_thread_and_refuses_raising() {
        let before = niceness();
        let (inside, child) = std::thread::spawn(|| {
            lower_thread_priority(19).unwrap();
            let child = std::thread::spawn(niceness).join().unwrap();
            (niceness(), child)
        })
        .join()
        .unwrap();
        assert_eq!(inside, 19);
        assert_eq!(child, 19, "a thread created afterwards inherits it");
        assert_eq!(niceness(), before, "other threads keep theirs");
        assert_eq!(lower_thread_priority(0).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(lower_thread_priority(-5).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(lower_thread_priority(20).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
