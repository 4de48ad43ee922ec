//! Photos in object stores and local folders: the roots they may come from, and keys that cannot
//! climb out of them.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use object_store::{ObjectStore, local::LocalFileSystem, path::Path as ObjectPath};

use super::SourceError;
use crate::{
    storage::{Client, Read, StorageError, Uri, build_store, get_bounded},
    sys::budget::Budget,
};

enum Backend {
    Object { store: Arc<dyn ObjectStore>, prefix: String },
    Local { store: Arc<LocalFileSystem>, dir: PathBuf },
}

/// One place photos may come from.
pub(super) struct Root {
    scheme: String,
    bucket: String,
    prefix: String,
    backend: Backend,
}

impl Root {
    pub(super) fn new(uri_text: &str, client: Client) -> Result<Self, SourceError> {
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
        let dir =
            std::fs::canonicalize(path).map_err(|e| SourceError::from(StorageError::Config(format!("{text}: {e}"))))?;
        let prefix = match uri_path {
            Some(uri_path) => uri_path.to_string(),
            None => dir
                .to_str()
                .ok_or_else(|| SourceError::from(StorageError::Config(format!("{text}: not UTF-8"))))?
                .to_string(),
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

    /// Reads the photo at `key` (already checked), at most `limit` bytes, within `budget`.
    pub(super) async fn get(&self, key: &str, limit: u64, budget: &Budget) -> Result<Read, SourceError> {
        let (store, path): (&dyn ObjectStore, ObjectPath) = match &self.backend {
            Backend::Object { store, prefix } => (store.as_ref(), object_path(prefix, key)?),
            Backend::Local { store, dir } => (store.as_ref(), contained_path(dir, key).await?),
        };
        Ok(get_bounded(store, &path, limit, Some(budget)).await?)
    }
}

/// The root a reference points into and its key there: a bare key resolves against `store`, a
/// full URI against whichever root it lies under.
pub(super) fn resolve<'a, 'r>(
    store: Option<&'a Root>,
    allowed: &'a [Root],
    reference: &'r str,
) -> Result<(&'a Root, &'r str), SourceError> {
    let Some(uri) = Uri::parse(reference) else {
        let store = store.ok_or_else(|| {
            SourceError::from(StorageError::Forbidden("bare keys need CLIPFN_STORE to be set".into()))
        })?;
        return Ok((store, checked_key(reference)?));
    };
    store
        .into_iter()
        .chain(allowed)
        .find_map(|root| root.key_of(&uri))
        .ok_or_else(|| {
            SourceError::from(StorageError::Forbidden("outside the configured store and allowed sources".into()))
        })
        .and_then(|(root, key)| Ok((root, checked_key(key)?)))
}

/// Refuses keys that could name something outside their root.
fn checked_key(key: &str) -> Result<&str, SourceError> {
    let escape = key.is_empty()
        || key.starts_with('/')
        || key.contains('\\')
        || key.chars().any(char::is_control)
        || key.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..");
    if escape {
        Err(SourceError::from(StorageError::Forbidden(format!("'{key}' is not a key inside the store"))))
    } else {
        Ok(key)
    }
}

fn object_path(prefix: &str, key: &str) -> Result<ObjectPath, SourceError> {
    let full = if prefix.is_empty() { key.to_string() } else { format!("{prefix}/{key}") };
    ObjectPath::parse(full).map_err(|e| SourceError::from(StorageError::Forbidden(e.to_string())))
}

/// Follows symlinks and refuses any real path outside the root directory.
async fn contained_path(dir: &Path, key: &str) -> Result<ObjectPath, SourceError> {
    let real = match tokio::fs::canonicalize(dir.join(key)).await {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SourceError::from(StorageError::NotFound(key.to_string())));
        }
        Err(e) => return Err(SourceError::from(StorageError::Fetch(e.to_string()))),
    };
    if !real.starts_with(dir) {
        return Err(SourceError::from(StorageError::Forbidden(format!("'{key}' leads outside the store"))));
    }
    ObjectPath::from_absolute_path(&real).map_err(|e| SourceError::from(StorageError::Fetch(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_escape() {
        for bad in ["", "/etc/passwd", "../x.jpg", "a/../../x", "a//b", "./a", "a\\..\\b", "a/\0"] {
            assert!(
                matches!(checked_key(bad), Err(SourceError::Read(StorageError::Forbidden(_)))),
                "{bad:?} was accepted"
            );
        }
        for good in ["IMG_0001.jpg", "user/7/IMG 0001.jpg", "a/..b/c..d"] {
            assert_eq!(checked_key(good).unwrap(), good);
        }
    }
}
