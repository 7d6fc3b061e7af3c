//! Fast log path (xlog): crash protocol against a real process kill.
//!
//! The test re-runs its own binary as a child (`XLOG_KILL_CHILD=<dir>`): the child writes the
//! stream from several threads with `x_alloc`/`x_free`, `x_fsync`s, and prints `ACK <lsn>` for
//! every acknowledged position. The parent reads acknowledgements, kills the child with SIGKILL
//! mid-stream, reopens the log (recovery destages the ring) and checks that every acknowledged
//! byte is on the conventional side and that the recovered stream is exactly what was written.

use nvmedb::io::{check_alignment, Device, DeviceInfo, IoError, IoOpKind, IoResult};
use nvmedb::util::Rng;
use nvmedb::xlog::{XLog, XLogConfig};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const CHILD_ENV: &str = "XLOG_KILL_CHILD";
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
    let seed: u64 = std::env::var("XLOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
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
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(PathBuf::from(dir));
    }
    let seed =
        std::env::var("XLOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(Rng::seed_from_time);
    eprintln!("xlog kill seed {seed}");
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let dir = base.join(format!("nvmedb-xlog-kill-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut max_ack = 0u64;
    for round in 0..3 {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .env("XLOG_SEED", (seed + round).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("child stdout");
        // Watchdog: a child that hangs before enough acknowledgements must not hang the suite.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let pid = child.id() as i32;
        let wd = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(120))
            {
                eprintln!("xlog kill test: child {pid} made no progress for 120 s (seed {seed}); killing it");
                // SAFETY: kill(2) with a pid we spawned; no memory is involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        let mut acks = 0;
        let kill_after = 100 + (seed.wrapping_add(round) % 400) as usize;
        // Keep the pipe open until the child is dead, so the child never sees EPIPE.
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).expect("read child stdout") == 0 {
                break;
            }
            if let Some(v) = line.strip_prefix("ACK ") {
                let v: u64 = v.trim().parse().expect("ack value");
                max_ack = max_ack.max(v);
                acks += 1;
                if acks >= kill_after {
                    break;
                }
            }
        }
        child.kill().expect("SIGKILL child");
        let status = child.wait().expect("wait child");
        drop(reader);
        let _ = tx.send(());
        let _ = wd.join();
        assert!(!status.success(), "round {round}: child should have been killed, exited with {status}");
        assert!(acks >= kill_after, "seed {seed} round {round}: child stopped early after {acks} acks");

        let dev = Arc::new(FileDev::open(&dir.join("conv")));
        let log = XLog::open(cfg(&dir), dev).expect("recover");
        let rep = log.recovery().clone();
        assert!(
            rep.stream_end >= max_ack,
            "seed {seed} round {round}: acknowledged {max_ack}, recovered {rep:?}"
        );
        let from = log.oldest_stream_pos().expect("oldest");
        let bytes = log.read_stream(from, rep.stream_end).expect("read recovered stream");
        for (i, &b) in bytes.iter().enumerate() {
            let p = from + i as u64;
            assert_eq!(b, byte_at(p), "seed {seed} round {round}: recovered byte {p} differs ({rep:?})");
        }
        eprintln!(
            "round {round}: {acks} acks, max ack {max_ack}, recovered {rep:?}, checked {from}..{}",
            rep.stream_end
        );
        max_ack = rep.stream_end;
        log.close().expect("close");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
