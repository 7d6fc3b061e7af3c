//! CPU clocks: the CPU time of the calling thread and of the whole process.
//!
//! Owns: [`thread_cpu_ns`], [`process_cpu_ns`] and [`burn_thread_cpu`], the one place the lab
//! reads a CPU clock. Invariant: both clocks are monotonic per thread/process and count user
//! plus system time; a clock the kernel refuses reads as 0 rather than failing the experiment.

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own; the clock ids used here need nothing else.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time the calling thread has used, ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time the whole process (every thread) has used, ns.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Burns `ns` of this thread's CPU time (not wall time: a preempted thread keeps burning when
/// it runs again), standing in for per-transaction work above the engine.
pub fn burn_thread_cpu(ns: u64) {
    if ns == 0 {
        return;
    }
    let end = thread_cpu_ns() + ns;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance_with_work() {
        let (t0, p0) = (thread_cpu_ns(), process_cpu_ns());
        burn_thread_cpu(2_000_000);
        let (t1, p1) = (thread_cpu_ns(), process_cpu_ns());
        assert!(t1 - t0 >= 2_000_000, "thread clock advanced {} ns", t1 - t0);
        assert!(p1 - p0 >= t1 - t0 - 1_000_000, "the process clock holds the thread's time");
    }
}
