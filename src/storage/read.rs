//! The one bounded read every object goes through, photo or configuration.

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::{GetResultPayload, ObjectStore, ObjectStoreExt, path::Path as ObjectPath};
use tokio::sync::OwnedSemaphorePermit;

use super::StorageError;
use crate::sys::budget::Budget;

/// An object's bytes and, when read under a budget, their share of it (held until dropped).
pub struct Read {
    pub bytes: Bytes,
    pub budget: Option<OwnedSemaphorePermit>,
}

/// Streams an object into memory, refusing it as soon as it is known to exceed `limit`:
/// first from the object's metadata (Content-Length), then while streaming. With a `budget`, the
/// body is read only once its size fits in it.
pub async fn get_bounded(
    store: &dyn ObjectStore,
    path: &ObjectPath,
    limit: u64,
    budget: Option<&Budget>,
) -> Result<Read, StorageError> {
    let result = store.get(path).await.map_err(|e| classify(e, path))?;
    let size = result.meta.size;
    if size > limit {
        return Err(StorageError::TooLarge { size, limit });
    }
    let reserved = match budget {
        Some(budget) => Some(budget.reserve(size).await),
        None => None,
    };
    // A local file's size is exact: one blocking read, not object_store's 8 KiB chunks.
    if matches!(result.payload, GetResultPayload::File(..)) {
        let bytes = result.bytes().await.map_err(|e| classify(e, path))?;
        return Ok(Read { bytes, budget: reserved });
    }
    let mut body = BytesMut::with_capacity(size as usize);
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.map_err(|e| classify(e, path))?);
        if body.len() as u64 > limit {
            return Err(StorageError::TooLarge { size: body.len() as u64, limit });
        }
    }
    Ok(Read { bytes: body.freeze(), budget: reserved })
}

pub fn classify(e: object_store::Error, path: &ObjectPath) -> StorageError {
    match e {
        object_store::Error::NotFound { .. } => StorageError::NotFound(path.to_string()),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            StorageError::Forbidden(format!("the store refused access to {path}"))
        }
        // The text can name the object's URL; the key part of it stays out of logs.
        other => StorageError::Fetch(other.to_string().replace(path.as_ref(), "<key>")),
    }
}
