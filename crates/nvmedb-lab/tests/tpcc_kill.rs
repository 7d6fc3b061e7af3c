//! TPC-C under kill -9: a child process runs the full mix (inserts, updates, and Delivery's
//! deletes) from four terminals against a database on real O_DIRECT files with a small buffer
//! (dirty pages are written back all the time) and frequent checkpoints, printing every
//! New-Order it was told committed. The parent kills it with SIGKILL at a random moment,
//! reopens the database (recovery), and checks: every consistency condition of §3.3.2, every
//! index against its table, and every acknowledged New-Order present with all its lines.
//!
//! Iterations: `NVMEDB_TEST_ITERS` (default 3); seed: `NVMEDB_TEST_SEED` (default 13). A
//! failure prints both, to replay it.

use nvmedb::util::Rng;
use nvmedb::{BufferSize, Database, Options, Value};
use nvmedb_lab::workload::tpcc::schema as s;
use nvmedb_lab::workload::tpcc::txn::{execute_with_retries, Context, TxnOutput};
use nvmedb_lab::workload::tpcc::{
    check_consistency, load, NuConstants, Scale, Tables, Terminal, TpccRng, TxnInput,
};
use nvmedb_testkit::{kill, TmpDir};
use std::io::Write;
use std::path::Path;

const SCALE: Scale = Scale { warehouses: 2, items: 1000, districts: 10, customers: 30, new_orders: 9 };

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(48 * 4096),
        index_buffer: BufferSize::Bytes(1024 * 4096),
        // Checkpoints by log volume happen during the run, so kills land inside them too.
        wal_options: nvmedb::wal::WalOptions { checkpoint_after_bytes: 256 << 10, ..Default::default() },
        ..Options::default()
    }
}

/// Child mode (its role is the scratch directory): runs the mix until killed, printing
/// `NO w d o lines` for each committed order.
#[test]
fn tpcc_kill9_child_entry() {
    let Some(root) = kill::child_role() else { return };
    let root = Path::new(&root);
    let seed: u64 = std::env::var("NVMEDB_TPCC_KILL_CHILD_SEED").unwrap().parse().unwrap();
    let db = Database::open(root.join("db"), options()).expect("child opens the database");
    let tables = Tables::open(&db).expect("child opens the tables");
    let ctx = Context::new(db, tables).expect("child context");
    let load_c: NuConstants =
        serde_json::from_str(&std::fs::read_to_string(root.join("constants.json")).unwrap()).unwrap();
    let run = NuConstants::for_run(&load_c, &mut TpccRng::new(seed));
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|sc| {
        for term in 0..4u64 {
            let (ctx, out) = (&ctx, &out);
            sc.spawn(move || {
                let mut t = Terminal::new(SCALE, run, seed * 10 + term, None);
                loop {
                    let input = t.next_input();
                    let (o, _) =
                        execute_with_retries(ctx, &input, 1000).unwrap_or_else(|e| panic!("child: {e}"));
                    if let (
                        TxnInput::NewOrder(i),
                        TxnOutput::NewOrder { o_id, lines, rolled_back: false, .. },
                    ) = (&input, &o)
                    {
                        let mut o = out.lock().unwrap();
                        writeln!(o, "NO {} {} {o_id} {lines}", i.w, i.d).unwrap();
                        o.flush().unwrap();
                    }
                }
            });
        }
    });
}

/// An acknowledged New-Order: (w, d, o_id, lines).
type Ack = (u32, u32, i64, usize);

fn parse_ack(line: &str) -> Option<Ack> {
    let mut f = line.strip_prefix("NO ")?.split(' ').map(|x| x.parse::<i64>().ok());
    Some((f.next()?? as u32, f.next()?? as u32, f.next()??, f.next()?? as usize))
}

fn verify(dir: &Path, acked: &[Ack], ctx: &str) {
    let roomy = Options {
        table_buffer: BufferSize::Bytes(64 << 20),
        index_buffer: BufferSize::Bytes(64 << 20),
        ..options()
    };
    let db = Database::open(dir, roomy).unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
    let t = Tables::open(&db).unwrap();
    check_consistency(&t).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    for (name, table) in t.all() {
        table.check_integrity().unwrap_or_else(|e| panic!("{ctx}: table {name}: {e}"));
    }
    for &(w, d, o, lines) in acked {
        let order = t
            .orders
            .get(&Value::Int(s::order_key(w, d, o)))
            .unwrap()
            .unwrap_or_else(|| panic!("{ctx}: acknowledged order {o} of district {w}/{d} is lost"));
        assert_eq!(order[s::orders::OL_CNT], Value::Int(lines as i64), "{ctx}: order {o} of {w}/{d}");
        for n in 1..=lines as u32 {
            assert!(
                t.order_line.get(&Value::Int(s::order_line_key(w, d, o, n))).unwrap().is_some(),
                "{ctx}: line {n} of acknowledged order {o} of {w}/{d} is lost"
            );
        }
    }
    db.close().unwrap();
}

#[test]
fn tpcc_survives_kill9_with_every_acknowledged_new_order() {
    let (seed, iters) = (nvmedb_testkit::seed(13), nvmedb_testkit::iters(3));
    let root = TmpDir::new("tpcc-kill9");
    let dir = root.join("db");
    {
        let db = Database::open(&dir, Options { wal: false, ..options() }).unwrap();
        let report = load(&db, &SCALE, seed, 2, false).unwrap();
        db.close().unwrap();
        std::fs::write(root.join("constants.json"), serde_json::to_string(&report.constants).unwrap())
            .unwrap();
    }
    let mut rng = Rng::new(seed);
    let mut acked: Vec<Ack> = Vec::new();
    for iter in 0..iters {
        let ctx = format!("iteration {iter} ({})", nvmedb_testkit::replay(seed, iter + 1));
        let child = kill::spawn(
            "tpcc_kill9_child_entry",
            root.as_str(),
            &[("NVMEDB_TPCC_KILL_CHILD_SEED", (seed * 1000 + iter).to_string())],
        );
        // Acknowledgements still in the pipe when the child dies count too.
        let mut n = 0u64;
        child
            .kill_after(rng.range(1, 150), |line| {
                if let Some(a) = parse_ack(line) {
                    acked.push(a);
                    n += 1;
                }
                n
            })
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(n > 0, "{ctx}: the child acknowledged no New-Order (did it fail to start?)");
        verify(&dir, &acked, &ctx);
    }
    eprintln!(
        "TPC-C kill -9: {iters} iterations, {} acknowledged New-Orders, all present after recovery",
        acked.len()
    );
}
