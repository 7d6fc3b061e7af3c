//! On-disk page formats.
//!
//! Owns: the common page header every page starts with ([`header`]), and the layouts built on
//! it: slotted heap pages ([`slotted`]) and the overflow pages of rows too large for one
//! ([`overflow`]). B+tree node layouts live in `btree/`.
//!
//! Invariant: every page written to a device carries the format version, its own file id and
//! page number, the LSN of the last change and a CRC32C over the whole page; every page read
//! from a device is verified against all four before anyone sees it.

pub mod header;
pub mod overflow;
pub mod slotted;

pub use header::{PageHeader, PageType, FORMAT_VERSION, PAGE_HEADER_BYTES};
