//! What the hosts need: request bodies and deadlines, the shutdown window and the log format.
//! (`clipfn backfill`'s own options, such as its chunk size, are its command line's.)

use std::time::Duration;

use serde::Deserialize;

use super::{
    ConfigError, MIB,
    choices::{self, LogFormat},
    require_positive,
};

/// The variables of [`ServerSettings`], one per field and in the fields' order (envy reads each
/// field from `CLIPFN_` + its name upper-cased; a unit test holds the two together).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_MAX_BODY_BYTES",
    "CLIPFN_MAX_INLINE_BODY_BYTES",
    "CLIPFN_REQUEST_TIMEOUT_MS",
    "CLIPFN_SHUTDOWN_GRACE_S",
    "CLIPFN_LOG_FORMAT",
];

#[derive(Debug, Clone, Deserialize)]
pub struct ServerSettings {
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    /// Body size allowed to a request that carries `data:` URI photos.
    #[serde(default = "defaults::max_inline_body_bytes")]
    pub max_inline_body_bytes: usize,
    #[serde(default = "defaults::request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Seconds from SIGTERM to exit, everything included: the drain, the answers to requests still
    /// in flight then, and the telemetry flush.
    #[serde(default = "defaults::shutdown_grace_s")]
    pub shutdown_grace_s: u64,
    /// `json` or `text`; unset means text when stderr is a terminal, JSON otherwise.
    #[serde(default, deserialize_with = "choices::log_format")]
    pub log_format: Option<LogFormat>,
}

mod defaults {
    use super::MIB;
    pub fn max_body_bytes() -> usize {
        MIB as usize
    }
    pub fn max_inline_body_bytes() -> usize {
        32 * MIB as usize
    }
    pub fn request_timeout_ms() -> u64 {
        60_000
    }
    pub fn shutdown_grace_s() -> u64 {
        8
    }
}

impl ServerSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("CLIPFN_MAX_BODY_BYTES", self.max_body_bytes as u64),
            ("CLIPFN_MAX_INLINE_BODY_BYTES", self.max_inline_body_bytes as u64),
            ("CLIPFN_REQUEST_TIMEOUT_MS", self.request_timeout_ms),
        ])
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The log format in effect: as set, else text for a terminal and JSON for everything else
    /// (Cloud Run, Lambda, a pipe).
    pub fn log_format(&self) -> LogFormat {
        use std::io::IsTerminal;
        self.log_format.unwrap_or(if std::io::stderr().is_terminal() { LogFormat::Text } else { LogFormat::Json })
    }
}
