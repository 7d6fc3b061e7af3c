//! A standby serving reads (`nvmedb standby --serve`): every statement of an idle session
//! runs on a read-only snapshot of what the standby has applied
//! ([`nvmedb::repl::Standby::read_snapshot`]), a prefix of the primary's commits; changes are
//! refused with 25006.
//!
//! Owns: the current snapshot and when it is replaced. Invariants: a snapshot is reused for
//! at most [`StandbyReads::max_age`] and only by sessions whose `nvmedb.min_lsn` it holds; a
//! session that set `nvmedb.min_lsn` (read-your-writes: the primary's `SHOW
//! nvmedb.durable_lsn` after its commit) waits until the standby has applied it, or fails
//! after [`StandbyReads::wait`]. SHOW `nvmedb.snapshot_lsn` and `nvmedb.snapshot_lag_bytes`
//! report what the session's last statement read.

use crate::error::{code, SqlError, SqlResult};
use crate::server::{ReadSnapshots, SnapshotSettings};
use crate::session::Engine;
use nvmedb::repl::Standby;
use nvmedb::util::sync::MutexExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Current {
    engine: Arc<Engine>,
    lsn: u64,
    lag: u64,
    taken: Instant,
}

/// The snapshots a standby serves reads from.
pub struct StandbyReads {
    standby: Arc<Standby>,
    /// How long a snapshot serves new statements before a newer one is taken.
    pub max_age: Duration,
    /// How long a statement waits for the standby to apply its session's `nvmedb.min_lsn`.
    pub wait: Duration,
    current: Mutex<Option<Current>>,
}

impl StandbyReads {
    /// Serves reads of `standby`, a snapshot at most `max_age` old per statement.
    pub fn new(standby: Arc<Standby>, max_age: Duration) -> Arc<Self> {
        Arc::new(Self { standby, max_age, wait: Duration::from_secs(30), current: Mutex::new(None) })
    }

    /// The engine of a fresh snapshot (also what the server starts with).
    pub fn fresh(&self) -> SqlResult<Arc<Engine>> {
        let snap = self.standby.read_snapshot().map_err(|e| SqlError::from_engine(e, None))?;
        let engine = Engine::new(snap.db().clone())?;
        *self.current.locked() = Some(Current {
            engine: engine.clone(),
            lsn: snap.lsn(),
            lag: snap.lag_bytes(),
            taken: Instant::now(),
        });
        Ok(engine)
    }
}

impl ReadSnapshots for StandbyReads {
    fn engine(&self, at_least: u64) -> SqlResult<(Arc<Engine>, SnapshotSettings)> {
        if at_least > 0 && !self.standby.wait_applied(at_least, self.wait) {
            return Err(SqlError::new(
                code::QUERY_CANCELED,
                format!(
                    "the standby has not applied LSN {at_least} (nvmedb.min_lsn) within {:?}: it has applied {}",
                    self.wait,
                    self.standby.applied()
                ),
            ));
        }
        let mut cur = self.current.locked();
        let usable = cur.as_ref().is_some_and(|c| c.taken.elapsed() < self.max_age && c.lsn >= at_least);
        if !usable {
            drop(cur);
            self.fresh()?;
            cur = self.current.locked();
        }
        let c = cur.as_ref().expect("a snapshot was just taken");
        Ok((
            c.engine.clone(),
            vec![
                ("nvmedb.snapshot_lsn", c.lsn.to_string()),
                ("nvmedb.snapshot_lag_bytes", c.lag.to_string()),
            ],
        ))
    }
}
