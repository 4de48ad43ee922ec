//! CPU time of the calling thread, for stages that run on one thread (the album stage): its own
//! CPU, so that other threads and processes on the machine do not count.

/// This thread's CPU seconds so far (`CLOCK_THREAD_CPUTIME_ID`); none where the clock is not read.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn thread_cpu_seconds() -> Option<f64> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec, and a clock every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (rc == 0).then_some(now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9)
}

/// This thread's CPU seconds so far; none where the clock is not read.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn thread_cpu_seconds() -> Option<f64> {
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_busy_thread_counts_its_cpu() {
        let Some(before) = super::thread_cpu_seconds() else { return };
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = super::thread_cpu_seconds().unwrap();
        assert!(after > before, "{before} -> {after} ({x})");
    }
}
