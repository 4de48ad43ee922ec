//! Source stage: turns a photo reference (bare key or full URI) into its bytes.
//!
//! Every reference resolves against a configured root (`CLIPFN_STORE` or an entry of
//! `CLIPFN_ALLOWED_SOURCES`); nothing outside a root is ever fetched. Keys are taken literally
//! (no percent-decoding) and may not climb out of their root: `..`, `.`, empty segments and
//! absolute keys are refused, and for `file://` roots the real path (symlinks followed) must stay
//! inside the root's real path.
//!
//! Besides object stores, a reference may be an `http(s)://` URL under an allowed prefix (web.rs,
//! with the SSRF guard in allowlist.rs and address.rs) or an inline `data:` URI (inline.rs). Every
//! kind ends the same way: bytes for the decode stage, or this photo's error.

mod address;
mod allowlist;
mod inline;
mod web;

use std::{borrow::Cow, path::PathBuf, sync::Arc, time::Duration};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::{
    ClientConfigKey, ObjectStore, ObjectStoreExt, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    gcp::{GoogleCloudStorageBuilder, GoogleConfigKey},
    local::LocalFileSystem,
    path::Path as ObjectPath,
};
use tokio::sync::Semaphore;

use crate::config::Settings;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("no object at {0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("object is {size} bytes, over the {limit}-byte limit")]
    TooLarge { size: u64, limit: u64 },
    #[error("fetch failed: {0}")]
    Fetch(String),
    /// A signed URL whose signature has expired, as the server's error body says.
    #[error("the signature of {0} has expired")]
    Expired(String),
    /// A data URI whose payload cannot be read.
    #[error("{0}")]
    BadInline(String),
    #[error("the data URI's type '{0}' is not an image")]
    NotAnImage(String),
    /// A root or model URI in the configuration cannot be used.
    #[error("{0}")]
    Config(String),
}

/// A parsed `scheme://bucket/path` (for `file:///abs`, bucket is empty and path is `abs`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Uri<'a> {
    scheme: &'a str,
    bucket: &'a str,
    path: &'a str,
}

impl<'a> Uri<'a> {
    fn parse(s: &'a str) -> Option<Self> {
        let (scheme, rest) = s.split_once("://")?;
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        Some(Uri { scheme, bucket, path })
    }
}

enum Backend {
    Object { store: Arc<dyn ObjectStore>, prefix: String },
    Local { store: Arc<LocalFileSystem>, dir: PathBuf },
}

/// One place photos may come from.
struct Root {
    scheme: String,
    bucket: String,
    prefix: String,
    backend: Backend,
}

pub struct Source {
    /// The first root, when `CLIPFN_STORE` is set, is where bare keys resolve.
    roots: Vec<Root>,
    has_store: bool,
    max_bytes: u64,
    io_slots: Semaphore,
    client: ClientSettings,
    /// Present when CLIPFN_ALLOWED_SOURCES lists `http(s)://` prefixes.
    web: Option<web::WebSource>,
}

/// The kinds of reference, each with its own backend.
enum Reference {
    /// `data:image/...;base64,...`
    Inline,
    /// `http(s)://` under an allowed prefix
    Web,
    /// A bare key or a `gs://`, `s3://`, `file://` URI
    Object,
}

impl Reference {
    fn of(reference: &str) -> Self {
        if inline::is_inline(reference) {
            Reference::Inline
        } else if web::is_web(reference) {
            Reference::Web
        } else {
            Reference::Object
        }
    }
}

/// A reference as responses and logs show it: a data URI without its payload, a URL without its
/// query (which may hold a signature).
pub fn shown(reference: &str) -> Cow<'_, str> {
    match Reference::of(reference) {
        Reference::Inline => Cow::Owned(inline::shown(reference)),
        Reference::Web => Cow::Borrowed(reference.split(['?', '#']).next().unwrap_or_default()),
        Reference::Object => Cow::Borrowed(reference),
    }
}

/// Whether a reference carries its photo in the request (allowed a larger request body).
pub fn is_inline(reference: &str) -> bool {
    inline::is_inline(reference)
}

#[derive(Clone, Copy)]
struct ClientSettings {
    timeout: Duration,
    retries: usize,
}

impl Source {
    pub fn new(settings: &Settings) -> Result<Self, SourceError> {
        let client = ClientSettings {
            timeout: Duration::from_millis(settings.fetch_timeout_ms),
            retries: settings.fetch_retries,
        };
        let (web_prefixes, object_sources): (Vec<&String>, Vec<&String>) =
            settings.allowed_sources.iter().partition(|prefix| web::is_web(prefix));
        let roots = settings
            .store
            .iter()
            .chain(object_sources)
            .map(|uri| Root::new(uri, client))
            .collect::<Result<Vec<_>, _>>()?;
        let web = if web_prefixes.is_empty() {
            None
        } else {
            Some(web::WebSource::new(web_prefixes.into_iter().map(String::as_str), settings)?)
        };
        Ok(Source {
            roots,
            has_store: settings.store.is_some(),
            max_bytes: settings.max_image_bytes,
            io_slots: Semaphore::new(settings.fetch_concurrency),
            client,
            web,
        })
    }

    /// Fetches one photo from wherever its reference points.
    pub async fn fetch(&self, reference: &str) -> Result<Bytes, SourceError> {
        match Reference::of(reference) {
            Reference::Inline => inline::decode(reference, self.max_bytes),
            Reference::Web => match &self.web {
                Some(web) => web.fetch(reference, &self.io_slots).await,
                None => Err(SourceError::Forbidden("no http(s) prefix is in CLIPFN_ALLOWED_SOURCES".into())),
            },
            Reference::Object => self.fetch_object(reference).await,
        }
    }

    /// Fetches one object, waiting for an I/O slot so that a 100-photo request cannot open 100
    /// connections at once.
    async fn fetch_object(&self, reference: &str) -> Result<Bytes, SourceError> {
        let (root, key) = self.resolve(reference)?;
        let _slot = self.io_slots.acquire().await.expect("semaphore is never closed");
        let (store, path): (&dyn ObjectStore, ObjectPath) = match &root.backend {
            Backend::Object { store, prefix } => (store.as_ref(), object_path(prefix, key)?),
            Backend::Local { store, dir } => (store.as_ref(), contained_path(dir, key).await?),
        };
        get_bounded(store, &path, self.max_bytes).await
    }

    /// Reads a whole object by URI or local path, outside the photo roots (the model file).
    pub async fn fetch_config_object(&self, location: &str) -> Result<Bytes, SourceError> {
        let (store, path) = self.config_store(location)?;
        get_bounded(store.as_ref(), &path, u64::MAX).await
    }

    /// Lists a folder (path or URI prefix) outside the photo roots, as paths relative to it (a
    /// model folder).
    pub async fn list_config_folder(&self, location: &str) -> Result<Vec<String>, SourceError> {
        let (store, prefix) = self.config_store(location.trim_end_matches('/'))?;
        let mut listing = store.list(Some(&prefix));
        let mut files = Vec::new();
        while let Some(meta) = listing.next().await {
            let path = meta.map_err(|e| classify(e, &prefix))?.location;
            if let Some(parts) = path.prefix_match(&prefix) {
                files.push(parts.map(|part| part.as_ref().to_string()).collect::<Vec<_>>().join("/"));
            }
        }
        Ok(files)
    }

    fn config_store(&self, location: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath), SourceError> {
        Ok(match Uri::parse(location) {
            Some(uri) if uri.scheme == "file" => (Arc::new(LocalFileSystem::new()), absolute(uri.path)?),
            Some(uri) => (build_store(&uri, self.client)?, ObjectPath::parse(uri.path).map_err(config_error)?),
            None => (Arc::new(LocalFileSystem::new()), absolute(location.trim_start_matches('/'))?),
        })
    }

    fn resolve<'r>(&self, reference: &'r str) -> Result<(&Root, &'r str), SourceError> {
        let Some(uri) = Uri::parse(reference) else {
            if !self.has_store {
                return Err(SourceError::Forbidden("bare keys need CLIPFN_STORE to be set".into()));
            }
            return Ok((&self.roots[0], checked_key(reference)?));
        };
        self.roots
            .iter()
            .find_map(|root| root.key_of(&uri))
            .ok_or_else(|| SourceError::Forbidden("outside the configured store and allowed sources".into()))
            .and_then(|(root, key)| Ok((root, checked_key(key)?)))
    }
}

impl Root {
    fn new(uri_text: &str, client: ClientSettings) -> Result<Self, SourceError> {
        let mut uri = Uri::parse(uri_text).ok_or_else(|| SourceError::Config(format!("'{uri_text}' is not a URI")))?;
        uri.path = uri.path.trim_end_matches('/');
        let backend = if uri.scheme == "file" {
            let dir = std::fs::canonicalize(format!("/{}", uri.path))
                .map_err(|e| SourceError::Config(format!("{uri_text}: {e}")))?;
            Backend::Local { store: Arc::new(LocalFileSystem::new()), dir }
        } else {
            Backend::Object { store: build_store(&uri, client)?, prefix: uri.path.to_string() }
        };
        Ok(Root {
            scheme: uri.scheme.to_string(),
            bucket: uri.bucket.to_string(),
            prefix: uri.path.to_string(),
            backend,
        })
    }

    /// The key of `uri` under this root, if it lies under it (on a segment boundary).
    fn key_of<'u>(&self, uri: &Uri<'u>) -> Option<(&Self, &'u str)> {
        if uri.scheme != self.scheme || uri.bucket != self.bucket {
            return None;
        }
        let key =
            if self.prefix.is_empty() { uri.path } else { uri.path.strip_prefix(&self.prefix)?.strip_prefix('/')? };
        Some((self, key))
    }
}

/// Refuses keys that could name something outside their root.
fn checked_key(key: &str) -> Result<&str, SourceError> {
    let escape = key.is_empty()
        || key.starts_with('/')
        || key.contains('\\')
        || key.chars().any(char::is_control)
        || key.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..");
    if escape { Err(SourceError::Forbidden(format!("'{key}' is not a key inside the store"))) } else { Ok(key) }
}

fn object_path(prefix: &str, key: &str) -> Result<ObjectPath, SourceError> {
    let full = if prefix.is_empty() { key.to_string() } else { format!("{prefix}/{key}") };
    ObjectPath::parse(full).map_err(|e| SourceError::Forbidden(e.to_string()))
}

/// Follows symlinks and refuses any real path outside the root directory.
async fn contained_path(dir: &std::path::Path, key: &str) -> Result<ObjectPath, SourceError> {
    let real = match tokio::fs::canonicalize(dir.join(key)).await {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SourceError::NotFound(key.to_string())),
        Err(e) => return Err(SourceError::Fetch(e.to_string())),
    };
    if !real.starts_with(dir) {
        return Err(SourceError::Forbidden(format!("'{key}' leads outside the store")));
    }
    ObjectPath::from_absolute_path(&real).map_err(|e| SourceError::Fetch(e.to_string()))
}

/// The local file a configuration location names (a path or a `file://` URI), for ONNX Runtime to
/// read by itself; `None` for an object store URI, which must be fetched.
pub fn local_config_file(location: &str) -> Option<Result<PathBuf, SourceError>> {
    let path = match Uri::parse(location) {
        Some(uri) if uri.scheme == "file" => format!("/{}", uri.path),
        Some(_) => return None,
        None => location.to_string(),
    };
    Some(std::fs::canonicalize(&path).map_err(|e| SourceError::Config(format!("{path}: {e}"))))
}

fn absolute(path: &str) -> Result<ObjectPath, SourceError> {
    let real = std::fs::canonicalize(format!("/{path}")).map_err(|e| SourceError::Config(format!("/{path}: {e}")))?;
    ObjectPath::from_absolute_path(real).map_err(config_error)
}

fn config_error(e: impl std::fmt::Display) -> SourceError {
    SourceError::Config(e.to_string())
}

fn build_store(uri: &Uri<'_>, client: ClientSettings) -> Result<Arc<dyn ObjectStore>, SourceError> {
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
        other => return Err(SourceError::Config(format!("unsupported scheme '{other}://' (use gs, s3 or file)"))),
    };
    Ok(store)
}

/// Streams an object into memory, refusing it as soon as it is known to exceed `limit`:
/// first from the object's metadata (Content-Length), then while streaming.
async fn get_bounded(store: &dyn ObjectStore, path: &ObjectPath, limit: u64) -> Result<Bytes, SourceError> {
    let result = store.get(path).await.map_err(|e| classify(e, path))?;
    let size = result.meta.size;
    if size > limit {
        return Err(SourceError::TooLarge { size, limit });
    }
    let mut body = BytesMut::with_capacity(size as usize);
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.map_err(|e| classify(e, path))?);
        if body.len() as u64 > limit {
            return Err(SourceError::TooLarge { size: body.len() as u64, limit });
        }
    }
    Ok(body.freeze())
}

fn classify(e: object_store::Error, path: &ObjectPath) -> SourceError {
    match e {
        object_store::Error::NotFound { .. } => SourceError::NotFound(path.to_string()),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            SourceError::Forbidden(format!("the store refused access to {path}"))
        }
        other => SourceError::Fetch(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_model_files_are_named_by_path_and_store_objects_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.onnx");
        std::fs::write(&model, b"onnx").unwrap();
        let real = std::fs::canonicalize(&model).unwrap();
        assert_eq!(local_config_file(model.to_str().unwrap()).unwrap().unwrap(), real);
        assert_eq!(local_config_file(&format!("file://{}", model.display())).unwrap().unwrap(), real);
        assert!(matches!(local_config_file("/nonexistent/m.onnx"), Some(Err(SourceError::Config(_)))));
        assert!(local_config_file("gs://models/m.onnx").is_none());
        assert!(local_config_file("s3://models/m.onnx").is_none());
    }

    #[test]
    fn keys_cannot_escape() {
        for bad in ["", "/etc/passwd", "../x.jpg", "a/../../x", "a//b", "./a", "a\\..\\b", "a/\0"] {
            assert!(matches!(checked_key(bad), Err(SourceError::Forbidden(_))), "{bad:?} was accepted");
        }
        for good in ["IMG_0001.jpg", "user/7/IMG 0001.jpg", "a/..b/c..d"] {
            assert_eq!(checked_key(good).unwrap(), good);
        }
    }

    #[test]
    fn uris_split_into_parts() {
        assert_eq!(Uri::parse("gs://b/p/x.jpg"), Some(Uri { scheme: "gs", bucket: "b", path: "p/x.jpg" }));
        assert_eq!(Uri::parse("gs://b"), Some(Uri { scheme: "gs", bucket: "b", path: "" }));
        assert_eq!(Uri::parse("file:///srv/photos/"), Some(Uri { scheme: "file", bucket: "", path: "srv/photos/" }));
        assert_eq!(Uri::parse("user/7/x.jpg"), None);
    }
}
