//! What both benches read from the environment: their CLIPFN_BENCH_* knobs (`env_or`), the report
//! folder, and the ONNX Runtime library from .cache/clipfn.env when the shell did not set one.

use std::path::PathBuf;

use crate::common::setup_var;

/// The environment variable `name` parsed as a `T`, or `default` when it is unset or does not parse.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// CLIPFN_BENCH_OUT (default target/bench-report), created.
pub fn out_dir() -> std::io::Result<PathBuf> {
    let out = PathBuf::from(env_or("CLIPFN_BENCH_OUT", "target/bench-report".to_string()));
    std::fs::create_dir_all(&out)?;
    Ok(out)
}

/// Sets ORT_DYLIB_PATH from .cache/clipfn.env unless it is set already.
///
/// # Safety
/// It sets an environment variable: call it first thing in main, before any other thread exists.
pub unsafe fn set_ort_dylib_path() {
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        // SAFETY: the caller's (first thing in main, before any other thread exists).
        unsafe { std::env::set_var("ORT_DYLIB_PATH", setup_var("ORT_DYLIB_PATH")) };
    }
}
