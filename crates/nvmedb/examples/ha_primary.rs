//! A replicating primary next to `nvmedb standby` (see docs/ha.md):
//!
//! ```text
//! cargo run --release --example ha_primary -- init DIR                  # create, 1000 rows
//! nvmedb standby --data SDIR --seed-from DIR --secret-file F &          # seed + listen
//! cargo run --release --example ha_primary -- run DIR ADDR F [MODE] [N] # N updates, status
//! nvmedb promote --addr ADDR --secret-file F                            # failover
//! cargo run --release --example ha_primary -- check SDIR [N]            # promoted copy
//! ```

use nvmedb::repl::{open_primary, parse_mode, read_secret, ReplConfig, StandbyPolicy};
use nvmedb::{ColumnType, Database, Options, Schema, Value};
use std::path::Path;
use std::time::Duration;

fn main() -> nvmedb::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    match arg(0).as_str() {
        "init" => {
            let db = Database::open(arg(1), Options::default())?;
            let schema = Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]);
            let t = db.create_table("kv", schema)?;
            for i in 0..1000 {
                t.insert(&[Value::Int(i), Value::Int(0)])?;
            }
            db.close()?;
            println!("created {} with table kv (1000 rows); seed the standby from it now", arg(1));
        }
        "run" => {
            let mode = parse_mode(args.get(4).map_or("eager", |s| s.as_str()))
                .ok_or_else(|| nvmedb::Error::InvalidArgument("mode: lazy|eager|chain|quorum:K".into()))?;
            let n: i64 = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(1000);
            let cfg = ReplConfig {
                standbys: vec![arg(2)],
                secret: read_secret(Path::new(&arg(3)))?,
                mode,
                policy: StandbyPolicy::Fail { timeout: Duration::from_secs(10) },
                ..ReplConfig::default()
            };
            let (db, log) = open_primary(Path::new(&arg(1)), Options::default(), cfg, None)?;
            let t = db.table("kv")?;
            for i in 0..n {
                t.update_int(&Value::Int(i % 1000), 1, i + 1)?;
            }
            print!("{}", log.status());
            println!("{n} commits acknowledged in {mode:?} mode");
            // Exit without a checkpoint, like a crash: the standby has every acknowledged commit.
            std::process::exit(0);
        }
        "check" => {
            let n: i64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
            let db = Database::open(arg(1), Options { create_if_missing: false, ..Options::default() })?;
            let t = db.table("kv")?;
            let mut ok = 0;
            for i in 0..n.min(1000) {
                let want = (0..n).filter(|j| j % 1000 == i).max().map_or(0, |j| j + 1);
                if t.read(&Value::Int(i), |r| r.int(1))? == Some(want) {
                    ok += 1;
                }
            }
            println!("{ok} of {} rows hold their last acknowledged value", n.min(1000));
            db.close()?;
        }
        _ => eprintln!("usage: ha_primary init DIR | run DIR ADDR SECRET_FILE [MODE] [N] | check DIR [N]"),
    }
    Ok(())
}
