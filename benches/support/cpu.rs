//! The calling thread's own CPU time, so that other processes on the machine do not count.

/// This thread's CPU seconds so far (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu() -> f64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec, and a clock every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime");
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}
