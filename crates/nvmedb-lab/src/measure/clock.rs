//! CPU clocks: the CPU time of the calling thread and of the whole process.
//!
//! Owns: [`thread_cpu_ns`], [`process_cpu_ns`], [`children_cpu_ns`], [`tree_cpu_ns`] and
//! [`burn_thread_cpu`], the one place the lab reads a CPU clock. Invariant: every clock is
//! monotonic per thread/process and counts user plus system time; a clock the kernel refuses
//! reads as 0 (or `None` for another process that is gone) rather than failing the experiment.

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

/// CPU time of this process's children that have ended and been waited for (a client program
/// the lab ran to completion), ns.
pub fn children_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage writes one rusage we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_CHILDREN with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime) + us(ru.ru_stime)) * 1000
}

/// Fields of `/proc/<pid>/stat` after the command name: (parent pid, utime + stime, cutime +
/// cstime) in clock ticks.
fn proc_stat(pid: u32) -> Option<(u32, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
    let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok());
    Some((num(4)? as u32, num(14)? + num(15)?, num(16)? + num(17)?))
}

fn ticks_ns() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / if hz > 0 { hz as u64 } else { 100 }
}

/// CPU time of process `pid`, every thread, ns (`None` when it is gone). Resolution: the
/// kernel's clock tick (10 ms), so measure windows of seconds.
pub fn pid_cpu_ns(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, own, _)| own * ticks_ns())
}

/// CPU time of process `pid`, of its live children, and of its children that ended and were
/// waited for (a server that forks a process per connection), ns; `None` when `pid` is gone.
/// Returns the total and the number of live children.
pub fn tree_cpu_ns(pid: u32) -> Option<(u64, usize)> {
    let (_, own, reaped) = proc_stat(pid)?;
    let mut total = own + reaped;
    let mut live = 0;
    for entry in std::fs::read_dir("/proc").ok()?.filter_map(|e| e.ok()) {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Some((ppid, t, _)) = proc_stat(child) {
            if ppid == pid {
                total += t;
                live += 1;
            }
        }
    }
    Some((total * ticks_ns(), live))
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

    #[test]
    fn other_processes_clocks() {
        let me = std::process::id();
        burn_thread_cpu(30_000_000);
        let own = pid_cpu_ns(me).expect("this process is alive");
        assert!(own >= 20_000_000);
        // Read after `own`: the process (other tests' threads) keeps running in between, and
        // both clocks only grow.
        let (tree, _) = tree_cpu_ns(me).expect("this process is alive");
        assert!(tree >= own, "tree {tree} ns < own {own} ns");
        let before = children_cpu_ns();
        let ok = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .expect("sh runs");
        assert!(ok.success());
        assert!(children_cpu_ns() > before, "a finished child's CPU time is counted");
        assert_eq!(pid_cpu_ns(u32::MAX), None);
    }
}
