//! Logging set-up. ONNX Runtime logs through `tracing` too and is chatty at info, so it is held to
//! warn unless RUST_LOG names it.

use tracing_subscriber::EnvFilter;

pub fn init() {
    let mut spec = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    if !spec.contains("ort") {
        spec.push_str(",ort=warn");
    }
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new("info,ort=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
