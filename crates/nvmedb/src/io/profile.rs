//! Device profiles: the one table of emulated-latency parameters.
//!
//! Owns: [`DeviceProfile`] (the parameters of one emulated device), the built-in table
//! ([`DeviceProfile::builtin`] for `dram`, `optane`, `nand`, `san`, `hdd`), and the override
//! syntax shared by config files and `--profile-set key=value` flags ([`DeviceProfile::set`],
//! [`DeviceProfile::apply_config`]).
//!
//! Invariants: every parameter has a unit in its name; a bad key or value is an error naming the
//! key and what was expected; latencies are non-negative and fractions lie in `[0, 1]`.

use std::fmt;

/// Names of the built-in profiles, fastest first.
pub const PROFILE_NAMES: [&str; 5] = ["dram", "optane", "nand", "san", "hdd"];

/// What stands behind an emulated profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// RAM: needed for profiles faster than the real disk, whose latency replaces the medium's.
    Ram,
    /// A real file: allowed for profiles slower than the disk.
    File,
}

/// The parameters of one emulated device. Latencies are service times added per operation.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProfile {
    /// Profile name (`optane`, ...).
    pub name: String,
    /// Median service time of a random read, µs.
    pub read_latency_us: f64,
    /// Median service time of a random write, µs.
    pub write_latency_us: f64,
    /// Half-width of the uniform jitter added to every service time, µs (the median is kept).
    pub jitter_us: f64,
    /// Maximum operations per second the device accepts (0 = unlimited).
    pub iops_cap: f64,
    /// Maximum transfer rate, MB/s (10^6 bytes; 0 = unlimited): an operation of `n` bytes
    /// occupies the device for at least `n / bandwidth` before the next may start, so large
    /// pages cannot exceed what the device delivers even under the IOPS cap. It limits
    /// throughput; an operation's own latency stays the profile's.
    pub bandwidth_mb_s: f64,
    /// Independent service channels (0 = unlimited); an HDD has one arm.
    pub channels: u32,
    /// Probability that a write triggers a garbage-collection stall.
    pub gc_stall_probability: f64,
    /// Length of a garbage-collection stall, µs; every operation waits for it to end.
    pub gc_stall_us: f64,
    /// Reads slow down by `1 + read_mix_slowdown * w` where `w` is the recent share of writes.
    pub read_mix_slowdown: f64,
    /// Service time of an operation that continues the previous one (sequential access), µs;
    /// 0 = no sequential speed-up.
    pub sequential_latency_us: f64,
    /// Probability of a latency spike on any operation.
    pub spike_probability: f64,
    /// Extra service time of a spike, µs.
    pub spike_us: f64,
    /// Waits shorter than this are spun; longer ones sleep until this close to the deadline, µs.
    pub spin_us: f64,
    /// What the profile may wrap.
    pub backing: Backing,
}

/// A rejected override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    /// The key as the user wrote it.
    pub key: String,
    /// What was wrong.
    pub detail: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device profile setting `{}`: {}", self.key, self.detail)
    }
}

impl std::error::Error for ProfileError {}

const KEYS: [&str; 14] = [
    "read_latency_us",
    "write_latency_us",
    "jitter_us",
    "iops_cap",
    "bandwidth_mb_s",
    "channels",
    "gc_stall_probability",
    "gc_stall_us",
    "read_mix_slowdown",
    "sequential_latency_us",
    "spike_probability",
    "spike_us",
    "spin_us",
    "backing",
];

impl DeviceProfile {
    fn base(name: &str, read_us: f64, write_us: f64, backing: Backing) -> Self {
        Self {
            name: name.to_string(),
            read_latency_us: read_us,
            write_latency_us: write_us,
            jitter_us: 0.0,
            iops_cap: 0.0,
            bandwidth_mb_s: 0.0,
            channels: 0,
            gc_stall_probability: 0.0,
            gc_stall_us: 0.0,
            read_mix_slowdown: 0.0,
            sequential_latency_us: 0.0,
            spike_probability: 0.0,
            spike_us: 0.0,
            spin_us: 10.0,
            backing,
        }
    }

    /// The built-in profile called `name`, or `None`.
    ///
    /// | profile | read µs | write µs | jitter ± µs | IOPS cap | other |
    /// | --- | --- | --- | --- | --- | --- |
    /// | dram | 0 | 0 | 0 | none | RAM |
    /// | optane | 10 | 10 | 1 | 550 K | 2400 MB/s (one P4800X, seed 001 Table 1); RAM |
    /// | nand | 95 | 20 (buffered) | 10 | 400 K | GC stall 3 ms on 1/1000 writes; reads up to 2x slower when mixed |
    /// | san | 750 | 750 | 250 | 100 K | |
    /// | hdd | 8000 | 8000 | 2000 | 1 arm | 60 µs when sequential |
    pub fn builtin(name: &str) -> Option<Self> {
        let p = match name {
            "dram" => Self::base("dram", 0.0, 0.0, Backing::Ram),
            "optane" => {
                // One Intel Optane DC P4800X (seed 001, Table 1): 10 µs, 550 K random-read IOPS,
                // 2400 MB/s read (seed 000's servers had four).
                Self {
                    jitter_us: 1.0,
                    iops_cap: 550_000.0,
                    bandwidth_mb_s: 2400.0,
                    ..Self::base("optane", 10.0, 10.0, Backing::Ram)
                }
            }
            "nand" => Self {
                jitter_us: 10.0,
                iops_cap: 400_000.0,
                gc_stall_probability: 0.001,
                gc_stall_us: 3000.0,
                read_mix_slowdown: 1.0,
                ..Self::base("nand", 95.0, 20.0, Backing::File)
            },
            "san" => Self {
                jitter_us: 250.0,
                iops_cap: 100_000.0,
                ..Self::base("san", 750.0, 750.0, Backing::File)
            },
            "hdd" => Self {
                jitter_us: 2000.0,
                channels: 1,
                sequential_latency_us: 60.0,
                ..Self::base("hdd", 8000.0, 8000.0, Backing::File)
            },
            _ => return None,
        };
        Some(p)
    }

    /// Every built-in profile, in [`PROFILE_NAMES`] order.
    pub fn all_builtin() -> Vec<Self> {
        PROFILE_NAMES.iter().filter_map(|n| Self::builtin(n)).collect()
    }

    /// Sets one parameter from text, as in `read_latency_us=12` (`key` without the profile).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ProfileError> {
        let err = |detail: String| ProfileError { key: key.to_string(), detail };
        let value = value.trim();
        if key == "backing" {
            self.backing = match value {
                "ram" => Backing::Ram,
                "file" => Backing::File,
                _ => return Err(err(format!("expected `ram` or `file`, got {value:?}"))),
            };
            return Ok(());
        }
        let v: f64 = value.parse().map_err(|_| err(format!("expected a number, got {value:?}")))?;
        if !v.is_finite() || v < 0.0 {
            return Err(err(format!("expected a finite number >= 0, got {v}")));
        }
        let prob = |v: f64| {
            if v > 1.0 {
                Err(err(format!("a probability must lie in [0, 1], got {v}")))
            } else {
                Ok(v)
            }
        };
        match key {
            "read_latency_us" => self.read_latency_us = v,
            "write_latency_us" => self.write_latency_us = v,
            "jitter_us" => self.jitter_us = v,
            "iops_cap" => self.iops_cap = v,
            "bandwidth_mb_s" => self.bandwidth_mb_s = v,
            "channels" => self.channels = v as u32,
            "gc_stall_probability" => self.gc_stall_probability = prob(v)?,
            "gc_stall_us" => self.gc_stall_us = v,
            "read_mix_slowdown" => self.read_mix_slowdown = v,
            "sequential_latency_us" => self.sequential_latency_us = v,
            "spike_probability" => self.spike_probability = prob(v)?,
            "spike_us" => self.spike_us = v,
            "spin_us" => self.spin_us = v,
            _ => return Err(err(format!("unknown key; known keys: {}", KEYS.join(", ")))),
        }
        Ok(())
    }

    /// Applies one `key=value` override. The key may be qualified with a profile name
    /// (`optane.read_latency_us=12`); qualified keys for other profiles are ignored.
    pub fn apply_override(&mut self, assignment: &str) -> Result<(), ProfileError> {
        let Some((key, value)) = assignment.split_once('=') else {
            return Err(ProfileError {
                key: assignment.trim().to_string(),
                detail: "expected key=value".into(),
            });
        };
        let key = key.trim();
        match key.split_once('.') {
            Some((profile, k)) if PROFILE_NAMES.contains(&profile) || profile == self.name => {
                if profile == self.name {
                    self.set(k, value)
                } else {
                    Ok(())
                }
            }
            Some(_) => Err(ProfileError { key: key.to_string(), detail: "unknown profile prefix".into() }),
            None => self.set(key, value),
        }
    }

    /// Applies a config file's text: one `key = value` (or `profile.key = value`) per line;
    /// `#` starts a comment; `[profile]` section headers qualify the keys below them.
    /// Errors name the line.
    pub fn apply_config(&mut self, text: &str) -> Result<(), ProfileError> {
        let mut section: Option<String> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = Some(name.trim().to_string());
                continue;
            }
            let assignment = match &section {
                Some(s) if !line.split('=').next().unwrap_or("").contains('.') => format!("{s}.{line}"),
                _ => line.to_string(),
            };
            self.apply_override(&assignment)
                .map_err(|e| ProfileError { key: e.key, detail: format!("{} (line {})", e.detail, i + 1) })?;
        }
        Ok(())
    }

    /// The parameters as `key=value` pairs, for result files.
    pub fn to_pairs(&self) -> Vec<(String, String)> {
        let b = match self.backing {
            Backing::Ram => "ram",
            Backing::File => "file",
        };
        vec![
            ("name".into(), self.name.clone()),
            ("read_latency_us".into(), self.read_latency_us.to_string()),
            ("write_latency_us".into(), self.write_latency_us.to_string()),
            ("jitter_us".into(), self.jitter_us.to_string()),
            ("iops_cap".into(), self.iops_cap.to_string()),
            ("bandwidth_mb_s".into(), self.bandwidth_mb_s.to_string()),
            ("channels".into(), self.channels.to_string()),
            ("gc_stall_probability".into(), self.gc_stall_probability.to_string()),
            ("gc_stall_us".into(), self.gc_stall_us.to_string()),
            ("read_mix_slowdown".into(), self.read_mix_slowdown.to_string()),
            ("sequential_latency_us".into(), self.sequential_latency_us.to_string()),
            ("spike_probability".into(), self.spike_probability.to_string()),
            ("spike_us".into(), self.spike_us.to_string()),
            ("spin_us".into(), self.spin_us.to_string()),
            ("backing".into(), b.into()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_exist_and_fast_ones_need_ram() {
        for p in DeviceProfile::all_builtin() {
            if p.read_latency_us < 50.0 {
                assert_eq!(p.backing, Backing::Ram, "{}", p.name);
            }
        }
        assert_eq!(DeviceProfile::all_builtin().len(), PROFILE_NAMES.len());
        assert!(DeviceProfile::builtin("floppy").is_none());
    }

    #[test]
    fn overrides_from_flags_and_config() {
        let mut p = DeviceProfile::builtin("optane").unwrap();
        p.apply_override("read_latency_us=12.5").unwrap();
        p.apply_override("optane.write_latency_us = 20").unwrap();
        p.apply_override("nand.read_latency_us=1").unwrap(); // other profile: ignored
        assert_eq!((p.read_latency_us, p.write_latency_us), (12.5, 20.0));
        p.apply_config("# comment\n[optane]\niops_cap = 1000\n[nand]\niops_cap = 5\nspin_us=3\n").unwrap();
        assert_eq!(p.iops_cap, 1000.0);
        assert_eq!(p.spin_us, 10.0);
        let e = p.apply_override("read_latncy_us=1").unwrap_err();
        assert_eq!(e.key, "read_latncy_us");
        assert!(e.to_string().contains("unknown key"), "{e}");
        let e = p.apply_config("\n\njitter_us = fast\n").unwrap_err();
        assert!(e.to_string().contains("line 3") && e.to_string().contains("jitter_us"), "{e}");
        assert!(p.apply_override("gc_stall_probability=2").is_err());
    }
}
