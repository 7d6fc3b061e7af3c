//! The vocabulary that errors and several layers share: transaction ids, lock keys and modes,
//! replication modes.
//!
//! Owns: [`TxnId`], [`LockKey`], [`LockMode`] and [`ReplicationMode`], plain data with no
//! behaviour beyond comparison and display. Invariant: this module imports nothing from the
//! crate, so [`crate::error`] can name these types without tying the layers that own their
//! behaviour ([`crate::txn`], [`crate::xlog`], [`crate::repl`]) into one import cycle. Those
//! layers re-export them under their usual paths.

use std::fmt;

/// Identifies a transaction. Ids are assigned by the transaction layer, increasing with the
/// transaction's start: a larger id is a younger transaction (used by [`VictimPolicy::Youngest`](crate::txn::VictimPolicy::Youngest)).
pub type TxnId = u64;

/// Lock modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// Read lock: compatible with other shared locks.
    Shared,
    /// Write lock: compatible with nothing.
    Exclusive,
}

impl LockMode {
    /// True if a lock in mode `self` can be held together with one in mode `other` by another
    /// transaction.
    pub fn compatible(self, other: LockMode) -> bool {
        self == LockMode::Shared && other == LockMode::Shared
    }

    /// True if holding `self` already grants what a request for `wanted` asks.
    pub fn covers(self, wanted: LockMode) -> bool {
        self == LockMode::Exclusive || wanted == LockMode::Shared
    }
}

/// What is locked: a key of a table.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// Table id.
    pub table: u32,
    /// Key bytes (normally the encoded primary key).
    pub key: Box<[u8]>,
}

impl LockKey {
    /// The key `key` of table `table`.
    pub fn new(table: u32, key: &[u8]) -> Self {
        Self { table, key: key.into() }
    }

    pub(crate) fn is(&self, table: u32, key: &[u8]) -> bool {
        self.table == table && *self.key == *key
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table {} key 0x", self.table)?;
        for b in self.key.iter().take(32) {
            write!(f, "{b:02x}")?;
        }
        if self.key.len() > 32 {
            write!(f, "..({} bytes)", self.key.len())?;
        }
        Ok(())
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// How the counter the writer sees is formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationMode {
    /// The local counter only; secondaries catch up on their own.
    Lazy,
    /// The slowest of all secondaries (and the local counter).
    Eager,
    /// The position at least `k` secondaries have reached (and the local counter).
    Quorum(usize),
    /// The last secondary of the chain (and the local counter).
    Chain,
}
