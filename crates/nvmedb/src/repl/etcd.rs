//! The etcd implementation of the coordination store (feature `etcd`), and a launcher for local
//! etcd clusters (tests, the lab's failover experiment).
//!
//! Owns: [`EtcdStore`] — a [`CoordStore`] over the `etcd-client` crate: every call runs on the
//! store's own small tokio runtime and is bounded by [`EtcdStore::timeout`]; conditional writes
//! are etcd transactions (`create` = "create revision is 0", `replace`/`delete_at` = "mod
//! revision is the one read"); a renewal is one keep-alive round trip whose answer carries the
//! remaining TTL — and [`LocalEtcd`], etcd members as child processes on loopback ports with
//! their data in a given directory.
//!
//! Invariants:
//! - Revisions are etcd's mod revisions (they grow with every write to the store, as the trait
//!   asks). Reads are linearizable (etcd's default), so a key read after a conditional write
//!   that won is seen by every client.
//! - A lease the store no longer knows (expired or revoked) is [`CoordError::LeaseExpired`];
//!   anything else that fails (no quorum, connection refused, timeout) is
//!   [`CoordError::Unavailable`] naming the endpoints. etcd keeps TTLs in whole seconds: a TTL is
//!   rounded up.

use super::coord::{CoordError, CoordStore, LeaseId, Versioned};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A [`CoordStore`] on an etcd cluster (v3 API).
pub struct EtcdStore {
    rt: tokio::runtime::Runtime,
    client: Client,
    endpoints: Vec<String>,
    timeout: Duration,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EtcdStore({})", self.endpoints.join(","))
    }
}

/// Parses `etcd://host:port,host:port/...` (or a bare `host:port,...` list) into endpoints.
pub fn parse_etcd_url(url: &str) -> Result<Vec<String>, CoordError> {
    let rest = url.strip_prefix("etcd://").unwrap_or(url);
    let rest = rest.split('/').next().unwrap_or("");
    let eps: Vec<String> =
        rest.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| format!("http://{s}")).collect();
    if eps.is_empty() {
        return Err(CoordError::Unavailable(format!(
            "no etcd endpoint in {url:?} (expected etcd://host:port,...)"
        )));
    }
    Ok(eps)
}

/// Interval of the client's HTTP/2 keep-alive pings (above etcd's 5 s minimum).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

impl EtcdStore {
    /// Connects to the cluster at `url` (`etcd://host:port,host:port`); every request gives up
    /// after `timeout`. Connecting is lazy: an unreachable cluster shows as
    /// [`CoordError::Unavailable`] on the first request.
    pub fn connect(url: &str, timeout: Duration) -> Result<Self, CoordError> {
        let endpoints = parse_etcd_url(url)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("nvmedb-etcd")
            .enable_all()
            .build()
            .map_err(|e| CoordError::Unavailable(format!("starting the etcd client runtime: {e}")))?;
        let opts = ConnectOptions::new()
            .with_timeout(timeout)
            .with_connect_timeout(timeout)
            // HTTP/2 pings only while requests are in flight, and no more often than etcd's
            // --grpc-keepalive-min-time (5 s): etcd refuses pings on an idle connection and
            // faster ones, closing the connection ("too_many_pings") under the requests on it.
            // A dead member is noticed by the requests' own timeout.
            .with_keep_alive(KEEP_ALIVE_INTERVAL, timeout)
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        let client = rt
            .block_on(async { tokio::time::timeout(timeout, Client::connect(&endpoints, Some(opts))).await })
            .map_err(|_| {
                CoordError::Unavailable(format!("connecting to {}: timed out", endpoints.join(",")))
            })?
            .map_err(|e| CoordError::Unavailable(format!("connecting to {}: {e}", endpoints.join(","))))?;
        Ok(Self { rt, client, endpoints, timeout })
    }

    /// How long one request may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs one request on the runtime, bounded by the timeout. The client balances over the
    /// endpoints and may pick a member that is down: a request that could not even connect
    /// (so it was never sent, and repeating it is safe for conditional writes too) is repeated
    /// until the timeout.
    fn call<T, F>(&self, what: &str, f: impl Fn(Client) -> F) -> Result<T, CoordError>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let fut = f(self.client.clone());
            match self.rt.block_on(async { tokio::time::timeout(left, fut).await }) {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => {
                    let d = e.to_string();
                    if d.contains("tcp connect error")
                        && Instant::now() + Duration::from_millis(20) < deadline
                    {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    return Err(self.unavailable(what, &d));
                }
                Err(_) => return Err(self.unavailable(what, &format!("no answer in {:?}", self.timeout))),
            }
        }
    }

    fn unavailable(&self, what: &str, detail: &str) -> CoordError {
        CoordError::Unavailable(format!("etcd {} ({what}): {detail}", self.endpoints.join(",")))
    }

    /// A put of `key` with an optional lease, as a transaction operation.
    fn put_op(key: &str, value: &[u8], lease: Option<LeaseId>) -> TxnOp {
        TxnOp::put(key, value, lease.map(|l| PutOptions::new().with_lease(l as i64)))
    }

    /// Runs `txn`; returns the store's revision after it if its comparison held.
    fn txn(&self, what: &str, txn: Txn, lease: Option<LeaseId>) -> Result<Option<u64>, CoordError> {
        let r = self.call(what, |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        });
        match r {
            Ok(resp) => Ok(resp.succeeded().then(|| resp.header().map_or(0, |h| h.revision() as u64))),
            Err(e) => Err(lease_error(e, lease)),
        }
    }
}

/// A put naming a lease etcd no longer has fails with "requested lease not found".
fn lease_error(e: CoordError, lease: Option<LeaseId>) -> CoordError {
    match (&e, lease) {
        (CoordError::Unavailable(d), Some(l)) if d.contains("lease not found") => CoordError::LeaseExpired(l),
        _ => e,
    }
}

fn versioned(kv: &etcd_client::KeyValue) -> Versioned {
    Versioned {
        value: kv.value().to_vec(),
        revision: kv.mod_revision() as u64,
        lease: (kv.lease() != 0).then_some(kv.lease() as u64),
    }
}

impl CoordStore for EtcdStore {
    fn grant(&self, ttl: Duration) -> Result<LeaseId, CoordError> {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let r =
            self.call("grant", move |mut c| async move { c.lease_grant(secs.max(1) as i64, None).await })?;
        Ok(r.id() as u64)
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), CoordError> {
        // One round trip: the client sends a renewal and waits for its answer; a TTL of 0 or
        // less (or "lease not found") means the lease is gone.
        let r = self
            .call("keep-alive", move |mut c| async move { c.lease_keep_alive(lease as i64).await.map(drop) });
        match r {
            Ok(()) => Ok(()),
            Err(CoordError::Unavailable(d)) if d.contains("lease not found") => {
                Err(CoordError::LeaseExpired(lease))
            }
            Err(e) => Err(e),
        }
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), CoordError> {
        match self.call("revoke", move |mut c| async move { c.lease_revoke(lease as i64).await }) {
            Ok(_) => Ok(()),
            // Already gone: what revoking wanted.
            Err(CoordError::Unavailable(d)) if d.contains("lease not found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn get(&self, key: &str) -> Result<Option<Versioned>, CoordError> {
        let r = self.call("get", |mut c| {
            let k = key.to_string();
            async move { c.get(k, None).await }
        })?;
        Ok(r.kvs().first().map(versioned))
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, CoordError> {
        let r = self.call("list", |mut c| {
            let k = prefix.to_string();
            async move { c.get(k, Some(GetOptions::new().with_prefix())).await }
        })?;
        let mut out: Vec<(String, Versioned)> = r
            .kvs()
            .iter()
            .map(|kv| (String::from_utf8_lossy(kv.key()).into_owned(), versioned(kv)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<u64, CoordError> {
        let r = self
            .call("put", |mut c| {
                let (k, v) = (key.to_string(), value.to_vec());
                async move { c.put(k, v, lease.map(|l| PutOptions::new().with_lease(l as i64))).await }
            })
            .map_err(|e| lease_error(e, lease))?;
        Ok(r.header().map_or(0, |h| h.revision() as u64))
    }

    fn create(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Option<u64>, CoordError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([Self::put_op(key, value, lease)]);
        self.txn("create", txn, lease)
    }

    fn replace(
        &self,
        key: &str,
        revision: u64,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>, CoordError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, revision as i64)])
            .and_then([Self::put_op(key, value, lease)]);
        self.txn("replace", txn, lease)
    }

    fn delete_at(&self, key: &str, revision: u64) -> Result<bool, CoordError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, revision as i64)])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self.txn("delete", txn, None)?.is_some())
    }
}

/// A local etcd cluster: `n` members as child processes of this one, on loopback ports, with
/// their data under a directory (tests and the lab's failover experiment; production runs its
/// own etcd). Dropping it kills the members.
pub struct LocalEtcd {
    dir: PathBuf,
    members: Vec<LocalMember>,
    cluster: String,
    token: String,
    /// The address clients reach the members at (their peers talk on loopback).
    host: String,
}

struct LocalMember {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A free loopback port (bound, then released: another process may take it in between, so
/// [`LocalEtcd::start`] retries with fresh ports when a member fails to start).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalEtcd {
    /// Starts `n` members (`etcd` must be on the PATH: Debian's `etcd-server`) with their data
    /// in `dir` and waits until the cluster answers (at most `wait`).
    pub fn start(dir: &Path, n: usize, wait: Duration) -> Result<Self, CoordError> {
        Self::start_on(dir, n, wait, "127.0.0.1")
    }

    /// [`LocalEtcd::start`] with the members answering clients on `host` (an address of this
    /// machine, e.g. a bridge that nodes in network namespaces reach); their peer traffic stays
    /// on loopback.
    pub fn start_on(dir: &Path, n: usize, wait: Duration, host: &str) -> Result<Self, CoordError> {
        let mut last = String::new();
        for attempt in 0..3 {
            match Self::try_start(dir, n, wait, attempt, host) {
                Ok(c) => return Ok(c),
                Err(e) => last = e.to_string(),
            }
        }
        Err(CoordError::Unavailable(format!(
            "could not start a local etcd cluster in {}: {last}",
            dir.display()
        )))
    }

    fn try_start(
        dir: &Path,
        n: usize,
        wait: Duration,
        attempt: usize,
        host: &str,
    ) -> Result<Self, CoordError> {
        let io = |what: &str, e: std::io::Error| CoordError::Unavailable(format!("{what}: {e}"));
        let mut members = Vec::new();
        for i in 0..n {
            members.push(LocalMember {
                name: format!("e{i}"),
                client: free_port().map_err(|e| io("finding a port", e))?,
                peer: free_port().map_err(|e| io("finding a port", e))?,
                child: None,
            });
        }
        let cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("nvmedb-{}-{attempt}-{}", std::process::id(), free_port().unwrap_or(0));
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| io(&format!("creating {}", dir.display()), e))?;
        let mut c = Self { dir: dir.to_path_buf(), members, cluster, token, host: host.to_string() };
        for i in 0..n {
            c.spawn(i)?;
        }
        c.wait_ready(wait)?;
        Ok(c)
    }

    fn spawn(&mut self, i: usize) -> Result<(), CoordError> {
        let m = &self.members[i];
        let data = self.dir.join(&m.name);
        let log = std::fs::File::create(self.dir.join(format!("{}.log", m.name))).map_err(|e| {
            CoordError::Unavailable(format!("creating the log of etcd member {}: {e}", m.name))
        })?;
        let log2 = log.try_clone().map_err(|e| CoordError::Unavailable(e.to_string()))?;
        let state = if data.exists() { "existing" } else { "new" };
        let child = Command::new("etcd")
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen-client-urls")
            .arg(format!("http://{}:{}", self.host, m.client))
            .arg("--advertise-client-urls")
            .arg(format!("http://{}:{}", self.host, m.client))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-cluster")
            .arg(&self.cluster)
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--initial-cluster-state")
            .arg(state)
            // Fast elections on loopback (defaults: 100 ms / 1000 ms).
            .arg("--heartbeat-interval")
            .arg("50")
            .arg("--election-timeout")
            .arg("500")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                CoordError::Unavailable(format!("starting etcd (is Debian's etcd-server installed?): {e}"))
            })?;
        self.members[i].child = Some(child);
        Ok(())
    }

    fn wait_ready(&mut self, wait: Duration) -> Result<(), CoordError> {
        let deadline = Instant::now() + wait;
        loop {
            for m in &mut self.members {
                if let Some(ch) = &mut m.child {
                    if let Ok(Some(st)) = ch.try_wait() {
                        return Err(CoordError::Unavailable(format!(
                            "etcd member {} exited ({st}); see {}",
                            m.name,
                            self.dir.join(format!("{}.log", m.name)).display()
                        )));
                    }
                }
            }
            let ok = EtcdStore::connect(&self.url(), Duration::from_secs(1))
                .and_then(|s| s.put("/nvmedb-local-etcd/ready", b"1", None));
            match ok {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(CoordError::Unavailable(format!(
                        "the local etcd cluster did not answer: {e}"
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// `etcd://host:p1,host:p2,...` for every member.
    pub fn url(&self) -> String {
        let eps: Vec<String> = self.members.iter().map(|m| format!("{}:{}", self.host, m.client)).collect();
        format!("etcd://{}", eps.join(","))
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when the cluster has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The index of the member that is the raft leader now, if one answers.
    pub fn leader(&self) -> Option<usize> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_none() {
                continue;
            }
            let ep = format!("http://{}:{}", self.host, m.client);
            let st = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(1), async {
                    let mut c = Client::connect([ep.as_str()], None).await?;
                    c.status().await
                })
                .await
            });
            if let Ok(Ok(s)) = st {
                let h = s.header().map(|h| h.member_id());
                if h.is_some() && h == Some(s.leader()) {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Kills member `i` with SIGKILL (its data stays).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut ch) = self.members[i].child.take() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
    }

    /// Restarts a killed member `i` on its ports with its data.
    pub fn restart(&mut self, i: usize) -> Result<(), CoordError> {
        if self.members[i].child.is_none() {
            self.spawn(i)?;
        }
        Ok(())
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
