//! The server's Prometheus endpoint and statistics views under a workload: four clients insert,
//! update and delete (some hitting duplicate keys, so errors are counted by SQLSTATE) while the
//! test scrapes `/metrics` again and again. Each page is parsed by a real Prometheus text
//! parser (the `prometheus-parse` crate); every counter never decreases from one scrape to the
//! next, every histogram is consistent (buckets cumulative in `le`, `+Inf` equal to `_count`,
//! counts never decrease), the names follow Prometheus conventions, and the counters moved as
//! the workload did. `nvmedb_stat_database` agrees with the page and refuses changes (42809).

use nvmedb_sql::{Server, ServerConfig};
use nvmedb_testkit::TmpDir;
use prometheus_parse::{Scrape, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::NoTls;

/// One scrape: counters and gauges by `name{labels}`, histograms by name with their
/// (le, cumulative count) buckets, `_count` and `_sum`.
#[derive(Default, Debug)]
struct Page {
    counters: BTreeMap<String, f64>,
    gauges: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<(f64, f64)>>,
    plain: BTreeMap<String, f64>,
}

fn key(name: &str, labels: &prometheus_parse::Labels) -> String {
    let mut l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    l.sort();
    format!("{name}{{{}}}", l.join(","))
}

fn parse(text: &str) -> Page {
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("a valid exposition");
    let mut p = Page::default();
    for s in scrape.samples {
        let k = key(&s.metric, &s.labels);
        assert!(s.metric.starts_with("nvmedb_"), "{} lacks the nvmedb_ prefix", s.metric);
        match s.value {
            Value::Counter(v) => {
                assert!(s.metric.ends_with("_total"), "counter {} must end in _total", s.metric);
                p.counters.insert(k, v);
            }
            Value::Gauge(v) => {
                p.gauges.insert(k, v);
            }
            Value::Histogram(b) => {
                assert!(
                    s.metric.ends_with("_seconds") || s.metric.ends_with("_size"),
                    "histogram {} names no unit",
                    s.metric
                );
                p.histograms.insert(k, b.iter().map(|h| (h.less_than, h.count)).collect());
            }
            Value::Untyped(v) => {
                // The histograms' _sum and _count lines.
                p.plain.insert(k, v);
            }
            Value::Summary(_) => panic!("no summaries are exported ({})", s.metric),
        }
    }
    p
}

fn check_histograms(p: &Page) {
    for (k, buckets) in &p.histograms {
        assert!(!buckets.is_empty(), "{k} has no buckets");
        for w in buckets.windows(2) {
            assert!(w[0].0 < w[1].0, "{k}: bucket bounds not ascending: {buckets:?}");
            assert!(w[0].1 <= w[1].1, "{k}: buckets not cumulative: {buckets:?}");
        }
        let last = buckets.last().unwrap();
        assert!(last.0.is_infinite(), "{k}: the last bucket is not +Inf");
        let name = k.split('{').next().unwrap();
        let count = p.plain.get(&format!("{name}_count{{}}")).copied();
        assert_eq!(count, Some(last.1), "{k}: +Inf bucket {} vs _count {count:?}", last.1);
        assert!(p.plain.contains_key(&format!("{name}_sum{{}}")), "{k} has no _sum");
    }
}

fn scrape(addr: &str) -> Page {
    let text = nvmedb::metrics::scrape(addr).expect("scrape");
    let p = parse(&text);
    check_histograms(&p);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scraped_during_a_workload_are_monotonic_and_consistent() {
    let dir = TmpDir::path_only("metrics");
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".into();
    config.metrics = Some("127.0.0.1:0".into());
    config.options.table_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    config.options.index_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    let server = Server::start(config).expect("server starts");
    let addr = server.addr();
    let maddr = server.metrics_addr().expect("a metrics endpoint").to_string();
    let conn = format!("host={} port={} user=tester dbname=test", addr.ip(), addr.port());
    let connect = || async {
        let (c, conn) = tokio_postgres::connect(&conn, NoTls).await.expect("connects");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        c
    };
    let admin = connect().await;
    admin.batch_execute("CREATE TABLE kv (k int PRIMARY KEY, v int)").await.unwrap();

    let before = scrape(&maddr);
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4i32 {
        let client = connect().await;
        let stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let (mut n, mut dup) = (0u64, 0u64);
            let mut i = 0i32;
            while !stop.load(Ordering::Relaxed) || i < 20 {
                let k = c * 1_000_000 + i;
                client.execute("INSERT INTO kv VALUES ($1, $2)", &[&k, &i]).await.unwrap();
                client.execute("UPDATE kv SET v = v + 1 WHERE k = $1", &[&k]).await.unwrap();
                if i % 3 == 0 {
                    client.execute("DELETE FROM kv WHERE k = $1", &[&k]).await.unwrap();
                } else if i % 5 == 1 {
                    // A duplicate key: 23505, counted by SQLSTATE.
                    let e = client.execute("INSERT INTO kv VALUES ($1, 0)", &[&k]).await.unwrap_err();
                    assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("23505"));
                    dup += 1;
                }
                n += 1;
                i += 1;
            }
            (n, dup)
        }));
    }
    let mut pages = vec![before];
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let m = maddr.clone();
        pages.push(tokio::task::spawn_blocking(move || scrape(&m)).await.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let (mut rounds, mut dups) = (0, 0);
    for c in clients {
        let (n, d) = c.await.unwrap();
        rounds += n;
        dups += d;
    }
    let m = maddr.clone();
    pages.push(tokio::task::spawn_blocking(move || scrape(&m)).await.unwrap());

    // Every counter and every histogram count never decreases.
    for w in pages.windows(2) {
        for (k, v) in &w[0].counters {
            let next = w[1].counters.get(k).copied().unwrap_or_else(|| panic!("{k} vanished"));
            assert!(next >= *v, "counter {k} went back from {v} to {next}");
        }
        for (k, b) in &w[0].histograms {
            let nb = &w[1].histograms[k];
            for (x, y) in b.iter().zip(nb) {
                assert!(y.1 >= x.1, "histogram {k} bucket le={} went back", x.0);
            }
        }
    }
    let (first, last) = (&pages[0], pages.last().unwrap());
    let grew = |k: &str| last.counters[k] - first.counters.get(k).copied().unwrap_or(0.0);
    // Each round commits an insert and an update, plus a delete or fails an insert.
    assert!(grew("nvmedb_commits_total{}") >= (2 * rounds) as f64, "{rounds} rounds");
    assert!(grew("nvmedb_aborts_total{}") >= dups as f64, "{dups} failed inserts");
    assert!(grew("nvmedb_sql_statements_total{}") >= (2 * rounds + dups) as f64);
    assert_eq!(grew("nvmedb_sql_errors_total{sqlstate=23505}"), dups as f64);
    assert!(grew("nvmedb_wal_flushes_total{}") > 0.0 && grew("nvmedb_wal_bytes_total{}") > 0.0);
    assert!(last.counters.contains_key("nvmedb_buffer_hits_total{pool=table}"));
    assert!(last.counters.contains_key("nvmedb_buffer_evictions_total{pool=index}"));
    assert_eq!(pages[1].gauges["nvmedb_sql_connections{}"], 5.0, "the admin and four clients");
    let commits = |p: &Page| p.plain["nvmedb_commit_duration_seconds_count{}"];
    assert!(commits(last) - commits(first) >= (2 * rounds) as f64, "every writing commit is timed");
    let groups = |p: &Page| p.plain["nvmedb_wal_group_commit_size_count{}"];
    assert!(groups(last) > groups(first), "flushes that released committers are counted");
    assert!(last.plain["nvmedb_checkpoint_duration_seconds_count{}"] >= 1.0, "the checkpoint at open");
    assert!(
        pages.iter().any(|p| p.counters["nvmedb_commits_total{}"] > first.counters["nvmedb_commits_total{}"]
            && p.counters["nvmedb_commits_total{}"] < last.counters["nvmedb_commits_total{}"]),
        "some scrape fell inside the workload"
    );

    // The SQL view shows the same counters, at least as far as the last page.
    let row = admin
        .query_one("SELECT xact_commit, xact_rollback, numbackends, wal_bytes FROM nvmedb_stat_database", &[])
        .await
        .unwrap();
    assert!(row.get::<_, i64>(0) as f64 >= last.counters["nvmedb_commits_total{}"]);
    assert!(row.get::<_, i64>(1) as f64 >= last.counters["nvmedb_aborts_total{}"]);
    assert!((1..=5).contains(&row.get::<_, i64>(2)), "the admin, and clients still closing");
    assert!(row.get::<_, i64>(3) as f64 >= last.counters["nvmedb_wal_bytes_total{}"]);
    let n = admin.query("SELECT * FROM nvmedb_stat_replication", &[]).await.unwrap();
    assert!(n.is_empty(), "a server that does not replicate has no replication rows");
    let e = admin.execute("DELETE FROM nvmedb_stat_database", &[]).await.unwrap_err();
    assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("42809"), "{e}");
    // The simple protocol (a cached plan the second time) sees fresh numbers each time.
    let a = admin.simple_query("SELECT xact_commit FROM nvmedb_stat_database").await.unwrap();
    admin.execute("INSERT INTO kv VALUES (-1, 0)", &[]).await.unwrap();
    let b = admin.simple_query("SELECT xact_commit FROM nvmedb_stat_database").await.unwrap();
    let val = |m: &[tokio_postgres::SimpleQueryMessage]| -> i64 {
        m.iter()
            .find_map(|x| match x {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(|s| s.parse().unwrap()),
                _ => None,
            })
            .unwrap()
    };
    assert!(val(&b) > val(&a), "the view was refreshed for the second statement");

    // `nvmedb status --metrics` prints the same page for people.
    let text = nvmedb::metrics::scrape(&maddr).unwrap();
    let summary = nvmedb::metrics::summary(&text);
    assert!(
        summary.contains("nvmedb_commits_total") && summary.contains("nvmedb_commit_duration_seconds (mean)")
    );
    assert!(!summary.contains("_bucket"));
    drop(admin);
    server.shutdown().unwrap();
}

#[test]
fn the_grafana_dashboard_names_only_exported_metrics() {
    use nvmedb::metrics::{self, Exposition, Replication};
    use nvmedb::repl::{LinkState, ReplStatus, ReplicationMode, StandbyPositions, StandbyStatus};
    // Every family the server can export: an engine page, both replication roles, the SQL
    // server's own (from a running server).
    let dir = TmpDir::path_only("metrics-dash");
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".into();
    config.metrics = Some("127.0.0.1:0".into());
    let server = Server::start(config).expect("server starts");
    let mut page = nvmedb::metrics::scrape(&server.metrics_addr().unwrap().to_string()).unwrap();
    let mut out = Exposition::new();
    let standby = StandbyStatus {
        addr: "127.0.0.1:7701".into(),
        link: LinkState::Up,
        detail: String::new(),
        shadow: 10,
        connects: 1,
        given_up: false,
        lag_bytes: 5,
        lag: Duration::from_millis(3),
    };
    let status = ReplStatus {
        configured: ReplicationMode::Eager,
        effective: ReplicationMode::Eager,
        degraded: None,
        fenced: None,
        lease_lost: false,
        epoch: 2,
        local_durable: 15,
        appended: 15,
        durable: 10,
        standbys: vec![standby],
        events: vec![],
    };
    metrics::replication(&mut out, &Replication::Primary(status));
    page.push_str(&out.finish());
    let mut out = Exposition::new();
    metrics::replication(&mut out, &Replication::Standby(StandbyPositions::default()));
    page.push_str(&out.finish());
    parse(&page);
    let dash =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/grafana-nvmedb.json"))
            .expect("docs/grafana-nvmedb.json");
    assert!(dash.trim_start().starts_with('{') && dash.contains("\"panels\""), "a Grafana dashboard");
    let mut named = 0;
    for token in dash.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if let Some(name) = token.strip_prefix("nvmedb_") {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .fold(name, |n, suffix| n.strip_suffix(suffix).unwrap_or(n));
            let family = format!("nvmedb_{base}");
            assert!(
                page.contains(&format!("# TYPE {family} ")),
                "the dashboard names {family}, which is not exported"
            );
            named += 1;
        }
    }
    assert!(named >= 20, "the dashboard's queries name {named} metrics");
    server.shutdown().unwrap();
}
