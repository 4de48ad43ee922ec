//! CPU time: the calling thread's own, so that other processes on the machine do not count, and
//! a process's, read from /proc.

/// This thread's CPU seconds so far (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu() -> f64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec, and a clock every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime");
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// Fields of /proc/PID/stat (or, for `thread-self`, this thread's) after the command name, which
/// may hold spaces and is closed by the last ')': field 3 of proc(5) is index 0 here.
pub fn stat_fields(stat: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(stat).unwrap_or_else(|e| panic!("{stat}: {e}"));
    text[text.rfind(')').unwrap() + 2..].split(' ').map(|f| f.parse().unwrap_or(f64::NAN)).collect()
}

/// CPU seconds used: utime + stime, in USER_HZ (100 on Linux).
pub fn cpu_seconds(stat: &str) -> f64 {
    let fields = stat_fields(stat);
    (fields[11] + fields[12]) / 100.0
}

/// Minor page faults so far: each is a page the kernel mapped and zeroed on first touch.
pub fn minor_faults(stat: &str) -> f64 {
    stat_fields(stat)[7]
}
