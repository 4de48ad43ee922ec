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
//! (docs/design.md, "Where a photo's CPU time goes"). So a heap keeps up to [`TRIM_THRESHOLD`] free
//! at its top, a few photos' buffers (a block over 1 MiB has its own mapping anyway), and the
//! [`Trimmer`] gives the rest back (50-75 MB after a burst on 2 cores) at most once a second
//! while batches run, and once the worker has had nothing to do for [`IDLE_BEFORE_TRIM`]. The
//! threshold must stay small:
//! `malloc_trim` never shrinks the top of a thread's heap (only the main heap's), so what a free
//! leaves there stays resident; at 64 MiB that held 35-45 MiB more after a batch-64 burst.

use std::time::{Duration, Instant};

/// How long the worker waits with nothing queued before it trims. Within a burst a batch follows
/// the last within milliseconds; a second of nothing means the burst is over.
pub const IDLE_BEFORE_TRIM: Duration = Duration::from_secs(1);

/// The least time between trims while batches run. Every 100 ms (a CPU batch) that cost about 95
/// page faults per seed-size photo with inference free; not trimming during a burst at all left
/// the closed loop's batch-64 peak RSS 35 MiB higher.
const MIN_TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// Free memory a heap keeps at its top before a free hands it back.
const TRIM_THRESHOLD: i32 = 2 << 20;

/// Fixes glibc's mmap threshold at 1 MiB and its trim threshold at [`TRIM_THRESHOLD`]. Call first
/// thing in `main`, before other threads exist.
pub fn return_large_blocks_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// When the model worker gives the heaps' free memory back to the system (`malloc_trim`, which
/// walks every heap: free chunks anywhere, and the main heap's top).
pub struct Trimmer {
    last: Instant,
}

impl Default for Trimmer {
    fn default() -> Self {
        Trimmer { last: Instant::now() }
    }
}

impl Trimmer {
    /// After a batch: trims if the last trim is [`MIN_TRIM_INTERVAL`] old.
    pub fn after_batch(&mut self) {
        if self.last.elapsed() >= MIN_TRIM_INTERVAL {
            self.trim();
        }
    }

    /// The worker has idled for [`IDLE_BEFORE_TRIM`]: the burst is over.
    pub fn idle(&mut self) {
        self.trim();
    }

    fn trim(&mut self) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free pages to the system; it is thread-safe.
        unsafe {
            libc::malloc_trim(0);
        }
        self.last = Instant::now();
    }
}
