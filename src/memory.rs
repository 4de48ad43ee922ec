//! How the C allocator treats large blocks, set once at start-up.
//!
//! ONNX Runtime allocates through glibc's malloc: the parsed weights while it builds the session,
//! then a batch's activations on every run (about 200 MB for ViT-B/32 at batch 64). glibc gives a
//! block above its mmap threshold a mapping of its own, handed back to the system when freed, but
//! it raises that threshold (up to 32 MiB) each time such a block is freed. After session creation
//! the threshold sits above most tensors, which then live on the heap, where freed memory stays
//! resident and the warm-up's peak lands on top of it. A fixed threshold keeps every block of
//! 1 MiB or more in its own mapping: on ViT-B/32 at batch 64 the peak RSS went from 0.82 to
//! 0.64 GB and the resident set after warm-up from 0.60 to 0.38 GB (docs/design.md).

/// Fixes glibc's mmap threshold at 1 MiB. Call first thing in `main`, before other threads exist.
pub fn return_large_blocks_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
