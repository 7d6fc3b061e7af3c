//! Replication and high availability (seeds 000, 001, 002; docs/ha.md).
//!
//! Owns: log shipping from a primary to standbys over TCP ([`ReplicatedLog`], a
//! [`RecordLog`](crate::wal::RecordLog) that wraps the local log and adds the standbys' shadow
//! counters to `durable_lsn`/`wait_durable` per [`ReplicationMode`]); the standby
//! ([`Standby`]: receives records, persists them in its [`ReplicaLog`] at the primary's LSNs,
//! acknowledges its persisted position, applies redo continuously, and is promoted into a
//! writable database with a new epoch); data-page mirroring ([`MirrorStorage`]: every data
//! write and sync is also done synchronously on the standby); the wire protocol
//! ([`wire`]: CRC32C-checked frames, each carrying the sender's epoch, and an HMAC-SHA256
//! challenge/response handshake on a shared secret).
//!
//! Seams (each with a real and a simulated implementation, so the whole cluster runs under the
//! deterministic simulator, `nvmedb-sim`): [`clock`] (time, waits and threads), [`net`] (TCP or
//! an in-memory network), [`disk`] (a node's files, all through `io::Storage`: a directory or a
//! crash-simulated disk) and [`coord`] (etcd or an in-memory store). [`Env`] carries a node's
//! clock and network. The files import each other one way only (`tests/layers.rs`): the
//! standby's shared state lives in `link.rs`, which the standby, apply, forwarding, promotion
//! and base-backup code all use.
//!
//! Invariants:
//! - A commit is acknowledged only when the local log is durable up to it and the shadow
//!   counters satisfy the mode in force (eager: all standbys; quorum k; chain: the last;
//!   lazy: local only). When standbys do not keep up within the policy's timeout, the commit
//!   either fails with [`ReplError::Timeout`] or the log switches to a weaker mode, which is
//!   logged to stderr and shown in [`ReplicatedLog::status`] — never silently.
//! - A shadow counter only reflects positions a standby reported as persisted on the current
//!   connection; on reconnect it is first lowered to what the primary will re-ship from.
//! - Epochs fence: a standby refuses every frame whose epoch is older than its own, so a
//!   demoted primary cannot get acknowledgements (and so cannot acknowledge commits) from a
//!   standby that has seen a newer primary or was promoted.

mod apply;
pub mod clock;
pub mod coord;
pub mod disk;
pub mod env;
#[cfg(feature = "etcd")]
pub mod etcd;
mod forward;
pub mod ha;
mod link;
mod mirror;
mod mode;
pub mod net;
pub mod node;
mod open;
mod primary;
mod promote;
pub mod reads;
mod replica_log;
pub(crate) mod seed;
mod standby;
mod state;
pub mod wire;

pub use crate::error::ReplError;
pub use crate::xlog::{LinkState, ReplicationMode};
pub use disk::{read_cluster, read_epoch, read_history, DirDisk, Disk};
pub use env::Env;
pub use link::{PromoteOptions, PromoteReport, StandbyConfig};
pub use mirror::{MirrorConfig, MirrorStorage};
pub use mode::{mode_name, parse_mode};
pub use open::{open_primary, open_primary_on, open_primary_with, read_secret};
pub use primary::{
    AckGate, PrimaryNode, ReplConfig, ReplStatus, ReplicatedLog, ReplicatedLogOpener, StandbyPolicy,
    StandbyStatus,
};
pub use promote::{admin_promote, admin_promote_in, admin_promote_with};
pub use reads::StandbySnapshot;
pub use replica_log::{ReplicaLog, ReplicaLogHandle, ReplicaLogOpener, ShippedRecord, TailReader};
pub use standby::{admin_status, seed_standby, seed_standby_on, Standby, StandbyDevices, StandbyPositions};
pub use state::{ClusterView, History, FIRST_EPOCH};
