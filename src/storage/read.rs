//! The one bounded read every photo and configuration file goes through, from an object store
//! here and from an `http(s)://` URL in `source::web`: a body known to be too large is refused
//! before it is read, one that turns out too large is refused as soon as it does, and the body is
//! read only once its size fits in the fetched-bytes budget.

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use object_store::{GetResultPayload, ObjectStore, ObjectStoreExt, path::Path as ObjectPath};
use tokio::sync::OwnedSemaphorePermit;

use super::StorageError;
use crate::sys::budget::Budget;

/// An object's bytes and, when read under a budget, their share of it (held until dropped).
pub struct Read {
    pub bytes: Bytes,
    pub budget: Option<OwnedSemaphorePermit>,
}

/// Reads a body of `size` bytes (unknown: `None`) streamed as `chunks`, refusing it as soon as it
/// is known to exceed `limit`: first from its announced size, then while streaming. With a
/// `budget`, the body is read only once its size (the limit, when the size is unknown) fits in it.
pub async fn read_bounded<E: From<StorageError>>(
    size: Option<u64>,
    limit: u64,
    budget: Option<&Budget>,
    chunks: impl Stream<Item = Result<Bytes, E>>,
) -> Result<Read, E> {
    let budget = admit(size, limit, budget).await?;
    let mut body = BytesMut::with_capacity(size.unwrap_or(0) as usize);
    let mut chunks = std::pin::pin!(chunks);
    while let Some(chunk) = chunks.next().await {
        body.extend_from_slice(&chunk?);
        if body.len() as u64 > limit {
            return Err(StorageError::TooLarge { size: body.len() as u64, limit }.into());
        }
    }
    Ok(Read { bytes: body.freeze(), budget })
}

/// Reads an object through [`read_bounded`]'s rules.
pub async fn get_bounded(
    store: &dyn ObjectStore,
    path: &ObjectPath,
    limit: u64,
    budget: Option<&Budget>,
) -> Result<Read, StorageError> {
    let result = store.get(path).await.map_err(|e| classify(e, path))?;
    let size = result.meta.size;
    // A local file's size is exact: one blocking read, not object_store's 8 KiB chunks.
    if matches!(result.payload, GetResultPayload::File(..)) {
        let budget = admit(Some(size), limit, budget).await?;
        let bytes = result.bytes().await.map_err(|e| classify(e, path))?;
        return Ok(Read { bytes, budget });
    }
    let chunks = result.into_stream().map(|chunk| chunk.map_err(|e| classify(e, path)));
    read_bounded(Some(size), limit, budget, chunks).await
}

/// Refuses a body announced over `limit`; waits until its size fits in `budget`, and holds it.
async fn admit(
    size: Option<u64>,
    limit: u64,
    budget: Option<&Budget>,
) -> Result<Option<OwnedSemaphorePermit>, StorageError> {
    if let Some(size) = size.filter(|&size| size > limit) {
        return Err(StorageError::TooLarge { size, limit });
    }
    Ok(match budget {
        Some(budget) => Some(budget.reserve(size.unwrap_or(limit)).await),
        None => None,
    })
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
