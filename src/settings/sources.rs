//! Where photos may come from, and how they are fetched.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, choices, require_positive};

/// The variables of [`SourceSettings`], one per field and in the fields' order (envy reads each
/// field from `CLIPFN_` + its name upper-cased; a unit test holds the two together).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_STORE",
    "CLIPFN_ALLOWED_SOURCES",
    "CLIPFN_ALLOW_PRIVATE_SOURCES",
    "CLIPFN_MAX_FETCHES_PER_HOST",
    "CLIPFN_FETCH_CONCURRENCY",
    "CLIPFN_FETCH_TIMEOUT_MS",
    "CLIPFN_FETCH_RETRIES",
];

#[derive(Debug, Clone, Deserialize)]
pub struct SourceSettings {
    /// Root that bare keys resolve against: `gs://bucket[/prefix]`, `s3://bucket[/prefix]`, `file:///dir`.
    #[serde(default)]
    pub store: Option<String>,
    /// Extra URI prefixes that full URIs may point into.
    #[serde(default, deserialize_with = "choices::comma_list")]
    pub allowed_sources: Vec<String>,
    /// Lets `http(s)://` sources resolve to loopback and private addresses: for tests and local
    /// stacks only (the terraform never sets it).
    #[serde(default)]
    pub allow_private_sources: bool,
    /// `http(s)://` fetches in flight per host.
    #[serde(default = "defaults::max_fetches_per_host")]
    pub max_fetches_per_host: usize,
    /// Concurrent object fetches per process.
    #[serde(default = "defaults::fetch_concurrency")]
    pub fetch_concurrency: usize,
    #[serde(default = "defaults::fetch_timeout_ms")]
    pub fetch_timeout_ms: u64,
    #[serde(default = "defaults::fetch_retries")]
    pub fetch_retries: usize,
}

mod defaults {
    pub fn max_fetches_per_host() -> usize {
        8
    }
    pub fn fetch_concurrency() -> usize {
        32
    }
    pub fn fetch_timeout_ms() -> u64 {
        30_000
    }
    pub fn fetch_retries() -> usize {
        3
    }
}

impl SourceSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("CLIPFN_MAX_FETCHES_PER_HOST", self.max_fetches_per_host as u64),
            ("CLIPFN_FETCH_CONCURRENCY", self.fetch_concurrency as u64),
            ("CLIPFN_FETCH_TIMEOUT_MS", self.fetch_timeout_ms),
        ])
    }

    pub fn fetch_timeout(&self) -> Duration {
        Duration::from_millis(self.fetch_timeout_ms)
    }
}
