//! Typed I/O errors.
//!
//! Owns: `IoError`, the one error type every `Device` returns. Invariant: every variant names the
//! device and, where one exists, the byte offset at fault, so a message alone locates the problem.

use std::fmt;

/// What kind of operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOpKind {
    /// A positional read.
    Read,
    /// A positional write.
    Write,
    /// A durability barrier (fdatasync or equivalent).
    Sync,
    /// Opening, sizing or setting up a device.
    Setup,
}

impl fmt::Display for IoOpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoOpKind::Read => "read",
            IoOpKind::Write => "write",
            IoOpKind::Sync => "sync",
            IoOpKind::Setup => "setup",
        })
    }
}

/// An error from a [`Device`](super::Device).
#[derive(Debug)]
pub enum IoError {
    /// The operating system (or an injected fault) failed the operation.
    Os {
        /// Device name (file path or profile name).
        device: String,
        /// The operation that failed.
        op: IoOpKind,
        /// Byte offset of the operation (0 for sync and setup).
        offset: u64,
        /// Length in bytes of the operation.
        len: usize,
        /// The underlying error (errno).
        source: std::io::Error,
    },
    /// An offset, length or buffer address is not aligned as the device requires.
    Misaligned {
        /// Device name.
        device: String,
        /// What was misaligned: "offset", "length" or "buffer address".
        what: &'static str,
        /// The offending value.
        value: u64,
        /// The required alignment in bytes.
        required: usize,
    },
    /// The operation reaches past the end of a fixed-size device.
    OutOfRange {
        /// Device name.
        device: String,
        /// Byte offset of the operation.
        offset: u64,
        /// Length of the operation.
        len: usize,
        /// Capacity of the device in bytes.
        capacity: u64,
    },
    /// A read returned fewer bytes than asked (the file is shorter than the request).
    ShortRead {
        /// Device name.
        device: String,
        /// Byte offset of the read.
        offset: u64,
        /// Bytes asked for.
        wanted: usize,
        /// Bytes actually read.
        got: usize,
    },
    /// The storage is locked by another handle: another process, or another open in this one.
    Locked {
        /// The locked directory.
        path: String,
        /// Who holds it ("process 1234", or this process).
        holder: String,
    },
}

impl IoError {
    /// Builds an `Os` error.
    pub fn os(device: &str, op: IoOpKind, offset: u64, len: usize, source: std::io::Error) -> Self {
        IoError::Os { device: device.to_string(), op, offset, len, source }
    }

    /// The raw OS error number, when the error came from the OS or an injected fault.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            IoError::Os { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The device the error names.
    pub fn device(&self) -> &str {
        match self {
            IoError::Os { device, .. }
            | IoError::Misaligned { device, .. }
            | IoError::OutOfRange { device, .. }
            | IoError::ShortRead { device, .. } => device,
            IoError::Locked { path, .. } => path,
        }
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::Os { device, op, offset, len, source } => {
                write!(f, "{op} of {len} bytes at offset {offset} on {device} failed: {source}")
            }
            IoError::Misaligned { device, what, value, required } => write!(
                f,
                "{what} {value} on {device} is not a multiple of {required} bytes (O_DIRECT needs \
                 {required}-byte aligned offsets, lengths and buffers)"
            ),
            IoError::OutOfRange { device, offset, len, capacity } => write!(
                f,
                "{len} bytes at offset {offset} reach past the end of {device} (capacity {capacity} bytes)"
            ),
            IoError::ShortRead { device, offset, wanted, got } => {
                write!(f, "short read on {device} at offset {offset}: wanted {wanted} bytes, got {got}")
            }
            IoError::Locked { path, holder } => write!(
                f,
                "{path} is in use by {holder} (it holds the advisory lock on {path}/{}); a database has \
                 one opener at a time",
                super::LOCK_FILE
            ),
        }
    }
}

impl std::error::Error for IoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IoError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result type of device operations.
pub type IoResult<T> = Result<T, IoError>;
