//! What every fuzz target links: an allocator that refuses any single
//! allocation over [`ALLOCATION_BYTES_MAX`].
//!
//! The decoders promise that a forged length never allocates more than the
//! bytes it came with allow (the codec's limit, a record's bytes on disk, a
//! frame limit). A forged length that got through would ask for gigabytes
//! at once, and a `Vec::with_capacity` or a zeroed buffer does not touch its
//! pages, so libFuzzer's RSS limit would not see it, and its malloc limit
//! works only under a sanitizer. This allocator sees every request, with or
//! without one, and aborts, which libFuzzer reports as a crash and saves.

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest single allocation a target may make. Inputs are at most a few
/// hundred kilobytes, and the largest legitimate buffers are the handshake's
/// frame limit (1 MiB), the log reader's read-ahead and scan windows (1 MiB
/// each) and the codec's bound for a 64 KiB input (32 × 64 KiB = 2 MiB): 64
/// MiB is far above all of them and far below the 2 GiB RSS limit.
pub const ALLOCATION_BYTES_MAX: usize = 64 * 1024 * 1024;

/// [`System`], with requests over [`ALLOCATION_BYTES_MAX`] refused.
pub struct CappedAllocator;

fn check(bytes: usize) {
    if bytes > ALLOCATION_BYTES_MAX {
        // Fixed bytes to unbuffered stderr: nothing here allocates.
        let message = b"arbor-fuzz: an allocation over ALLOCATION_BYTES_MAX (64 MiB)\n";
        let _ = std::io::Write::write_all(&mut std::io::stderr(), message);
        std::process::abort();
    }
}

// SAFETY: every call is passed to `System` unchanged, after a check that
// only aborts.
unsafe impl GlobalAlloc for CappedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: CappedAllocator = CappedAllocator;
