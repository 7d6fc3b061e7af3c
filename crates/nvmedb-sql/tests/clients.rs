//! Real PostgreSQL clients against the server, unchanged: psql's describe commands (`\d`,
//! `\dt`, `\di`, `\d t`, `\l`), whose queries read the system catalogs, with their output
//! checked line by line; SQLAlchemy 2 over psycopg2 (a Python script,
//! `tests/clients/orm.py`: create_all, inserts, queries, update, delete, reflection; and
//! `tests/clients/reflect.py`: the inspector's keys, indexes and foreign keys, tables loaded
//! with `autoload_with` and used by the ORM); and
//! psycopg 3's server-side prepared statements and `executemany` (`tests/clients/psycopg3.py`).
//!
//! psql comes from PostgreSQL 15 (`postgresql-15`), the Python drivers from pip
//! (`scripts/setup.sh`); without them the tests say SKIPPED and pass without running, unless
//! `CI` (or `NVMEDB_REQUIRE_POSTGRES` / `NVMEDB_REQUIRE_PYDRIVERS`) is set.

use nvmedb_sql::{Server, ServerConfig};
use nvmedb_testkit::TmpDir;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Fixture {
    server: Option<Server>,
    _dir: TmpDir,
}

fn start() -> Fixture {
    start_with(|_| {})
}

fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> Fixture {
    let dir = TmpDir::path_only("clients");
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".into();
    config.options.table_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    config.options.index_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    configure(&mut config);
    let server = Server::start(config).expect("server starts");
    Fixture { server: Some(server), _dir: dir }
}

impl Fixture {
    fn port(&self) -> u16 {
        self.server.as_ref().unwrap().addr().port()
    }

    /// `psql -c sql` (each `-c` one command), its standard output; panics with psql's errors.
    fn psql(&self, psql: &Path, commands: &[&str]) -> String {
        self.psql_with(psql, "sslmode=disable", commands)
    }

    /// [`Fixture::psql`] with connection options `options` (`sslmode=require`).
    fn psql_with(&self, psql: &Path, options: &str, commands: &[&str]) -> String {
        self.try_psql(psql, options, commands).unwrap_or_else(|e| panic!("psql {commands:?} failed: {e}"))
    }

    /// psql's standard output, or its errors when it fails or complains.
    fn try_psql(&self, psql: &Path, options: &str, commands: &[&str]) -> Result<String, String> {
        let mut c = Command::new(psql);
        let conn = format!("host=127.0.0.1 port={} user=tester dbname=shop {options}", self.port());
        c.args(["-X", "-v", "ON_ERROR_STOP=1", "-d", &conn]).env("PGCONNECT_TIMEOUT", "10").env("PAGER", "");
        for cmd in commands {
            c.args(["-c", cmd]);
        }
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || !stderr.is_empty() {
            return Err(stderr.into_owned());
        }
        Ok(String::from_utf8(out.stdout).unwrap())
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().unwrap();
        }
    }
}

fn find_psql() -> Option<PathBuf> {
    let dirs = std::env::var("PATH").unwrap_or_default();
    let found = std::env::split_paths(&dirs)
        .chain([PathBuf::from("/usr/lib/postgresql/15/bin")])
        .map(|d| d.join("psql"))
        .find(|p| p.is_file());
    if found.is_none() {
        // Says SKIPPED naming the package, or fails under CI.
        assert!(!nvmedb_testkit::needs(nvmedb_testkit::POSTGRES), "pgbench runs but psql is missing");
    }
    found
}

/// Each line of `got` with its trailing blanks trimmed (psql pads table cells).
fn lines(got: &str) -> Vec<String> {
    got.lines().map(|l| l.trim_end().to_string()).collect()
}

fn expect(got: &str, want: &str) {
    let want: Vec<String> = want.lines().map(|l| l.trim_end().to_string()).collect();
    assert_eq!(lines(got), want, "psql printed:\n{got}");
}

#[test]
fn psql_describes_tables_indexes_and_databases() {
    let Some(psql) = find_psql() else { return };
    let f = start();
    f.psql(
        &psql,
        &[
            "CREATE TABLE t (id integer PRIMARY KEY, name varchar(40) NOT NULL, price numeric(10,2), \
             v double precision, note text)",
            "CREATE INDEX t_v ON t (v)",
            "CREATE UNIQUE INDEX t_name ON t (name)",
            "CREATE TABLE log (at timestamp, msg text)",
        ],
    );
    expect(
        &f.psql(&psql, &["\\d t"]),
        r#"                        Table "public.t"
 Column |         Type          | Collation | Nullable | Default
--------+-----------------------+-----------+----------+---------
 id     | integer               |           | not null |
 name   | character varying(40) |           | not null |
 price  | numeric(10,2)         |           |          |
 v      | double precision      |           |          |
 note   | text                  |           |          |
Indexes:
    "t_pkey" PRIMARY KEY, btree (id)
    "t_name" UNIQUE, btree (name)
    "t_v" btree (v)

"#,
    );
    expect(
        &f.psql(&psql, &["\\dt"]),
        r#"       List of relations
 Schema | Name | Type  | Owner
--------+------+-------+--------
 public | log  | table | tester
 public | t    | table | tester
(2 rows)

"#,
    );
    expect(
        &f.psql(&psql, &["\\di"]),
        r#"            List of relations
 Schema |  Name  | Type  | Owner  | Table
--------+--------+-------+--------+-------
 public | t_name | index | tester | t
 public | t_pkey | index | tester | t
 public | t_v    | index | tester | t
(3 rows)

"#,
    );
    let d = f.psql(&psql, &["\\d"]);
    assert!(lines(&d).contains(&" public | log  | table | tester".to_string()), "{d}");
    let l = f.psql(&psql, &["\\l"]);
    assert!(l.lines().any(|x| x.starts_with(" shop ") && x.contains("UTF8")), "\\l lists the database:\n{l}");
    // A table without a primary key has no index to show; its columns are nullable.
    let log = f.psql(&psql, &["\\d log"]);
    assert!(log.contains(" at     | timestamp without time zone |           |          |"), "{log}");
    assert!(!log.contains("Indexes:"), "{log}");
}

/// Runs `tests/clients/<script>` with `arg` and checks that it ends with `ok` (its output in
/// the failure's message, under `what`).
fn run_script(script: &str, arg: &str, what: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients").join(script);
    let out = Command::new("python3").arg(&script).arg(arg).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim_end().ends_with("ok"), "{what}:\n{stdout}\n{stderr}");
}

#[test]
fn sqlalchemy_over_psycopg2() {
    if !nvmedb_testkit::needs_python(&["psycopg2", "sqlalchemy"]) {
        return;
    }
    let f = start();
    // psycopg 3 has its own test (psycopg3_prepared_statements_and_executemany).
    let url = format!("postgresql+psycopg2://tester@127.0.0.1:{}/shop", f.port());
    run_script("orm.py", &url, "psycopg2");
}

#[test]
fn sqlalchemy_reflects_keys_indexes_and_foreign_keys() {
    if !nvmedb_testkit::needs_python(&["psycopg2", "sqlalchemy"]) {
        return;
    }
    let f = start();
    let url = format!("postgresql+psycopg2://tester@127.0.0.1:{}/shop", f.port());
    run_script("reflect.py", &url, "reflection");
}

#[test]
fn psycopg3_prepared_statements_and_executemany() {
    if !nvmedb_testkit::needs_python(&["psycopg"]) {
        return;
    }
    let f = start();
    let conninfo = format!("host=127.0.0.1 port={} user=tester dbname=shop sslmode=disable", f.port());
    run_script("psycopg3.py", &conninfo, "psycopg 3");
}

/// The pgjdbc version the JDBC test runs (Maven Central's `org.postgresql:postgresql`).
const PGJDBC: &str = "42.7.14";

/// pgjdbc's jar in the local Maven repository, fetched with `mvn dependency:get` when it is
/// not there yet. `None` (the test says SKIPPED) when Java, Maven or the download is missing,
/// unless `CI` or `NVMEDB_REQUIRE_JDBC` is set: then the test fails.
fn pgjdbc_jar() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let jar = home.join(format!(".m2/repository/org/postgresql/postgresql/{PGJDBC}/postgresql-{PGJDBC}.jar"));
    let java = Command::new("java").arg("-version").output().is_ok_and(|o| o.status.success());
    if java && !jar.is_file() {
        let artifact = format!("-Dartifact=org.postgresql:postgresql:{PGJDBC}");
        let got = Command::new("mvn").args(["-q", "dependency:get", &artifact]).output();
        if let Ok(o) = &got {
            if !o.status.success() {
                eprintln!("mvn dependency:get failed:\n{}", String::from_utf8_lossy(&o.stdout));
            }
        }
    }
    if java && jar.is_file() {
        return Some(jar);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        !(ci || std::env::var_os("NVMEDB_REQUIRE_JDBC").is_some()),
        "pgjdbc {PGJDBC} cannot be run here: install a JDK (openjdk-17-jdk-headless) and maven"
    );
    eprintln!("SKIPPED: pgjdbc needs a JDK and maven (apt-get install openjdk-17-jdk-headless maven)");
    None
}

#[test]
fn pgjdbc_prepared_batches_transactions_and_metadata() {
    let Some(jar) = pgjdbc_jar() else { return };
    let f = start();
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/Jdbc.java");
    let url = format!("jdbc:postgresql://127.0.0.1:{}/shop?user=tester&sslmode=disable", f.port());
    let out = Command::new("java").arg("-cp").arg(&jar).arg(&program).arg(&url).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim_end().ends_with("ok"), "pgjdbc:\n{stdout}\n{stderr}");
}

/// Whether Go runs: true to go on; otherwise the test fails under `CI` or `NVMEDB_REQUIRE_GO`
/// and says SKIPPED elsewhere.
fn go_runs() -> bool {
    if Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(!(ci || std::env::var_os("NVMEDB_REQUIRE_GO").is_some()), "go is not installed (golang-go)");
    eprintln!("SKIPPED: pgx needs Go (apt-get install golang-go)");
    false
}

#[test]
fn pgx_queries_prepares_transactions_and_copies_binary() {
    if !go_runs() {
        return;
    }
    let f = start();
    // The module's directory (go.mod pins pgx v5.12.0; `go run` fetches it from the module proxy).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/pgx");
    let url = format!("postgres://tester@127.0.0.1:{}/shop?sslmode=disable", f.port());
    let out = Command::new("go").args(["run", "."]).arg(&url).current_dir(&dir).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim_end().ends_with("ok"), "pgx:\n{stdout}\n{stderr}");
}

/// A self-signed certificate for localhost and its key (openssl), in `dir`.
fn self_signed(dir: &Path) -> nvmedb_sql::tls::TlsFiles {
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "2", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    nvmedb_sql::tls::TlsFiles { cert, key }
}

#[test]
fn psql_connects_with_tls_when_required() {
    let Some(psql) = find_psql() else { return };
    let keys = TmpDir::new("tls-keys");
    let files = self_signed(keys.path());
    let f = start_with(|c| c.tls = Some(files));
    // sslmode=require: the SSLRequest is answered 'S' and the session runs over TLS.
    let info = f.psql_with(&psql, "sslmode=require", &["\\conninfo"]);
    assert!(info.contains("SSL connection (protocol: TLSv1.3"), "{info}");
    let out = f.psql_with(
        &psql,
        "sslmode=require",
        &[
            "CREATE TABLE secret (id int PRIMARY KEY, v text)",
            "INSERT INTO secret VALUES (1, 'tls')",
            "SELECT v FROM secret",
        ],
    );
    assert!(out.contains("tls"), "{out}");
    // A client that does not ask for TLS is still served.
    let out = f.psql(&psql, &["SELECT count(*) FROM secret"]);
    assert!(out.contains(" 1"), "{out}");
    // A server without a certificate refuses TLS; `require` then fails, `prefer` goes on without.
    let plain = start();
    let e = plain.try_psql(&psql, "sslmode=require", &["SELECT 1"]).unwrap_err();
    assert!(e.contains("does not support SSL"), "{e}");
    let info = plain.psql_with(&psql, "sslmode=prefer", &["\\conninfo"]);
    assert!(!info.contains("SSL connection"), "{info}");
}

#[test]
fn a_bad_certificate_stops_the_server_from_starting() {
    let keys = TmpDir::new("tls-bad");
    std::fs::write(keys.path().join("server.crt"), "not a certificate").unwrap();
    std::fs::write(keys.path().join("server.key"), "not a key").unwrap();
    let dir = TmpDir::path_only("clients-bad-tls");
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".into();
    config.tls = Some(nvmedb_sql::tls::TlsFiles {
        cert: keys.path().join("server.crt"),
        key: keys.path().join("missing.key"),
    });
    let e = Server::start(config.clone()).unwrap_err().to_string();
    assert!(e.contains("server.crt"), "{e}");
    config.tls.as_mut().unwrap().cert = keys.path().join("missing.crt");
    let e = Server::start(config).unwrap_err().to_string();
    assert!(e.contains("missing.crt"), "{e}");
}

/// Runs `tests/clients/tpcc_kit.py --dsn <dsn> args…`; its exit status and standard output.
fn tpcc_kit(dsn: &str, args: &[&str]) -> (bool, String) {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/tpcc_kit.py");
    let out = Command::new("python3").arg(&kit).args(["--dsn", dsn]).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("tpcc_kit {args:?}:\n{text}");
    (out.status.success(), text)
}

/// The TPC-C kit (`tests/clients/tpcc_kit.py`, psycopg2): its DDL with composite keys and
/// foreign keys, the load of one warehouse scaled down (2 000 items, 60 customers and orders
/// per district, so the load takes seconds), ten seconds of the mix with 4 terminals with no
/// error but retried serialization failures and deadlocks, and its consistency check; then a
/// half-applied New-Order (an order without its lines) made behind the kit's back fails the
/// check, so the check can fail.
#[test]
fn tpcc_kit_loads_runs_and_stays_consistent() {
    if !nvmedb_testkit::needs_python(&["psycopg2"]) {
        return;
    }
    let f = start_with(|c| {
        c.options.table_buffer = nvmedb::BufferSize::Bytes(32 << 20);
        c.options.index_buffer = nvmedb::BufferSize::Bytes(32 << 20);
    });
    let dsn = format!("host=127.0.0.1 port={} user=tester dbname=tpcc sslmode=disable", f.port());
    let (ok, out) = tpcc_kit(&dsn, &["load", "1", "--items", "2000", "--customers", "60"]);
    assert!(ok, "load failed:\n{out}");
    let (ok, out) = tpcc_kit(&dsn, &["check"]);
    assert!(ok && out.contains("consistent"), "the loaded data is inconsistent:\n{out}");
    let (ok, out) = tpcc_kit(&dsn, &["run", "--seconds", "10", "--terminals", "4"]);
    assert!(ok, "the run had errors other than retried ones:\n{out}");
    let result: serde_json::Value =
        serde_json::from_str(out.lines().find_map(|l| l.strip_prefix("RESULT ")).expect("a RESULT line"))
            .unwrap();
    assert_eq!(result["errors"], 0, "{out}");
    for t in ["new_order", "payment", "order_status", "delivery", "stock_level"] {
        let commits = result["types"][t]["commits"].as_u64().unwrap();
        assert!(commits > 0, "no {t} committed in 10 s:\n{out}");
    }
    let (ok, out) = tpcc_kit(&dsn, &["check"]);
    assert!(ok && out.contains("consistent"), "the run left the data inconsistent:\n{out}");
    // Half a New-Order: the order line of the newest order of district 1 removed.
    let half = "import psycopg2, sys\n\
        c = psycopg2.connect(sys.argv[1]); k = c.cursor()\n\
        k.execute('SELECT max(o_id) FROM orders WHERE o_w_id = 1 AND o_d_id = 1')\n\
        o = k.fetchone()[0]\n\
        k.execute('DELETE FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 1 AND ol_o_id = %s AND ol_number = 1', (o,))\n\
        assert k.rowcount == 1, k.rowcount\n\
        c.commit()";
    let out = Command::new("python3").args(["-c", half, &dsn]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (ok, out) = tpcc_kit(&dsn, &["check"]);
    assert!(!ok && out.contains("condition 4: FAILED"), "the check missed a half-applied New-Order:\n{out}");
}
