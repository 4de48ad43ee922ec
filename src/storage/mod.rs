//! Storage: object stores named by URI (`gs://`, `s3://`, `file://`, or a plain path), built
//! with the fetch settings, and the plain reads the service makes of them outside the photo
//! roots: the model's files, label sets, a tokenizer, a backfill's listing and output.
//!
//! Photos are read through [`source`](crate::source), which adds the roots, key checks and
//! budgets on top of the same stores and the same bounded read.

mod client;
mod prefix;
mod read;
mod uri;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use bytes::Bytes;
use futures::StreamExt;
use object_store::{ObjectStore, local::LocalFileSystem, path::Path as ObjectPath};

pub use self::{
    client::{Client, build_store},
    prefix::Prefix,
    read::{Read, classify, get_bounded, read_bounded},
    uri::Uri,
};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("no object at {0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("object is {size} bytes, over the {limit}-byte limit")]
    TooLarge { size: u64, limit: u64 },
    #[error("fetch failed: {0}")]
    Fetch(String),
    /// A URI or path in the configuration cannot be used.
    #[error("{0}")]
    Config(String),
}

/// Plain reads of whole objects and folders, by URI or local path (relative to the working
/// directory).
#[derive(Clone, Copy)]
pub struct Storage {
    client: Client,
}

impl Storage {
    pub fn new(client: Client) -> Self {
        Storage { client }
    }

    /// Reads a whole object (the model file, a label set, a tokenizer).
    pub async fn read(&self, location: &str) -> Result<Bytes, StorageError> {
        let (store, path) = self.store_of(location)?;
        Ok(get_bounded(store.as_ref(), &path, u64::MAX, None).await?.bytes)
    }

    /// Lists a folder (path or URI prefix), as paths relative to it (a model folder).
    pub async fn list(&self, location: &str) -> Result<Vec<String>, StorageError> {
        let (store, prefix) = self.store_of(location.trim_end_matches('/'))?;
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

    fn store_of(&self, location: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath), StorageError> {
        Ok(match Uri::parse(location) {
            Some(uri) if uri.scheme == "file" => {
                (Arc::new(LocalFileSystem::new()), local_object(Path::new(&format!("/{}", uri.path)))?)
            }
            Some(uri) => (build_store(&uri, self.client)?, ObjectPath::parse(uri.path).map_err(config_error)?),
            None => (Arc::new(LocalFileSystem::new()), local_object(Path::new(location))?),
        })
    }

    /// The store and folder that `location` (a URI or local directory) names: backfill lists a
    /// source prefix there and writes its output there.
    pub fn open_prefix(&self, location: &str) -> Result<Prefix, StorageError> {
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
}

/// The local file a configuration location names (a path or a `file://` URI), for ONNX Runtime to
/// read by itself; `None` for an object store URI, which must be fetched.
pub fn local_file(location: &str) -> Option<Result<PathBuf, StorageError>> {
    let path = match Uri::parse(location) {
        Some(uri) if uri.scheme == "file" => PathBuf::from(format!("/{}", uri.path)),
        Some(_) => return None,
        None => PathBuf::from(location),
    };
    Some(real_path(&path))
}

/// A local file by absolute or relative path, as the object store names it.
fn local_object(path: &Path) -> Result<ObjectPath, StorageError> {
    ObjectPath::from_absolute_path(real_path(path)?).map_err(config_error)
}

fn real_path(path: &Path) -> Result<PathBuf, StorageError> {
    std::fs::canonicalize(path).map_err(|e| StorageError::Config(format!("{}: {e}", path.display())))
}

pub fn config_error(e: impl std::fmt::Display) -> StorageError {
    StorageError::Config(e.to_string())
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
        assert_eq!(local_file(model.to_str().unwrap()).unwrap().unwrap(), real);
        assert_eq!(local_file(&format!("file://{}", model.display())).unwrap().unwrap(), real);
        assert!(matches!(local_file("/nonexistent/m.onnx"), Some(Err(StorageError::Config(_)))));
        assert!(local_file("gs://models/m.onnx").is_none());
        assert!(local_file("s3://models/m.onnx").is_none());
    }
}
