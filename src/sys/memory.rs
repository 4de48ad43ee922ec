//! How freed memory goes back to the system: large blocks at once, the rest once the worker idles.
//!
//! ONNX Runtime allocates through glibc's malloc: the parsed weights while it builds the session,
//! then a batch's activations on every run (about 200 MB for ViT-B/32 at batch 64). glibc gives a
//! block above its mmap threshold a mapping of its own, handed back to the system when freed, but
//! it raises that threshold (up to 32 MiB) each time such a block is freed. After session creation
//! the threshold sits above most tensors, which then live on the heap, where freed memory stays
//! resident and the warm-up's peak lands on top of it. A fixed threshold keeps every block of
//! 1 MiB or more in its own mapping: on ViT-B/32 at batch 64 the peak RSS went from 0.82 to
//! 0.64 GB and the resident set after warm-up from 0.60 to 0.38 GB (docs/design.md).
//!
//! Fixing the mmap threshold also fixes the trim threshold at glibc's default of 128 KiB: every
//! free that leaves more than that at the top of a heap hands it back, and the next photo's
//! buffers fault it in again, zeroed by the kernel. With inference free, that and a trim every
//! 100 ms cost 220 page faults per seed-size photo and about 15% of the server's CPU time
//! (docs/design.md, "Where a photo's CPU time goes"). So frees never trim; the heaps keep what a
//! burst of photos needs, and [`return_free_memory`] gives it all back once the worker has had
//! nothing to do for [`IDLE_BEFORE_TRIM`] (50-75 MB after a burst on 2 cores).

use std::time::Duration;

/// How long the worker waits with nothing queued before it trims. Within a burst a batch follows
/// the last within milliseconds; a second of nothing means the burst is over.
pub const IDLE_BEFORE_TRIM: Duration = Duration::from_secs(1);

/// The heaps' free tops stay resident below this (glibc's heaps are at most 64 MiB each): only
/// [`return_free_memory`] trims them.
const TRIM_THRESHOLD: i32 = 64 << 20;

/// Fixes glibc's mmap threshold at 1 MiB, and its trim threshold above any heap's size. Call
/// first thing in `main`, before other threads exist.
pub fn return_large_blocks_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Gives the heaps' free memory back to the system (`malloc_trim`, which walks every heap).
pub fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the system; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
