//! The environment a node's replication code runs in: its [`Clock`] and its [`Transport`].
//!
//! Owns: [`Env`], the pair every configuration of `repl/` carries (`ReplConfig::env`,
//! `StandbyConfig::env`, `MirrorConfig::env`, `NodeConfig::env`). The default is the real one
//! (system clock, TCP); the deterministic simulator gives each simulated node its own.

use super::clock::{Clock, SystemClock};
use super::net::{TcpTransport, Transport};
use std::sync::Arc;

/// A node's clock and network.
#[derive(Clone)]
pub struct Env {
    /// Time, waits and threads.
    pub clock: Arc<dyn Clock>,
    /// Connections and listeners.
    pub net: Arc<dyn Transport>,
}

impl Env {
    /// Real time, real threads, TCP.
    pub fn system() -> Self {
        Self { clock: SystemClock::shared(), net: TcpTransport::shared() }
    }

    /// True under the deterministic simulator.
    pub fn is_simulated(&self) -> bool {
        self.clock.sched().is_some()
    }
}

impl Default for Env {
    fn default() -> Self {
        Self::system()
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_simulated() { "Env(simulated)" } else { "Env(system)" })
    }
}
