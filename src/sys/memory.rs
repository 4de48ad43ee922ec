//! How freed memory goes back to the system: large blocks at once, the rest after batches.
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
//! Smaller blocks (compressed photos, queued squares, small batches' tensors) still come and go
//! on the heaps of several threads, and glibc hands back only a heap's free top, so the holes
//! freed between them stay resident: 50-75 MB after a burst on 2 cores. Trimming after a batch
//! gives those holes back while the next batch is being assembled.

/// Fixes glibc's mmap threshold at 1 MiB. Call first thing in `main`, before other threads exist.
pub fn return_large_blocks_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Gives free heap memory back to the system (`malloc_trim`), at most every `MIN_TRIM_INTERVAL`:
/// a trim walks every heap. After each CPU batch (over 100 ms) that left images/s unchanged;
/// after each GPU batch (about 10 ms) it would be a cost worth avoiding.
pub struct Trimmer {
    last: std::time::Instant,
}

const MIN_TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl Default for Trimmer {
    fn default() -> Self {
        Trimmer { last: std::time::Instant::now() }
    }
}

impl Trimmer {
    pub fn after_batch(&mut self) {
        if self.last.elapsed() < MIN_TRIM_INTERVAL {
            return;
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free pages to the system; it is thread-safe.
        unsafe {
            libc::malloc_trim(0);
        }
        self.last = std::time::Instant::now();
    }
}
