//! DDL that rebuilds tables (ALTER TABLE … ADD/DROP/RENAME COLUMN, DROP INDEX, multi-column
//! CREATE INDEX) and CREATE TABLE … AS / LIKE, across a power cut: the database is dropped
//! without closing and every write not synced is lost, then it is opened again.
//!
//! A rebuild changes two things, the engine's table (one catalog switch) and the table's SQL
//! metadata row (DEFAULTs, keys, constraints): the tests also cut the power between the
//! two steps, with the metadata written for the new columns and the table not yet switched,
//! and after the switch, and check that each time the table opens with the definition that
//! belongs to its columns.

use nvmedb::io::{CrashSimStorage, Storage, WriteFate};
use nvmedb::{Database, Options};
use nvmedb_sql::{Engine, Outcome, Session};
use std::sync::Arc;

struct Disks {
    data: Arc<CrashSimStorage>,
    log_a: Arc<CrashSimStorage>,
    log_b: Arc<CrashSimStorage>,
}

impl Disks {
    fn new() -> Self {
        Self {
            data: Arc::new(CrashSimStorage::new()),
            log_a: Arc::new(CrashSimStorage::new()),
            log_b: Arc::new(CrashSimStorage::new()),
        }
    }

    fn open(&self) -> Arc<Engine> {
        let logs: (Arc<dyn Storage>, Arc<dyn Storage>) = (self.log_a.clone(), self.log_b.clone());
        // Small buffers and log segments: the tables are tiny.
        let options = Options {
            table_buffer: nvmedb::BufferSize::Bytes(16 << 20),
            index_buffer: nvmedb::BufferSize::Bytes(16 << 20),
            wal_options: nvmedb::wal::WalOptions {
                segment_bytes: 1 << 20,
                max_batch_bytes: 256 << 10,
                ..Default::default()
            },
            ..Options::default()
        };
        let db = Database::open_with_storages(self.data.clone(), Some(logs), options).unwrap();
        Engine::new(db).unwrap()
    }

    /// Loses every write not synced, on every disk.
    fn power_cut(&self) {
        for d in [&self.data, &self.log_a, &self.log_b] {
            d.crash_with(|_, _, _| WriteFate::Dropped);
        }
    }
}

/// Runs `sql`; the rows of its last statement as text (NULL as `NULL`).
fn run(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    let mut rows = vec![];
    for r in s.simple_query(sql) {
        match r.unwrap_or_else(|e| panic!("{sql}: {e:?}")) {
            Outcome::Rows(cols, r, _) => {
                rows = r
                    .iter()
                    .map(|row| {
                        row.iter()
                            .zip(cols.iter())
                            .map(|(d, c)| if d.is_null() { "NULL".into() } else { d.to_text(c.ty) })
                            .collect()
                    })
                    .collect()
            }
            _ => rows = vec![],
        }
    }
    rows
}

fn err(s: &mut Session, sql: &str) -> String {
    let r = s.simple_query(sql).into_iter().find_map(Result::err);
    r.unwrap_or_else(|| panic!("{sql} succeeded")).code.to_string()
}

fn flat(rows: Vec<Vec<String>>) -> Vec<String> {
    rows.into_iter().map(|r| r.join(" ")).collect()
}

#[test]
fn rebuilt_and_new_tables_survive_a_power_cut() {
    let disks = Disks::new();
    {
        let engine = disks.open();
        let mut s = Session::new(engine.clone(), "t", "t");
        run(
            &mut s,
            "CREATE TABLE t (id int PRIMARY KEY, a int DEFAULT 5, b text, c int, CHECK (a < 100));
             CREATE INDEX t_b ON t (b);
             CREATE INDEX t_bc ON t (b, c);
             INSERT INTO t VALUES (1, 1, 'x', 10), (2, 2, 'y', 20), (3, 3, 'z', 30);
             ALTER TABLE t ADD COLUMN d text NOT NULL DEFAULT 'new';
             ALTER TABLE t RENAME COLUMN a TO aa;
             DROP INDEX t_bc;
             ALTER TABLE t DROP COLUMN c;
             DROP INDEX t_b;
             ALTER TABLE t DROP COLUMN b;
             CREATE TABLE s AS SELECT id, aa * 2 AS twice FROM t;
             CREATE TABLE l (LIKE t INCLUDING DEFAULTS);",
        );
        drop(s);
        drop(engine);
    }
    disks.power_cut();
    let engine = disks.open();
    let mut s = Session::new(engine, "t", "t");
    assert_eq!(flat(run(&mut s, "SELECT * FROM t ORDER BY id")), ["1 1 new", "2 2 new", "3 3 new"]);
    // The renamed column kept its DEFAULT and its CHECK; the added one its DEFAULT.
    run(&mut s, "INSERT INTO t (id) VALUES (4)");
    assert_eq!(flat(run(&mut s, "SELECT aa, d FROM t WHERE id = 4")), ["5 new"]);
    assert_eq!(err(&mut s, "INSERT INTO t (id, aa) VALUES (5, 100)"), "23514");
    assert_eq!(err(&mut s, "SELECT b FROM t"), "42703");
    assert_eq!(flat(run(&mut s, "SELECT count(*) FROM pg_indexes WHERE tablename = 't'")), ["1"]);
    assert_eq!(flat(run(&mut s, "SELECT * FROM s ORDER BY id")), ["1 2", "2 4", "3 6"]);
    run(&mut s, "INSERT INTO l (id) VALUES (9)");
    assert_eq!(flat(run(&mut s, "SELECT * FROM l")), ["9 5 new"]);
}

/// Table `t` (id, a DEFAULT 5) with two rows, and what renaming `a` to `b` makes of it: the
/// engine schema and the metadata.
fn renamed(engine: &Engine) -> (nvmedb::Schema, nvmedb_sql::meta::TableMeta) {
    let info = engine.catalog.get("t").unwrap();
    let mut schema = info.table.schema().clone();
    schema.columns[1].name = "b".into();
    let mut meta = info.meta.clone();
    meta.defaults = vec![("b".into(), "5".into())];
    (schema, meta)
}

#[test]
fn a_power_cut_between_the_metadata_and_the_switch_leaves_a_whole_definition() {
    for switched in [false, true] {
        let disks = Disks::new();
        {
            let engine = disks.open();
            let mut s = Session::new(engine.clone(), "t", "t");
            run(
                &mut s,
                "CREATE TABLE t (id int PRIMARY KEY, a int DEFAULT 5); INSERT INTO t VALUES (1, 1), (2, 2)",
            );
            let (schema, meta) = renamed(&engine);
            let cols: Vec<String> = schema.columns.iter().map(|c| c.name.clone()).collect();
            // The first step of a rebuild: the metadata row holds both definitions.
            engine.catalog.meta.set_pending("t", &cols, &meta).unwrap();
            if switched {
                // The second: the table switched (rows copied by position).
                engine
                    .db
                    .rebuild_table("t", schema, |old, load| {
                        old.scan(|r| load.insert(&r.to_values()).map(|()| true))?;
                        Ok(())
                    })
                    .unwrap();
            }
            drop(s);
            drop(engine);
        }
        disks.power_cut();
        let engine = disks.open();
        let mut s = Session::new(engine, "t", "t");
        let col = if switched { "b" } else { "a" };
        let other = if switched { "a" } else { "b" };
        assert_eq!(err(&mut s, &format!("SELECT {other} FROM t")), "42703", "switched: {switched}");
        run(&mut s, "INSERT INTO t (id) VALUES (3)");
        assert_eq!(
            flat(run(&mut s, &format!("SELECT id, {col} FROM t ORDER BY id"))),
            ["1 1", "2 2", "3 5"],
            "switched: {switched}: the DEFAULT of the column that exists"
        );
        // The next change of the table writes its row afresh.
        run(
            &mut s,
            &format!("ALTER TABLE t ADD COLUMN z int DEFAULT 0; ALTER TABLE t RENAME COLUMN {col} TO q"),
        );
        run(&mut s, "INSERT INTO t (id) VALUES (4)");
        assert_eq!(flat(run(&mut s, "SELECT q, z FROM t WHERE id = 4")), ["5 0"]);
    }
}

/// RENAME TO is a copy under the new name, then the old table dropped: a power cut after the
/// metadata step leaves the old table alone; one after the copy leaves the rename to finish at
/// open (sequences and references move, the old table goes).
#[test]
fn a_power_cut_in_the_middle_of_a_rename_leaves_one_whole_table() {
    for copied in [false, true] {
        let disks = Disks::new();
        {
            let engine = disks.open();
            let mut s = Session::new(engine.clone(), "t", "t");
            run(
                &mut s,
                "CREATE TABLE p (id serial PRIMARY KEY, v int DEFAULT 7);
                 INSERT INTO p (v) VALUES (1), (2);
                 CREATE TABLE c (id int PRIMARY KEY, pid int REFERENCES p (id));
                 INSERT INTO c VALUES (1, 1)",
            );
            // Step 1 of the rename: the new name's row, marked.
            let info = engine.catalog.get("p").unwrap();
            let mut meta = info.meta.clone();
            meta.renamed_from = Some("p".into());
            engine.catalog.meta.set("q", meta).unwrap();
            if copied {
                // Step 2: the copy, made whole by one load.
                let mut rows = vec![];
                info.table
                    .scan(|r| {
                        rows.push(r.to_values());
                        Ok(true)
                    })
                    .unwrap();
                engine.db.load_table("q", info.table.schema().clone(), rows, |_| {}).unwrap();
            }
            drop(s);
            drop(engine);
        }
        disks.power_cut();
        let engine = disks.open();
        let mut s = Session::new(engine, "t", "t");
        let (name, gone) = if copied { ("q", "p") } else { ("p", "q") };
        assert_eq!(err(&mut s, &format!("SELECT * FROM {gone}")), "42P01", "copied: {copied}");
        run(&mut s, &format!("INSERT INTO {name} (v) VALUES (3)"));
        assert_eq!(flat(run(&mut s, &format!("SELECT * FROM {name} ORDER BY id"))), ["1 1", "2 2", "33 3"]);
        // The reference follows the table.
        assert_eq!(err(&mut s, &format!("DELETE FROM {name} WHERE id = 1")), "23503", "copied: {copied}");
        assert_eq!(err(&mut s, "INSERT INTO c VALUES (2, 99)"), "23503");
        run(&mut s, "INSERT INTO c VALUES (2, 2)");
        // The sequence is the table's: dropped with it.
        run(&mut s, &format!("DROP TABLE c; DROP TABLE {name}"));
        assert_eq!(err(&mut s, "SELECT nextval('p_id_seq')"), "42P01", "copied: {copied}");
        // Nothing is left under either name.
        run(&mut s, &format!("CREATE TABLE {gone} (x int); CREATE TABLE {name} (x int)"));
    }
}
