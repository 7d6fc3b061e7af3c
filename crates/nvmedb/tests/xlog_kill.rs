//! Fast log path (xlog): crash protocol against a real process kill.
//!
//! The test re-runs its own binary as a child (`support::kill`): the child writes the
//! stream from several threads with `x_alloc`/`x_free`, `x_fsync`s, and prints `ACK <lsn>` for
//! every acknowledged position. The parent reads acknowledgements, kills the child with SIGKILL
//! mid-stream, reopens the log (recovery destages the ring) and checks that every acknowledged
//! byte is on the conventional side and that the recovered stream is exactly what was written.
//! Seed: `NVMEDB_TEST_SEED` (default: from the clock, printed on failure); kill rounds:
//! `NVMEDB_TEST_ITERS` (default 3).

mod support;

use nvmedb::io::{check_alignment, Device, DeviceInfo, IoError, IoOpKind, IoResult};
use nvmedb::util::Rng;
use nvmedb::xlog::{XLog, XLogConfig};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::kill;

const TEST_NAME: &str = "xlog_kill9_recovers_every_acknowledged_byte";

fn byte_at(pos: u64) -> u8 {
    let x = pos.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (pos as u8)
}

/// A plain buffered file used as the conventional device (the engine's O_DIRECT device lives in
/// the I/O layer; a process kill does not lose the page cache, so buffered I/O is enough here).
struct FileDev {
    name: String,
    file: File,
}

impl FileDev {
    fn open(path: &Path) -> Self {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .expect("open conv file");
        Self { name: path.display().to_string(), file }
    }
    fn err(&self, op: IoOpKind, offset: u64, len: usize, e: std::io::Error) -> IoError {
        IoError::os(&self.name, op, offset, len, e)
    }
}

impl Device for FileDev {
    fn info(&self) -> DeviceInfo {
        DeviceInfo { name: self.name.clone(), backend: "buffered file (test)".into(), emulated_profile: None }
    }
    fn alignment(&self) -> usize {
        4096
    }
    fn capacity(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0)
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        if self.capacity() < len {
            self.file.set_len(len).map_err(|e| self.err(IoOpKind::Setup, 0, 0, e))?;
        }
        Ok(())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        check_alignment(&self.name, 4096, offset, buf.len(), buf.as_ptr() as usize)?;
        buf.fill(0);
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => return Err(self.err(IoOpKind::Read, offset, buf.len(), e)),
            }
        }
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        check_alignment(&self.name, 4096, offset, buf.len(), buf.as_ptr() as usize)?;
        self.file.write_all_at(buf, offset).map_err(|e| self.err(IoOpKind::Write, offset, buf.len(), e))
    }
    fn sync(&self) -> IoResult<()> {
        self.file.sync_data().map_err(|e| self.err(IoOpKind::Sync, 0, 0, e))
    }
}

fn cfg(dir: &Path) -> XLogConfig {
    let mut c = XLogConfig::new(dir.join("ring"));
    c.ring_bytes = 256 << 10;
    c.queue_bytes = 16 << 10;
    c.conv_pages = 8192;
    c.destage_batch_pages = 8;
    c.destage_latency = Duration::from_micros(300);
    c.spin_iters = 100;
    c
}

fn child(dir: PathBuf) -> ! {
    let dev = Arc::new(FileDev::open(&dir.join("conv")));
    let log = Arc::new(XLog::open(cfg(&dir), dev).expect("child open"));
    let seed: u64 = std::env::var("XLOG_CHILD_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut hs = Vec::new();
    for t in 0..3u64 {
        let log = Arc::clone(&log);
        hs.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed ^ ((t + 1) * 0x1234_5678));
            let w = log.writer().expect("writer");
            // Bounded: the parent kills us long before this ends.
            for _ in 0..200_000 {
                let len = rng.range(1, 2000) as usize;
                let mut a = w.x_alloc(len).expect("x_alloc");
                let p = a.stream_pos();
                for (i, b) in a.buf().iter_mut().enumerate() {
                    *b = byte_at(p + i as u64);
                }
                w.x_free(a).expect("x_free");
                let durable = w.x_fsync().expect("x_fsync");
                let mut out = std::io::stdout().lock();
                writeln!(out, "ACK {durable}").expect("stdout");
                out.flush().expect("flush");
            }
        }));
    }
    for h in hs {
        let _ = h.join();
    }
    // Wait to be killed: block on stdin until the parent closes it.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::process::exit(0)
}

#[test]
fn xlog_kill9_recovers_every_acknowledged_byte() {
    if let Some(dir) = kill::child_role() {
        child(PathBuf::from(dir));
    }
    let seed = support::seed_or_random();
    let rounds = support::iters(3);
    let tmp = support::TmpDir::on_tmpfs("xlog-kill");
    std::fs::create_dir_all(tmp.path()).expect("mkdir");
    let dir = tmp.path().to_path_buf();
    let mut max_ack = 0u64;
    for round in 0..rounds {
        let ctx = format!(
            "round {round} ({} cargo test -p nvmedb --test xlog_kill)",
            support::replay(seed, round + 1)
        );
        let child = kill::spawn(
            TEST_NAME,
            dir.to_str().expect("utf-8 path"),
            &[("XLOG_CHILD_SEED", (seed + round).to_string())],
        );
        let mut acks = 0;
        let kill_after = 100 + (seed.wrapping_add(round) % 400) as usize;
        let note = |line: &str| {
            if let Some(v) = line.strip_prefix("ACK ") {
                max_ack = max_ack.max(v.trim().parse().expect("ack value"));
                acks += 1;
            }
            acks
        };
        child.kill_after(kill_after, note).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let dev = Arc::new(FileDev::open(&dir.join("conv")));
        let log = XLog::open(cfg(&dir), dev).expect("recover");
        let rep = log.recovery().clone();
        assert!(rep.stream_end >= max_ack, "{ctx}: acknowledged {max_ack}, recovered {rep:?}");
        let from = log.oldest_stream_pos().expect("oldest");
        let bytes = log.read_stream(from, rep.stream_end).expect("read recovered stream");
        for (i, &b) in bytes.iter().enumerate() {
            let p = from + i as u64;
            assert_eq!(b, byte_at(p), "{ctx}: recovered byte {p} differs ({rep:?})");
        }
        eprintln!(
            "round {round}: {acks} acks, max ack {max_ack}, recovered {rep:?}, checked {from}..{}",
            rep.stream_end
        );
        max_ack = rep.stream_end;
        log.close().expect("close");
    }
}
