//! A standby's log flushes on its own: `N` group commits of one 200-byte record each into a
//! new [`ReplicaLog`] in `DIR/standby/` as a node keeps it (append at the primary's LSNs, then
//! `sync`: one write of the block holding the log's end, through the page cache, and one
//! `fdatasync`), with the syncs per second and the p50/p99 time of a sync. Compare with
//! fio's 4 KiB write + fdatasync on the same disk, run just before or after:
//! `fio --name=w --filename=DIR/fio --size=64M --rw=write --bs=4k --fdatasync=1 --runtime=5 --time_based`.
//!
//! ```sh
//! cargo run --release -p nvmedb --example replica_sync_bench -- DIR [N]
//! ```
//! `DIR` is removed first and left behind afterwards.

use nvmedb::repl::{DirDisk, Disk, ReplicaLog};
use std::time::Instant;

fn main() -> nvmedb::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        eprintln!("usage: replica_sync_bench DIR [N]");
        std::process::exit(2);
    };
    let n: usize = match args.get(1).map(|s| s.parse()) {
        None => 10_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("N must be a positive number of syncs");
            std::process::exit(2);
        }
    };
    let _ = std::fs::remove_dir_all(dir);
    let log = ReplicaLog::open(DirDisk::new(dir).replica()?, 0)?;
    let payload = vec![7u8; 200];
    let (mut lsn, mut us) = (0u64, Vec::with_capacity(n));
    let t0 = Instant::now();
    for _ in 0..n {
        log.append_at(lsn, lsn + 300, 9, &payload)?;
        let t = Instant::now();
        log.sync()?;
        us.push(t.elapsed().as_micros() as u64);
        lsn += 300;
    }
    let secs = t0.elapsed().as_secs_f64();
    us.sort_unstable();
    println!(
        "replica log in {dir}: {n} syncs in {secs:.2} s = {:.0} syncs/s, sync p50 {} µs, p99 {} µs",
        n as f64 / secs,
        us[us.len() / 2],
        us[us.len() * 99 / 100]
    );
    Ok(())
}
