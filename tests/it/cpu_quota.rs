//! Under a cgroup CPU quota (what Cloud Run gives a container, and `docker run --cpus`), clipfn
//! sizes its decode pool and ONNX Runtime's intra-op pool to the quota, not to the host's cores.
//!
//! The quota is a real cgroup v1 `cpu` group made for the test (root and a cgroup v1 `cpu` mount
//! are needed, as on this project's machines and its CI). The server is started from a thread
//! moved into that group, so only the server runs under the quota. Where a machine has no such
//! controller the test fails, saying what it needs; a machine that cannot give it one says so, and
//! why, in `CLIPFN_TEST_WITHOUT_CPU_QUOTA` (the test then reads that reason out and checks only
//! that the pools follow the host's CPUs): nothing passes by skipping in silence.

use crate::common;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use common::ServerConfig;
use serde_json::Value;

const CPU_CGROUPS: &str = "/sys/fs/cgroup/cpu";

/// A cgroup v1 `cpu` group limited to `quota_us` of CPU per 100 ms period; removed when dropped.
struct QuotaGroup(PathBuf);

impl QuotaGroup {
    fn create(quota_us: u64) -> std::io::Result<Self> {
        let dir = Path::new(CPU_CGROUPS).join(format!("clipfn-test-{}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let group = QuotaGroup(dir);
        std::fs::write(group.0.join("cpu.cfs_period_us"), "100000")?;
        std::fs::write(group.0.join("cpu.cfs_quota_us"), quota_us.to_string())?;
        Ok(group)
    }

    /// Runs `start` on a thread of its own inside the group: what it spawns starts there.
    fn run_inside<T: Send>(&self, start: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                let tid = thread_id();
                std::fs::write(self.0.join("tasks"), tid.to_string()).expect("moving the thread into the group");
                start()
            })
            .join()
            .unwrap()
        })
    }
}

impl Drop for QuotaGroup {
    fn drop(&mut self) {
        // A group can be removed once its processes are gone; the server is killed by then.
        let until = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// This thread's id, from /proc (no libc call needed).
fn thread_id() -> u64 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

/// The decode and intra-op thread counts that a server logged at start-up.
fn pool_sizes(log: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(log).unwrap();
    let loaded: Value = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["message"] == "model loaded and warmed up")
        .unwrap_or_else(|| panic!("no start-up line in:\n{text}"));
    let count = |field: &str| loaded[field].as_u64().unwrap_or_else(|| panic!("no {field} in {loaded}"));
    (count("decode_threads"), count("intra_threads"))
}

/// What the machine running the tests says when it cannot make a cgroup (why, in words).
const WITHOUT_QUOTA: &str = "CLIPFN_TEST_WITHOUT_CPU_QUOTA";

#[test]
fn pools_follow_a_cgroup_cpu_quota() {
    let store = tempfile::tempdir().unwrap();
    let config = |log: &Path| ServerConfig::local(store.path()).env("CLIPFN_LOG_FORMAT", "json").stderr_to(log);

    let free_log = store.path().join("free.log");
    let free = config(&free_log).start();
    let host_cpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(pool_sizes(&free_log), (host_cpus, host_cpus), "without a quota, one thread per CPU");
    drop(free);

    let group = match (QuotaGroup::create(100_000), std::env::var(WITHOUT_QUOTA)) {
        (Ok(group), _) => group,
        (Err(e), Ok(why)) if !why.trim().is_empty() => {
            eprintln!("NOT TESTED: the pools under a CPU quota ({e}): {WITHOUT_QUOTA} says {why:?}");
            return;
        }
        (Err(e), _) => panic!(
            "a CPU quota needs root and a writable cgroup v1 cpu controller at {CPU_CGROUPS} (this project's \
             machines and CI have both): {e}. Where a machine cannot have one, set {WITHOUT_QUOTA} to the reason."
        ),
    };

    let quota_log = store.path().join("quota.log");
    let limited = group.run_inside(|| config(&quota_log).start());
    assert_eq!(pool_sizes(&quota_log), (1, 1), "a quota of one CPU gets one decode and one intra-op thread");
    // Embedding still works under the quota.
    std::fs::copy(common::camera_photos(1).remove(0), store.path().join("a.jpg")).unwrap();
    let (status, body) = limited.embed(&["a.jpg"]);
    assert_eq!(status, 200, "{body}");
    assert!(common::item(&body, 0).is_ok(), "{body}");
    drop(limited);
}
