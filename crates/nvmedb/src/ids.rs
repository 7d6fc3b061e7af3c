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

/// Longest key [`KeyBytes`] holds without a heap allocation.
pub const INLINE_KEY_BYTES: usize = 38;

/// The bytes of a locked key: inline up to [`INLINE_KEY_BYTES`] (encoded primary keys of a few
/// columns), on the heap beyond, so taking a lock on a usual key allocates nothing for it.
/// Compares, orders and hashes as its bytes.
#[derive(Clone)]
pub struct KeyBytes(KeyRepr);

#[derive(Clone)]
enum KeyRepr {
    Inline { len: u8, bytes: [u8; INLINE_KEY_BYTES] },
    Heap(Box<[u8]>),
}

impl KeyBytes {
    /// A copy of `key`.
    pub fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE_KEY_BYTES {
            let mut bytes = [0u8; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            Self(KeyRepr::Inline { len: key.len() as u8, bytes })
        } else {
            Self(KeyRepr::Heap(key.into()))
        }
    }
}

impl std::ops::Deref for KeyBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            KeyRepr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyRepr::Heap(b) => b,
        }
    }
}

impl PartialEq for KeyBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}
impl Eq for KeyBytes {}
impl std::hash::Hash for KeyBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}
impl PartialOrd for KeyBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for KeyBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

/// What is locked: a key of a table.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// Table id.
    pub table: u32,
    /// Key bytes (normally the encoded primary key).
    pub key: KeyBytes,
}

impl LockKey {
    /// The key `key` of table `table`.
    pub fn new(table: u32, key: &[u8]) -> Self {
        Self { table, key: KeyBytes::new(key) }
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
