//! CPU placement: which CPUs a thread (and every thread it spawns) may run on.
//!
//! Owns: [`allowed_cpus`], [`halves`] and [`Pinned`] (a scope in which the calling thread runs
//! on a given CPU set; threads it spawns inherit the set, as Linux threads do). An experiment
//! that models two servers on one machine (the HA pair of seed 000) gives each node its own
//! CPUs with these, so the nodes do not take each other's CPU time.
//!
//! Invariants: a [`Pinned`] restores the thread's previous CPU set when dropped; a CPU set is
//! never empty (the kernel refuses one, and so does [`Pinned::new`]).

use std::io;

/// The CPUs the calling thread may run on, ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: `set` is a plain bitmask the kernel fills; its size is passed along.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

/// Splits `cpus` into two non-empty halves (the first gets the larger half), or `None` when
/// there are fewer than two.
pub fn halves(cpus: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    if cpus.len() < 2 {
        return None;
    }
    let mid = cpus.len().div_ceil(2);
    Some((cpus[..mid].to_vec(), cpus[mid..].to_vec()))
}

fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty CPU set"));
    }
    // SAFETY: as in `allowed_cpus`; CPU_SET only writes bits inside `set` (indices checked).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {c} is out of range")));
            }
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// While alive, the calling thread runs on the given CPUs (and so does every thread it spawns
/// meanwhile, for that thread's whole life); dropping it restores the previous set.
#[derive(Debug)]
pub struct Pinned {
    previous: Vec<usize>,
}

impl Pinned {
    /// Pins the calling thread to `cpus`.
    pub fn new(cpus: &[usize]) -> io::Result<Self> {
        let previous = allowed_cpus()?;
        set_affinity(cpus)?;
        Ok(Self { previous })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // Restoring a set the thread had before cannot fail short of the CPUs going offline.
        let _ = set_affinity(&self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_are_disjoint_and_cover_the_set() {
        assert_eq!(halves(&[0]), None);
        assert_eq!(halves(&[0, 1]), Some((vec![0], vec![1])));
        assert_eq!(halves(&[0, 2, 5]), Some((vec![0, 2], vec![5])));
    }

    #[test]
    fn a_pinned_thread_and_its_children_run_on_the_set_until_dropped() {
        let all = allowed_cpus().unwrap();
        assert!(!all.is_empty());
        let one = [all[all.len() - 1]];
        std::thread::spawn(move || {
            {
                let _p = Pinned::new(&one).unwrap();
                assert_eq!(allowed_cpus().unwrap(), one);
                let child = std::thread::spawn(|| allowed_cpus().unwrap()).join().unwrap();
                assert_eq!(child, one, "a spawned thread inherits the set");
            }
            assert_eq!(allowed_cpus().unwrap(), all, "dropping restores the previous set");
        })
        .join()
        .unwrap();
        assert!(Pinned::new(&[]).is_err());
    }
}
