//! Aligned, heap-allocated byte buffers for O_DIRECT I/O.
//!
//! Owns: `AlignedBuf`, a zero-initialised byte buffer whose address and length are multiples of
//! an alignment (a power of two, at least 512). Invariant: `ptr % align == 0` and
//! `len % align == 0` for the whole life of the buffer; the memory is freed with the same layout
//! it was allocated with (a buffer lent by [`AlignedBuf::lend`] frees nothing).

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The alignment O_DIRECT needs on Linux for the devices we target (logical block size 4 KiB
/// covers 512-byte devices too).
pub const DIRECT_IO_ALIGN: usize = 4096;

/// A heap buffer whose start address and length are multiples of `align`.
///
/// Dereferences to `[u8]`; zeroed at allocation.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
    /// False for memory lent by its owner ([`AlignedBuf::lend`]): dropping frees nothing.
    owned: bool,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only permit reads of plain bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to [`DIRECT_IO_ALIGN`].
    ///
    /// # Panics
    /// If `len` is zero or not a multiple of the alignment (a programming error).
    pub fn new(len: usize) -> Self {
        Self::with_alignment(len, DIRECT_IO_ALIGN)
    }

    /// Allocates `len` zeroed bytes aligned to `align` (a power of two, >= 512).
    ///
    /// # Panics
    /// If `align` is not a power of two of at least 512, or `len` is zero or not a multiple of
    /// `align`, or the allocation fails.
    pub fn with_alignment(len: usize, align: usize) -> Self {
        assert!(align.is_power_of_two() && align >= 512, "alignment {align} must be a power of two >= 512");
        assert!(len > 0 && len % align == 0, "length {len} must be a non-zero multiple of {align}");
        let layout = Layout::from_size_align(len, align).expect("valid layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Self { ptr, len, align, owned: true }
    }

    /// `buf` when it holds at least `len` bytes (with whatever it held), else a new zeroed
    /// buffer of `len` bytes aligned to [`DIRECT_IO_ALIGN`]: for a buffer reused from one I/O to
    /// the next.
    pub fn reuse_or_new(buf: Option<AlignedBuf>, len: usize) -> Self {
        match buf {
            Some(b) if b.len() >= len => b,
            _ => Self::new(len),
        }
    }

    /// A buffer over `len` bytes at `ptr` that belong to someone else (a buffer-pool frame an
    /// [`IoQueue`](super::IoQueue) reads into directly); dropping it frees nothing.
    ///
    /// # Safety
    /// `ptr` must be aligned to `align` (a power of two, >= 512), valid for reads and writes of
    /// `len` bytes (a non-zero multiple of `align`), and accessed by nothing else until the
    /// returned buffer is dropped.
    pub unsafe fn lend(ptr: NonNull<u8>, len: usize, align: usize) -> Self {
        assert!(align.is_power_of_two() && align >= 512, "alignment {align} must be a power of two >= 512");
        assert!(len > 0 && len % align == 0, "length {len} must be a non-zero multiple of {align}");
        assert_eq!(ptr.as_ptr() as usize % align, 0, "lent buffer address is not {align}-aligned");
        Self { ptr, len, align, owned: false }
    }

    /// The alignment of the address and the length.
    pub fn alignment(&self) -> usize {
        self.align
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr points to len initialised bytes owned exclusively by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        let mut copy = Self::with_alignment(self.len, self.align);
        copy.copy_from_slice(self);
        copy
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let layout = Layout::from_size_align(self.len, self.align).expect("valid layout");
        // SAFETY: allocated in with_alignment with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf {{ len: {}, align: {} }}", self.len, self.align)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_and_length_are_aligned() {
        for &len in &[4096usize, 8192, 24576, 65536] {
            let b = AlignedBuf::new(len);
            assert_eq!(b.as_ptr() as usize % DIRECT_IO_ALIGN, 0);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn reuse_or_new_keeps_a_large_enough_buffer_and_replaces_a_short_one() {
        let mut b = AlignedBuf::new(8192);
        b[0] = 7;
        let at = b.as_ptr();
        let kept = AlignedBuf::reuse_or_new(Some(b), 4096);
        assert_eq!((kept.as_ptr(), kept.len(), kept[0]), (at, 8192, 7));
        let grown = AlignedBuf::reuse_or_new(Some(kept), 16384);
        assert_eq!(grown.len(), 16384);
        assert!(grown.iter().all(|&x| x == 0));
        assert_eq!(AlignedBuf::reuse_or_new(None, 4096).len(), 4096);
    }

    #[test]
    #[should_panic(expected = "multiple")]
    fn rejects_unaligned_length() {
        let _ = AlignedBuf::new(1000);
    }
}
