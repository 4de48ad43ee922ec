//! Source stage: turns a photo reference (bare key or full URI) into its bytes.
//!
//! Every reference resolves against a configured root (`CLIPFN_STORE` or an entry of
//! `CLIPFN_ALLOWED_SOURCES`); nothing outside a root is ever fetched. Keys are taken literally
//! (no percent-decoding) and may not climb out of their root: `..`, `.`, empty segments and
//! absolute keys are refused, and for `file://` roots the real path (symlinks followed) must stay
//! inside the root's real path. A root given as a plain path (`./photos`, `/srv/photos`) is the
//! `file://` root of that folder.
//!
//! Besides object stores, a reference may be an `http(s)://` URL under an allowed prefix (web.rs,
//! with the SSRF guard in allowlist.rs and address.rs) or an inline `data:` URI (inline.rs). Every
//! kind ends the same way: bytes for the decode stage, or this photo's error.
//!
//! Fetched bytes count against a byte budget (`CLIPFN_MAX_FETCHED_BYTES`) from the moment their size
//! is known until they are decoded, so a flood of large photos waits in the store, not in memory.

mod address;
mod allowlist;
mod inline;
mod web;

use std::{
    borrow::Cow,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::{
    ClientConfigKey, GetResultPayload, ObjectStore, ObjectStoreExt, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    gcp::{GoogleCloudStorageBuilder, GoogleConfigKey},
    local::LocalFileSystem,
    path::Path as ObjectPath,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{budget::Budget, config::Settings};

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
    /// Where bare keys resolve (`CLIPFN_STORE`); full URIs may point into it too.
    store: Option<Root>,
    /// Where else full URIs may point (`CLIPFN_ALLOWED_SOURCES`).
    allowed: Vec<Root>,
    max_bytes: u64,
    io_slots: Semaphore,
    /// Fetched bytes not yet decoded.
    budget: Budget,
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

/// A photo's bytes. They hold their share of the fetched-bytes budget until dropped, which the
/// pipeline does as soon as they are decoded.
pub struct Fetched {
    pub bytes: Bytes,
    _budget: Option<OwnedSemaphorePermit>,
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
        let store = settings.store.as_deref().map(|uri| Root::new(uri, client)).transpose()?;
        let allowed = object_sources.into_iter().map(|uri| Root::new(uri, client)).collect::<Result<Vec<_>, _>>()?;
        let web = if web_prefixes.is_empty() {
            None
        } else {
            Some(web::WebSource::new(web_prefixes.into_iter().map(String::as_str), settings)?)
        };
        Ok(Source {
            store,
            allowed,
            max_bytes: settings.max_image_bytes,
            io_slots: Semaphore::new(settings.fetch_concurrency),
            budget: Budget::new(settings.max_fetched_bytes()),
            client,
            web,
        })
    }

    /// Fetches one photo from wherever its reference points.
    pub async fn fetch(&self, reference: &str) -> Result<Fetched, SourceError> {
        match Reference::of(reference) {
            // Already in memory, within the request body's limit.
            Reference::Inline => Ok(Fetched { bytes: inline::decode(reference, self.max_bytes)?, _budget: None }),
            Reference::Web => match &self.web {
                Some(web) => web.fetch(reference, &self.io_slots, &self.budget).await,
                None => Err(SourceError::Forbidden("no http(s) prefix is in CLIPFN_ALLOWED_SOURCES".into())),
            },
            Reference::Object => self.fetch_object(reference).await,
        }
    }

    /// Fetches one object, waiting for an I/O slot so that a 100-photo request cannot open 100
    /// connections at once, and for its size in the byte budget before reading the body.
    async fn fetch_object(&self, reference: &str) -> Result<Fetched, SourceError> {
        let (root, key) = self.resolve(reference)?;
        let _slot = self.io_slots.acquire().await.expect("semaphore is never closed");
        let (store, path): (&dyn ObjectStore, ObjectPath) = match &root.backend {
            Backend::Object { store, prefix } => (store.as_ref(), object_path(prefix, key)?),
            Backend::Local { store, dir } => (store.as_ref(), contained_path(dir, key).await?),
        };
        get_bounded(store, &path, self.max_bytes, Some(&self.budget)).await
    }

    /// Reads a whole object by URI or local path (relative to the working directory), outside the
    /// photo roots (the model file).
    pub async fn fetch_config_object(&self, location: &str) -> Result<Bytes, SourceError> {
        let (store, path) = self.config_store(location)?;
        Ok(get_bounded(store.as_ref(), &path, u64::MAX, None).await?.bytes)
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
            Some(uri) if uri.scheme == "file" => {
                (Arc::new(LocalFileSystem::new()), local_object(Path::new(&format!("/{}", uri.path)))?)
            }
            Some(uri) => (build_store(&uri, self.client)?, ObjectPath::parse(uri.path).map_err(config_error)?),
            None => (Arc::new(LocalFileSystem::new()), local_object(Path::new(location))?),
        })
    }

    /// The store and folder that `location` (a URI or local directory) names, outside the photo
    /// roots: backfill lists a source prefix there and writes its output there.
    pub fn open_prefix(&self, location: &str) -> Result<Prefix, SourceError> {
        let uri = Uri::parse(location);
        if let Some(uri) = uri.as_ref().filter(|uri| uri.scheme != "file") {
            return Ok(Prefix {
                store: build_store(uri, self.client)?,
                base: format!("{}://{}/", uri.scheme, uri.bucket),
                path: ObjectPath::parse(uri.path.trim_end_matches('/')).map_err(config_error)?,
            });
        }
        let dir = match uri {
            Some(uri) => PathBuf::from(format!("/{}", uri.path)),
            None => std::path::absolute(location).map_err(config_error)?,
        };
        Ok(Prefix {
            store: Arc::new(LocalFileSystem::new()),
            base: "file:///".into(),
            path: ObjectPath::from_absolute_path(dir).map_err(config_error)?,
        })
    }

    fn resolve<'r>(&self, reference: &'r str) -> Result<(&Root, &'r str), SourceError> {
        let Some(uri) = Uri::parse(reference) else {
            let store = self
                .store
                .as_ref()
                .ok_or_else(|| SourceError::Forbidden("bare keys need CLIPFN_STORE to be set".into()))?;
            return Ok((store, checked_key(reference)?));
        };
        self.store
            .iter()
            .chain(&self.allowed)
            .find_map(|root| root.key_of(&uri))
            .ok_or_else(|| SourceError::Forbidden("outside the configured store and allowed sources".into()))
            .and_then(|(root, key)| Ok((root, checked_key(key)?)))
    }
}

/// A folder in a store, named by a URI.
pub struct Prefix {
    pub store: Arc<dyn ObjectStore>,
    /// The folder inside `store`.
    pub path: ObjectPath,
    /// `scheme://bucket/`, which an object's location completes into its URI.
    base: String,
}

impl Prefix {
    /// The URI of an object in this prefix's store.
    pub fn uri_of(&self, location: &ObjectPath) -> String {
        format!("{}{location}", self.base)
    }
}

impl Root {
    fn new(uri_text: &str, client: ClientSettings) -> Result<Self, SourceError> {
        let Some(mut uri) = Uri::parse(uri_text) else {
            return Root::folder(uri_text, Path::new(uri_text), None);
        };
        uri.path = uri.path.trim_end_matches('/');
        if uri.scheme == "file" {
            return Root::folder(uri_text, Path::new(&format!("/{}", uri.path)), Some(uri.path));
        }
        Ok(Root {
            scheme: uri.scheme.to_string(),
            bucket: uri.bucket.to_string(),
            prefix: uri.path.to_string(),
            backend: Backend::Object { store: build_store(&uri, client)?, prefix: uri.path.to_string() },
        })
    }

    /// A local folder, named by `file://` URI (full URIs then point into it by that URI's path) or
    /// by a plain path, relative to the working directory (full URIs then use its real path).
    fn folder(text: &str, path: &Path, uri_path: Option<&str>) -> Result<Self, SourceError> {
        let dir = std::fs::canonicalize(path).map_err(|e| SourceError::Config(format!("{text}: {e}")))?;
        let prefix = match uri_path {
            Some(uri_path) => uri_path.to_string(),
            None => dir.to_str().ok_or_else(|| SourceError::Config(format!("{text}: not UTF-8")))?.to_string(),
        };
        Ok(Root {
            scheme: "file".into(),
            bucket: String::new(),
            prefix: prefix.trim_matches('/').to_string(),
            backend: Backend::Local { store: Arc::new(LocalFileSystem::new()), dir },
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
        Some(uri) if uri.scheme == "file" => PathBuf::from(format!("/{}", uri.path)),
        Some(_) => return None,
        None => PathBuf::from(location),
    };
    Some(real_path(&path))
}

/// A local file by absolute or relative path, as the object store names it.
fn local_object(path: &Path) -> Result<ObjectPath, SourceError> {
    ObjectPath::from_absolute_path(real_path(path)?).map_err(config_error)
}

fn real_path(path: &Path) -> Result<PathBuf, SourceError> {
    std::fs::canonicalize(path).map_err(|e| SourceError::Config(format!("{}: {e}", path.display())))
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
/// first from the object's metadata (Content-Length), then while streaming. With a `budget`, the
/// body is read only once its size fits in it.
async fn get_bounded(
    store: &dyn ObjectStore,
    path: &ObjectPath,
    limit: u64,
    budget: Option<&Budget>,
) -> Result<Fetched, SourceError> {
    let result = store.get(path).await.map_err(|e| classify(e, path))?;
    let size = result.meta.size;
    if size > limit {
        return Err(SourceError::TooLarge { size, limit });
    }
    let reserved = match budget {
        Some(budget) => Some(budget.reserve(size).await),
        None => None,
    };
    // A local file's size is exact: one blocking read, not object_store's 8 KiB chunks.
    if matches!(result.payload, GetResultPayload::File(..)) {
        let bytes = result.bytes().await.map_err(|e| classify(e, path))?;
        return Ok(Fetched { bytes, _budget: reserved });
    }
    let mut body = BytesMut::with_capacity(size as usize);
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.map_err(|e| classify(e, path))?);
        if body.len() as u64 > limit {
            return Err(SourceError::TooLarge { size: body.len() as u64, limit });
        }
    }
    Ok(Fetched { bytes: body.freeze(), _budget: reserved })
}

fn classify(e: object_store::Error, path: &ObjectPath) -> SourceError {
    match e {
        object_store::Error::NotFound { .. } => SourceError::NotFound(path.to_string()),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            SourceError::Forbidden(format!("the store refused access to {path}"))
        }
        // The text can name the object's URL; the key part of it stays out of logs.
        other => SourceError::Fetch(other.to_string().replace(path.as_ref(), "<key>")),
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
