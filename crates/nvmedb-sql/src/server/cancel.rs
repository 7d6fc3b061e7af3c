//! CancelRequest: a client cancels its running statement by opening a new connection that
//! sends the process id and secret key the server gave it at startup (BackendKeyData). The
//! server sets that session's cancel flag, and the statement stops with 57014 at its next
//! check ([`crate::exec::Interrupt`]).
//!
//! Owns: [`Cancels`] (process id → secret key and cancel flag of every session that ran a
//! statement) and [`secret_key`]. Invariant: a request whose key does not match is ignored,
//! as PostgreSQL does, so a client can cancel only its own statements; an entry goes when its
//! connection ends.

use nvmedb::util::sync::MutexExt;
use pgwire::api::cancel::CancelHandler;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The sessions a CancelRequest may name.
#[derive(Debug, Default)]
pub(super) struct Cancels(Mutex<HashMap<i32, (SecretKey, Arc<AtomicBool>)>>);

impl Cancels {
    /// Lets `pid` with `key` set `flag`.
    pub(super) fn register(&self, pid: i32, key: SecretKey, flag: Arc<AtomicBool>) {
        self.0.locked().insert(pid, (key, flag));
    }

    /// Forgets the session whose flag is `flag` (its connection ended).
    pub(super) fn forget(&self, flag: &Arc<AtomicBool>) {
        self.0.locked().retain(|_, (_, f)| !Arc::ptr_eq(f, flag));
    }

    /// Sets the flag of `pid` if `key` is its key; returns whether it did.
    pub(super) fn cancel(&self, pid: i32, key: &SecretKey) -> bool {
        match self.0.locked().get(&pid) {
            // Compared as bytes: a key sent as a 4-byte integer is decoded as bytes.
            Some((k, flag)) if k.to_bytes() == key.to_bytes() => {
                flag.store(true, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }
}

/// A secret key no other client can guess (from the standard library's randomly seeded
/// hasher).
pub(super) fn secret_key(pid: i32) -> SecretKey {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i32(pid);
    SecretKey::I32(h.finish() as i32)
}

/// pgwire's handler of a connection that carries a CancelRequest.
pub(super) struct Canceller(pub(super) Arc<super::Shared>);

#[async_trait::async_trait]
impl CancelHandler for Canceller {
    async fn on_cancel_request(&self, req: CancelRequest) {
        self.0.cancels.cancel(req.pid, &req.secret_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_right_key_cancels() {
        let c = Cancels::default();
        let flag = Arc::new(AtomicBool::new(false));
        let key = secret_key(7);
        assert_ne!(key, secret_key(7), "keys are not predictable from the pid");
        c.register(7, key.clone(), flag.clone());
        assert!(!c.cancel(7, &SecretKey::I32(12345)) || key == SecretKey::I32(12345));
        // The key as a CancelRequest decodes it.
        let as_bytes = SecretKey::Bytes(key.to_bytes());
        assert!(!c.cancel(8, &key));
        assert!(!flag.load(Ordering::Relaxed));
        assert!(c.cancel(7, &as_bytes));
        assert!(flag.load(Ordering::Relaxed));
        c.forget(&flag);
        assert!(!c.cancel(7, &key));
    }
}
