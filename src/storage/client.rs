//! Building an object store for a `gs://` or `s3://` URI, with clipfn's timeouts and retries.

use std::{sync::Arc, time::Duration};

use object_store::{
    ClientConfigKey, ObjectStore, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    gcp::{GoogleCloudStorageBuilder, GoogleConfigKey},
};

use super::{StorageError, Uri, config_error};
use crate::settings::SourceSettings;

/// How every store client talks to its service (`CLIPFN_FETCH_TIMEOUT_MS`, `CLIPFN_FETCH_RETRIES`).
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub timeout: Duration,
    pub retries: usize,
}

impl Client {
    pub fn new(settings: &SourceSettings) -> Self {
        Client { timeout: settings.fetch_timeout(), retries: settings.fetch_retries }
    }
}

pub fn build_store(uri: &Uri<'_>, client: Client) -> Result<Arc<dyn ObjectStore>, StorageError> {
    let retry = RetryConfig { max_retries: client.retries, ..RetryConfig::default() };
    // Set as config keys, not as a new ClientOptions, so that client options from the environment
    // (GOOGLE_ALLOW_HTTP, AWS_ALLOW_HTTP, proxies) survive.
    let timeouts = [
        (ClientConfigKey::Timeout, format!("{}ms", client.timeout.as_millis())),
        (ClientConfigKey::ConnectTimeout, "5s".to_string()),
    ];
    // from_env picks up the standard GOOGLE_* / AWS_* variables (credentials, endpoints, allow_http).
    let store: Arc<dyn ObjectStore> = match uri.scheme {
        "gs" => {
            let builder = GoogleCloudStorageBuilder::from_env().with_bucket_name(uri.bucket).with_retry(retry);
            let builder = timeouts.into_iter().fold(builder, |b, (k, v)| b.with_config(GoogleConfigKey::Client(k), v));
            Arc::new(builder.build().map_err(config_error)?)
        }
        "s3" => {
            let builder = AmazonS3Builder::from_env().with_bucket_name(uri.bucket).with_retry(retry);
            let builder =
                timeouts.into_iter().fold(builder, |b, (k, v)| b.with_config(AmazonS3ConfigKey::Client(k), v));
            Arc::new(builder.build().map_err(config_error)?)
        }
        other => return Err(StorageError::Config(format!("unsupported scheme '{other}://' (use gs, s3 or file)"))),
    };
    Ok(store)
}
