//! nvmedb: a transactional storage engine for microsecond-latency NVMe storage.
//!
//! The crate is layered, arrows pointing down: the public API sits on tables and B+trees, which
//! sit on the buffer manager, which does all its I/O through [`io::Device`]. See
//! `docs/ARCHITECTURE.md` in the repository for the data flow.

#![warn(missing_docs)]

pub mod error;
pub mod io;
pub mod util;
pub mod wal;
pub mod xlog;

pub use error::{Error, Result};
