//! Photos by `http(s)://` URL (signed GCS or S3 URLs, CDNs), without opening a door into the
//! network: only URLs under an allowed prefix are fetched, every address connected to is checked
//! by the resolver (address.rs), redirects stay under the prefix, and the body is capped while it
//! streams. Logs and messages show URLs without their query, which may hold a signature.

use std::{collections::HashMap, error::Error as _, sync::Arc, time::Duration};

use futures::StreamExt;
use reqwest::{StatusCode, redirect};
use tokio::sync::Semaphore;
use url::Url;

mod address;
mod allowlist;

use self::{
    address::{GuardedResolver, RefusedAddress},
    allowlist::{Allowlist, host_key, without_query},
};
use super::{Fetched, SourceError};
use crate::{
    settings::SourceSettings,
    storage::{StorageError, read_bounded},
    sys::budget::Budget,
};

/// As for the object stores: a host that does not accept a connection in 5 s is down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_REDIRECTS: usize = 5;
/// Enough of an error body to find "expired" in a GCS or S3 error document.
const ERROR_BODY_BYTES: usize = 4096;

pub fn is_web(reference: &str) -> bool {
    let scheme = reference.get(..8).unwrap_or(reference).to_ascii_lowercase();
    scheme.starts_with("http://") || scheme.starts_with("https://")
}

/// The redirect policy's refusal, found again in the error chain to answer `forbidden`.
#[derive(Debug, thiserror::Error)]
#[error("redirected outside its allowed prefix")]
struct RedirectRefused;

/// One attempt's failure, and whether another attempt may help.
enum FetchFailure {
    Transient(SourceError),
    Final(SourceError),
}

pub struct WebSource {
    client: reqwest::Client,
    allowlist: Arc<Allowlist>,
    /// One per allowed host, so one slow host cannot take every fetch slot.
    per_host: HashMap<String, Semaphore>,
    max_bytes: u64,
    retries: usize,
}

impl WebSource {
    pub fn new<'a>(
        prefixes: impl IntoIterator<Item = &'a str>,
        settings: &SourceSettings,
        max_bytes: u64,
    ) -> Result<Self, SourceError> {
        let allowlist = Arc::new(Allowlist::new(prefixes)?);
        if settings.allow_private_sources {
            tracing::warn!("CLIPFN_ALLOW_PRIVATE_SOURCES=true: photo URLs may reach loopback and private addresses");
        }
        let per_host = allowlist.hosts().map(|host| (host, Semaphore::new(settings.max_fetches_per_host))).collect();
        let policy_list = Arc::clone(&allowlist);
        let policy = redirect::Policy::custom(move |attempt| {
            let original = &attempt.previous()[0];
            if attempt.previous().len() <= MAX_REDIRECTS && policy_list.same_prefix(original, attempt.url()) {
                attempt.follow()
            } else {
                attempt.error(RedirectRefused)
            }
        });
        let client = reqwest::Client::builder()
            .dns_resolver(GuardedResolver { allow_private: settings.allow_private_sources })
            .redirect(policy)
            // A proxy would resolve names itself, out of the resolver's sight.
            .no_proxy()
            .referer(false)
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(settings.fetch_timeout())
            .build()
            .map_err(|e| SourceError::from(StorageError::Config(format!("building the HTTP client: {e}"))))?;
        Ok(WebSource { client, allowlist, per_host, max_bytes, retries: settings.fetch_retries })
    }

    /// Fetches one URL, retrying 5xx answers, timeouts and failed connections with backoff. The
    /// host's slot is taken before the process-wide `io_slots`, so fetches queued behind a busy
    /// host do not hold slots that other sources could use.
    pub async fn fetch(&self, reference: &str, io_slots: &Semaphore, budget: &Budget) -> Result<Fetched, SourceError> {
        let url = self.allowlist.admit(reference)?;
        let host_slots = self.per_host.get(&host_key(&url)).expect("admitted URLs are under a prefix's host");
        let _host_slot = host_slots.acquire().await.expect("semaphore is never closed");
        let _slot = io_slots.acquire().await.expect("semaphore is never closed");
        let mut attempt = 0;
        loop {
            match self.fetch_once(&url, budget).await {
                Ok(bytes) => return Ok(bytes),
                Err(FetchFailure::Transient(e)) if attempt < self.retries => {
                    tracing::debug!(url = %without_query(&url), error = %e, attempt, "retrying fetch");
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(4))).await;
                    attempt += 1;
                }
                Err(FetchFailure::Transient(e) | FetchFailure::Final(e)) => return Err(e),
            }
        }
    }

    async fn fetch_once(&self, url: &Url, budget: &Budget) -> Result<Fetched, FetchFailure> {
        let mut response = self.client.get(url.clone()).send().await.map_err(|e| send_failure(&e, url))?;
        let status = response.status();
        if status.is_success() {
            return read_capped(response, self.max_bytes, url, budget).await;
        }
        let what = without_query(url);
        Err(match status {
            StatusCode::NOT_FOUND | StatusCode::GONE => {
                FetchFailure::Final(SourceError::from(StorageError::NotFound(what)))
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::BAD_REQUEST => {
                // GCS answers an expired V4 signature with 400 ExpiredToken, S3 with 403
                // "Request has expired"; other refusals get the status.
                let body = error_body(&mut response).await;
                if body.to_ascii_lowercase().contains("expired") {
                    FetchFailure::Final(SourceError::Expired(what))
                } else if status == StatusCode::BAD_REQUEST {
                    FetchFailure::Final(SourceError::from(StorageError::Fetch(format!(
                        "{what} answered HTTP {status}"
                    ))))
                } else {
                    FetchFailure::Final(SourceError::from(StorageError::Forbidden(format!(
                        "{what} answered HTTP {status}"
                    ))))
                }
            }
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => FetchFailure::Transient(
                SourceError::from(StorageError::Fetch(format!("{what} answered HTTP {status}"))),
            ),
            _ => FetchFailure::Final(SourceError::from(StorageError::Fetch(format!("{what} answered HTTP {status}")))),
        })
    }
}

/// Why a request got no response. reqwest's own message names the URL with its query, so the
/// message is built here.
fn send_failure(e: &reqwest::Error, url: &Url) -> FetchFailure {
    let mut source = e.source();
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<RefusedAddress>() {
            return FetchFailure::Final(SourceError::from(StorageError::Forbidden(refused.to_string())));
        }
        if cause.is::<RedirectRefused>() {
            return FetchFailure::Final(SourceError::from(StorageError::Forbidden(format!(
                "{} was {RedirectRefused}",
                without_query(url)
            ))));
        }
        source = cause.source();
    }
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    FetchFailure::Transient(SourceError::from(StorageError::Fetch(format!("{}: {what}", without_query(url)))))
}

/// Reads the body under the one bounded read (`storage::read_bounded`): its size from
/// Content-Length when given, its share of the fetched-bytes budget, the limit while streaming.
async fn read_capped(
    response: reqwest::Response,
    limit: u64,
    url: &Url,
    budget: &Budget,
) -> Result<Fetched, FetchFailure> {
    let size = response.content_length();
    let chunks = futures::stream::unfold(response, |mut response| async move {
        response.chunk().await.transpose().map(|chunk| (chunk, response))
    })
    .map(|chunk| chunk.map_err(|e| send_failure(&e, url)));
    Ok(read_bounded(size, limit, Some(budget), chunks).await?.into())
}

/// A refusal of the bounded read (too large) is final: another attempt reads the same body.
impl From<StorageError> for FetchFailure {
    fn from(e: StorageError) -> Self {
        FetchFailure::Final(SourceError::from(e))
    }
}

/// The start of an error response's body, as text (empty if it cannot be read).
async fn error_body(response: &mut reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_BYTES
        && let Ok(Some(chunk)) = response.chunk().await
    {
        body.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&body).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_references_are_told_apart_by_scheme() {
        assert!(is_web("https://a.example/x") && is_web("HTTP://a.example/x"));
        assert!(!is_web("gs://bucket/https://x") && !is_web("user/7/http.jpg") && !is_web("data:image/png;base64,"));
    }
}
