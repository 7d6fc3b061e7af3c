//! The crash tests' workload: multi-table transactions whose committed effect is known from
//! the seed and how many transactions each client committed, so a recovered database can be
//! compared row for row with what it must hold.
//!
//! Tables (every row 16 B to about 3 KiB, so rows grow, shrink and move between pages):
//! - `clients (id, committed)`: client `c`'s row counts its committed transactions — the
//!   commit marker that recovery is judged by;
//! - `events (id, client, pad)` with index `by_client`: each transaction inserts one event and
//!   deletes its client's event of [`WINDOW`] transactions earlier;
//! - `counters (id, count, pad)` with index `by_count`: [`COUNTERS`] rows that every client
//!   increments (reading some first under a shared lock), in random order, so transactions
//!   wait for each other, deadlock and retry; the pad's length follows the count;
//! - `items (id, grp, pad)` with index `by_grp`: each client's own rows, inserted, updated
//!   (new group, new size) and deleted.
//!
//! A client runs its transactions one after the other; transaction `s` of client `c` is
//! [`plan`]ned from `(seed, c, s)` and the client's [`ClientModel`] only, so it is the same on
//! every retry and after every restart. The state after client `c` committed `n_c`
//! transactions is therefore a function of the seed and the `n_c` ([`expected`]); [`verify`]
//! checks integrity (every heap row has exactly its index entries and no entry lacks its row)
//! and then that every table equals that state, which proves every acknowledged commit is
//! there and every transaction is all or nothing.

use nvmedb::util::sync::MutexExt;
use nvmedb::util::Rng;
use nvmedb::{ColumnType, Database, Error, Schema, Table, Transaction, Value};
use std::collections::BTreeMap;

/// Counter rows shared by all clients.
pub const COUNTERS: i64 = 6;
/// Events a client keeps: transaction `s` deletes the event of transaction `s - WINDOW`.
pub const WINDOW: u64 = 12;
/// Largest pad of a row.
pub const MAX_PAD: usize = 3000;

/// The four tables.
#[derive(Clone)]
pub struct Tables {
    /// Commit markers.
    pub clients: Table,
    /// Inserted and deleted by every transaction.
    pub events: Table,
    /// Shared counters.
    pub counters: Table,
    /// Each client's own rows.
    pub items: Table,
}

impl Tables {
    /// Opens the workload's tables in `db`.
    pub fn open(db: &Database) -> nvmedb::Result<Self> {
        Ok(Self {
            clients: db.table("clients")?,
            events: db.table("events")?,
            counters: db.table("counters")?,
            items: db.table("items")?,
        })
    }

    fn all(&self) -> [(&'static str, &Table); 4] {
        [
            ("clients", &self.clients),
            ("events", &self.events),
            ("counters", &self.counters),
            ("items", &self.items),
        ]
    }
}

fn padded(name: &str, index: &str) -> Schema {
    Schema::new(vec![
        ("id", ColumnType::Int),
        (name, ColumnType::Int),
        ("pad", ColumnType::Bytes(MAX_PAD as u32)),
    ])
    .with_index(index, name)
    .expect("schema")
}

/// Creates the tables and the counters (at zero) in an empty database.
pub fn create(db: &Database) -> nvmedb::Result<Tables> {
    db.create_table("clients", Schema::new(vec![("id", ColumnType::Int), ("committed", ColumnType::Int)]))?;
    db.create_table("events", padded("client", "by_client"))?;
    db.create_table("counters", padded("count", "by_count"))?;
    db.create_table("items", padded("grp", "by_grp"))?;
    let t = Tables::open(db)?;
    let mut tx = db.begin();
    for k in 0..COUNTERS {
        tx.insert(&t.counters, &counter_row(k, 0))?;
    }
    tx.commit()?;
    Ok(t)
}

/// `len` bytes starting at `fill`, counting up.
fn pad(len: usize, fill: u8) -> Vec<u8> {
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

/// A row length: mostly small, sometimes close to the largest.
fn pad_len(rng: &mut Rng) -> usize {
    if rng.chance(0.3) {
        rng.range(1000, MAX_PAD as u64 + 1) as usize
    } else {
        rng.below(200) as usize
    }
}

/// Counter `k` holding `count`: the pad's length and bytes follow from both.
pub fn counter_row(k: i64, count: i64) -> Vec<Value> {
    let mut rng = Rng::new((k as u64).wrapping_mul(1_000_003) ^ (count as u64).wrapping_mul(0x9E37_79B9));
    let len = pad_len(&mut rng);
    vec![Value::Int(k), Value::Int(count), Value::Bytes(pad(len, (k * 7 + count) as u8))]
}

fn event_id(client: u64, seq: u64) -> i64 {
    ((client << 32) | seq) as i64
}

fn item_id(client: u64, item: i64) -> i64 {
    ((client << 32) as i64) | item
}

/// One step of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `clients[c].committed = seq + 1` (an insert for the client's first transaction).
    Marker,
    /// Inserts the event of this transaction.
    InsertEvent {
        /// Pad length.
        len: usize,
    },
    /// Deletes the event of transaction `seq` of this client.
    DeleteEvent {
        /// The older transaction.
        seq: u64,
    },
    /// Reads counter `k` under a shared lock.
    ReadCounter(i64),
    /// Adds one to counter `k` (exclusive lock; an upgrade if it was read before).
    Counter(i64),
    /// Inserts item `item` of this client.
    InsertItem {
        /// Item number.
        item: i64,
        /// Indexed group.
        grp: i64,
        /// Pad length.
        len: usize,
    },
    /// Rewrites item `item` (new group, new size).
    UpdateItem {
        /// Item number.
        item: i64,
        /// New group.
        grp: i64,
        /// New pad length.
        len: usize,
    },
    /// Deletes item `item`.
    DeleteItem {
        /// Item number.
        item: i64,
    },
}

/// One transaction of one client.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The client.
    pub client: u64,
    /// Its sequence number among the client's transactions.
    pub seq: u64,
    /// What it does, in order.
    pub steps: Vec<Step>,
}

/// An item as its client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    grp: i64,
    len: usize,
    fill: u8,
}

/// What a client knows of its own rows after its committed transactions.
#[derive(Debug, Clone, Default)]
pub struct ClientModel {
    /// Transactions committed.
    pub committed: u64,
    items: BTreeMap<i64, Item>,
    next_item: i64,
    /// Events of the transactions not yet deleted: seq → pad length.
    events: BTreeMap<u64, usize>,
}

fn fill_of(client: u64, seq: u64, what: i64) -> u8 {
    (seq as u8).wrapping_mul(31) ^ (client as u8).wrapping_mul(7) ^ what as u8
}

/// Transaction `model.committed` of client `client`: a function of the seed, the client and
/// its model only.
pub fn plan(seed: u64, client: u64, model: &ClientModel) -> Plan {
    let seq = model.committed;
    let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (client << 48) ^ seq);
    let mut steps = vec![Step::Marker, Step::InsertEvent { len: pad_len(&mut rng) }];
    if seq >= WINDOW {
        steps.push(Step::DeleteEvent { seq: seq - WINDOW });
    }
    for _ in 0..rng.range(1, 3) {
        let k = rng.below(COUNTERS as u64) as i64;
        if rng.chance(0.3) {
            steps.push(Step::ReadCounter(k));
        }
        steps.push(Step::Counter(k));
    }
    // Shuffle these; the item steps go in afterwards, in their own order, at random places.
    for i in (1..steps.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        steps.swap(i, j);
    }
    let mut items = model.items.clone();
    let mut next_item = model.next_item;
    let mut at = 0;
    for _ in 0..rng.range(1, 4) {
        let step = if items.is_empty() || rng.chance(0.4) {
            let item = next_item;
            next_item += 1;
            let (grp, len) = (rng.below(8) as i64, pad_len(&mut rng));
            items.insert(item, Item { grp, len, fill: 0 });
            Step::InsertItem { item, grp, len }
        } else {
            let keys: Vec<i64> = items.keys().copied().collect();
            let item = keys[rng.below(keys.len() as u64) as usize];
            if rng.chance(0.5) {
                let (grp, len) = (rng.below(8) as i64, pad_len(&mut rng));
                items.insert(item, Item { grp, len, fill: 0 });
                Step::UpdateItem { item, grp, len }
            } else {
                items.remove(&item);
                Step::DeleteItem { item }
            }
        };
        at = rng.range(at as u64, steps.len() as u64 + 1) as usize;
        steps.insert(at, step);
        at += 1;
    }
    Plan { client, seq, steps }
}

/// Applies a committed plan to its client's model.
pub fn apply(plan: &Plan, model: &mut ClientModel) {
    assert_eq!(plan.seq, model.committed, "plans apply in order");
    let (c, s) = (plan.client, plan.seq);
    for step in &plan.steps {
        match *step {
            Step::InsertEvent { len } => {
                model.events.insert(s, len);
            }
            Step::DeleteEvent { seq } => {
                model.events.remove(&seq);
            }
            Step::InsertItem { item, grp, len } | Step::UpdateItem { item, grp, len } => {
                model.items.insert(item, Item { grp, len, fill: fill_of(c, s, item) });
                model.next_item = model.next_item.max(item + 1);
            }
            Step::DeleteItem { item } => {
                model.items.remove(&item);
            }
            Step::Marker | Step::ReadCounter(_) | Step::Counter(_) => {}
        }
    }
    model.committed = s + 1;
}

/// The model of client `client` after `n` committed transactions, and the counter
/// increments they made.
pub fn replay(seed: u64, client: u64, n: u64) -> (ClientModel, BTreeMap<i64, i64>) {
    let mut m = ClientModel::default();
    let mut incs = BTreeMap::new();
    for _ in 0..n {
        let p = plan(seed, client, &m);
        for step in &p.steps {
            if let Step::Counter(k) = step {
                *incs.entry(*k).or_insert(0) += 1;
            }
        }
        apply(&p, &mut m);
    }
    (m, incs)
}

fn missing(what: String) -> Error {
    Error::NotFound(format!("workload: {what}, which the client's model says is there"))
}

/// Runs one step inside `tx`. A step the model says must find its row and does not fails with
/// `NotFound` (never retryable).
pub fn exec(tx: &mut Transaction, t: &Tables, plan: &Plan, step: &Step) -> nvmedb::Result<()> {
    let (c, s) = (plan.client, plan.seq);
    match *step {
        Step::Marker => {
            let row = [Value::Int(c as i64), Value::Int(s as i64 + 1)];
            if s == 0 {
                tx.insert(&t.clients, &row)?;
            } else if !tx.update(&t.clients, &row)? {
                return Err(missing(format!("client {c}'s row")));
            }
        }
        Step::InsertEvent { len } => {
            let row =
                [Value::Int(event_id(c, s)), Value::Int(c as i64), Value::Bytes(pad(len, fill_of(c, s, -1)))];
            tx.insert(&t.events, &row)?;
        }
        Step::DeleteEvent { seq } => {
            if !tx.delete(&t.events, &Value::Int(event_id(c, seq)))? {
                return Err(missing(format!("event {seq} of client {c}")));
            }
        }
        Step::ReadCounter(k) => {
            if tx.get(&t.counters, &Value::Int(k))?.is_none() {
                return Err(missing(format!("counter {k}")));
            }
        }
        Step::Counter(k) => {
            let row = tx
                .get_for_update(&t.counters, &Value::Int(k))?
                .ok_or_else(|| missing(format!("counter {k}")))?;
            let count = row[1].as_int().expect("count is an Int");
            if !tx.update(&t.counters, &counter_row(k, count + 1))? {
                return Err(missing(format!("counter {k}")));
            }
        }
        Step::InsertItem { item, grp, len } => {
            let row =
                [Value::Int(item_id(c, item)), Value::Int(grp), Value::Bytes(pad(len, fill_of(c, s, item)))];
            tx.insert(&t.items, &row)?;
        }
        Step::UpdateItem { item, grp, len } => {
            let row =
                [Value::Int(item_id(c, item)), Value::Int(grp), Value::Bytes(pad(len, fill_of(c, s, item)))];
            if !tx.update(&t.items, &row)? {
                return Err(missing(format!("item {item} of client {c}")));
            }
        }
        Step::DeleteItem { item } => {
            if !tx.delete(&t.items, &Value::Int(item_id(c, item)))? {
                return Err(missing(format!("item {item} of client {c}")));
            }
        }
    }
    Ok(())
}

/// Runs `plan` as one transaction, retrying (with the same plan) after deadlocks and lock
/// timeouts. Returns the number of retries; any other error is returned.
pub fn run(db: &Database, t: &Tables, plan: &Plan) -> nvmedb::Result<u64> {
    let mut retries = 0;
    loop {
        let mut tx = db.begin();
        match plan.steps.iter().try_for_each(|step| exec(&mut tx, t, plan, step)) {
            Ok(()) => {
                tx.commit()?;
                return Ok(retries);
            }
            Err(e) if e.is_retryable() => {
                tx.abort()?;
                retries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Committed transactions per client, read from the `clients` table.
pub fn committed(t: &Tables) -> nvmedb::Result<BTreeMap<u64, u64>> {
    let mut out = BTreeMap::new();
    t.clients.scan(|r| {
        out.insert(r.int(0) as u64, r.int(1) as u64);
        Ok(true)
    })?;
    Ok(out)
}

type Rows = BTreeMap<i64, Vec<Value>>;

/// What each table must hold once client `c` has committed `n[c]` transactions.
pub fn expected(seed: u64, n: &BTreeMap<u64, u64>) -> [Rows; 4] {
    let (mut clients, mut events, mut counters, mut items) =
        (Rows::new(), Rows::new(), Rows::new(), Rows::new());
    let mut total: BTreeMap<i64, i64> = (0..COUNTERS).map(|k| (k, 0)).collect();
    for (&c, &committed) in n {
        if committed == 0 {
            continue;
        }
        let (m, incs) = replay(seed, c, committed);
        clients.insert(c as i64, vec![Value::Int(c as i64), Value::Int(committed as i64)]);
        for (&s, &len) in &m.events {
            let id = event_id(c, s);
            events.insert(
                id,
                vec![Value::Int(id), Value::Int(c as i64), Value::Bytes(pad(len, fill_of(c, s, -1)))],
            );
        }
        for (&item, it) in &m.items {
            let id = item_id(c, item);
            items.insert(id, vec![Value::Int(id), Value::Int(it.grp), Value::Bytes(pad(it.len, it.fill))]);
        }
        for (k, v) in incs {
            *total.entry(k).or_insert(0) += v;
        }
    }
    for (k, count) in total {
        counters.insert(k, counter_row(k, count));
    }
    [clients, events, counters, items]
}

/// Every row of `t`, by primary key; a key found twice by the scan is an error.
fn rows_of(name: &str, t: &Table) -> Result<Rows, String> {
    let mut rows = Rows::new();
    let mut dup = None;
    t.scan(|r| {
        let v = r.to_values();
        let k = v[0].as_int().expect("Int key");
        if rows.insert(k, v).is_some() && dup.is_none() {
            dup = Some(k);
        }
        Ok(true)
    })
    .map_err(|e| format!("{name}: scan failed: {e}"))?;
    match dup {
        Some(k) => Err(format!("{name}: the heap holds key {k} twice")),
        None => Ok(rows),
    }
}

fn short(v: &[Value]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|x| match x {
            Value::Bytes(b) => format!("{} B", b.len()),
            other => other.to_string(),
        })
        .collect();
    format!("({})", parts.join(", "))
}

/// Bounds on what a client may have committed: at least `floor` (everything acknowledged),
/// at most `ceil` (plus the transactions in flight when the process died).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Acknowledged transactions.
    pub floor: u64,
    /// Acknowledged plus in flight.
    pub ceil: u64,
}

/// Checks a recovered database: integrity of every table (each heap row has exactly its
/// primary and secondary entries and no entry lacks its row), each client's committed count
/// within its [`Bounds`] (clients not named must have committed nothing), and every table
/// equal to what those commits make it. Returns the committed counts.
pub fn verify(
    db: &Database,
    seed: u64,
    bounds: &BTreeMap<u64, Bounds>,
) -> Result<BTreeMap<u64, u64>, String> {
    let t = Tables::open(db).map_err(|e| format!("tables: {e}"))?;
    for (name, table) in t.all() {
        table.check_integrity().map_err(|e| format!("integrity of {name}: {e}"))?;
    }
    let n = committed(&t).map_err(|e| format!("clients: {e}"))?;
    for (&c, &got) in &n {
        let b = bounds.get(&c).copied().unwrap_or(Bounds { floor: 0, ceil: 0 });
        if got < b.floor {
            return Err(format!(
                "client {c}: {got} transactions committed, but {} were acknowledged: acknowledged commits lost",
                b.floor
            ));
        }
        if got > b.ceil {
            return Err(format!("client {c}: {got} transactions committed, at most {} were started", b.ceil));
        }
    }
    for (&c, b) in bounds {
        if b.floor > 0 && !n.contains_key(&c) {
            return Err(format!(
                "client {c}: no commit marker, but {} transactions were acknowledged",
                b.floor
            ));
        }
    }
    let want = expected(seed, &n);
    for ((name, table), want) in t.all().into_iter().zip(want) {
        let got = rows_of(name, table)?;
        for (k, w) in &want {
            match got.get(k) {
                None => return Err(format!("{name}: row {k} {} is missing", short(w))),
                Some(g) if g != w => {
                    return Err(format!("{name}: row {k} is {} where {} was committed", short(g), short(w)))
                }
                Some(_) => {}
            }
        }
        if let Some((k, g)) = got.iter().find(|(k, _)| !want.contains_key(k)) {
            return Err(format!(
                "{name}: row {k} {} is there but no committed transaction left it",
                short(g)
            ));
        }
    }
    Ok(n)
}

/// What runs beside a crash test's clients, given the line printer they share.
pub type Beside<'a> = dyn Fn(&dyn Fn(String)) + Sync + 'a;

/// A crash test's child: `clients` threads each run the workload's transactions from where the
/// commit markers say the client stopped, printing `ACK <client> <seq>` (flushed) after each
/// commit, until the process is killed; `beside`, when given, runs on a thread of its own next
/// to them with the same printer (a test that moves tables or checkpoints while clients run).
pub fn run_clients(db: &Database, seed: u64, clients: u64, beside: Option<&Beside<'_>>) {
    let t = Tables::open(db).expect("workload tables");
    let committed = committed(&t).expect("commit markers");
    let out = std::sync::Mutex::new(std::io::stdout());
    let say = |s: String| {
        use std::io::Write;
        let mut o = out.locked();
        writeln!(o, "{s}").expect("stdout");
        o.flush().expect("stdout");
    };
    std::thread::scope(|s| {
        for c in 0..clients {
            let (t, say) = (&t, &say);
            let n = committed.get(&c).copied().unwrap_or(0);
            s.spawn(move || {
                let (mut model, _) = replay(seed, c, n);
                loop {
                    let plan = plan(seed, c, &model);
                    run(db, t, &plan)
                        .unwrap_or_else(|e| panic!("child: client {c} transaction {}: {e}", plan.seq));
                    say(format!("ACK {c} {}", plan.seq));
                    apply(&plan, &mut model);
                }
            });
        }
        if let Some(f) = beside {
            let say = &say;
            s.spawn(move || f(say));
        }
    });
}

/// The acknowledgements a crash test's child printed (`ACK <client> <seq>` lines, as
/// [`run_clients`] prints them).
#[derive(Debug, Default, Clone)]
pub struct Acks {
    /// Per client, one more than the highest transaction acknowledged.
    pub acked: BTreeMap<u64, u64>,
    /// Acknowledgements read.
    pub n: u64,
}

impl Acks {
    /// Counts `line` if it is an acknowledgement; returns the count so far.
    pub fn note(&mut self, line: &str) -> u64 {
        let mut f = line
            .strip_prefix("ACK ")
            .into_iter()
            .flat_map(|r| r.split_whitespace().map(|x| x.parse::<u64>().ok()));
        if let (Some(Some(c)), Some(Some(s))) = (f.next(), f.next()) {
            let e = self.acked.entry(c).or_insert(0);
            *e = (*e).max(s + 1);
            self.n += 1;
        }
        self.n
    }

    /// What each of clients `0..clients` may have committed after the kill, given what was
    /// `committed` before this child ran: at least the larger of that and what it acknowledged,
    /// at most one more for each of the first `running` clients (a transaction in flight).
    pub fn bounds(
        &self,
        committed: &BTreeMap<u64, u64>,
        clients: u64,
        running: u64,
    ) -> BTreeMap<u64, Bounds> {
        (0..clients)
            .map(|c| {
                let floor =
                    committed.get(&c).copied().unwrap_or(0).max(self.acked.get(&c).copied().unwrap_or(0));
                (c, Bounds { floor, ceil: floor + u64::from(c < running) })
            })
            .collect()
    }
}
