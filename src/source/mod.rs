//! Source stage: turns a photo reference (bare key or full URI) into its bytes.
//!
//! Every reference resolves against a configured root (`CLIPFN_STORE` or an entry of
//! `CLIPFN_ALLOWED_SOURCES`); nothing outside a root is ever fetched. Keys are taken literally
//! (no percent-decoding) and may not climb out of their root: `..`, `.`, empty segments and
//! absolute keys are refused, and for `file://` roots the real path (symlinks followed) must stay
//! inside the root's real path. A root given as a plain path (`./photos`, `/srv/photos`) is the
//! `file://` root of that folder.
//!
//! Besides object stores (objects.rs), a reference may be an `http(s)://` URL under an allowed
//! prefix (web/, with its SSRF guard in web/allowlist.rs and web/address.rs) or an inline `data:`
//! URI (inline.rs). Every kind ends the same way: bytes for the decode stage, or this photo's
//! error. Object stores and URLs read through the one bounded read (`storage::read_bounded`).
//!
//! Fetched bytes count against a byte budget (`CLIPFN_MAX_FETCHED_BYTES`) from the moment their size
//! is known until they are decoded, so a flood of large photos waits in the store, not in memory.

mod inline;
mod objects;
mod web;

use std::borrow::Cow;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use self::objects::Root;
use crate::{
    settings::{Limits, SourceSettings},
    storage::{Client, Read, StorageError},
    sys::budget::Budget,
};

/// Why a photo could not be had. Reading it can fail as any object's read can (`Read`: not
/// found, refused, too large, a failed fetch, a root that cannot be used); the rest is
/// particular to photo references.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Read(#[from] StorageError),
    /// A signed URL whose signature has expired, as the server's error body says.
    #[error("the signature of {0} has expired")]
    Expired(String),
    /// A data URI whose payload cannot be read.
    #[error("{0}")]
    BadInline(String),
    #[error("the data URI's type '{0}' is not an image")]
    NotAnImage(String),
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

impl From<Read> for Fetched {
    fn from(read: Read) -> Self {
        Fetched { bytes: read.bytes, _budget: read.budget }
    }
}

impl AsRef<[u8]> for Fetched {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Source {
    pub fn new(settings: &SourceSettings, limits: &Limits) -> Result<Self, SourceError> {
        let client = Client::new(settings);
        let (web_prefixes, object_sources): (Vec<&String>, Vec<&String>) =
            settings.allowed_sources.iter().partition(|prefix| web::is_web(prefix));
        let store = settings.store.as_deref().map(|uri| Root::new(uri, client)).transpose()?;
        let allowed = object_sources.into_iter().map(|uri| Root::new(uri, client)).collect::<Result<Vec<_>, _>>()?;
        let web = if web_prefixes.is_empty() {
            None
        } else {
            Some(web::WebSource::new(web_prefixes.into_iter().map(String::as_str), settings, limits.max_image_bytes)?)
        };
        Ok(Source {
            store,
            allowed,
            max_bytes: limits.max_image_bytes,
            io_slots: Semaphore::new(settings.fetch_concurrency),
            budget: Budget::new(limits.max_fetched_bytes()),
            web,
        })
    }

    /// A photo whose bytes the request carried (a multipart part): already in memory, within the
    /// request body's limit, and held to the photos' byte limit as an inline photo is.
    pub fn carried(&self, bytes: Bytes) -> Result<Fetched, SourceError> {
        let size = bytes.len() as u64;
        if size > self.max_bytes {
            return Err(StorageError::TooLarge { size, limit: self.max_bytes }.into());
        }
        Ok(Fetched { bytes, _budget: None })
    }

    /// Fetches one photo from wherever its reference points.
    pub async fn fetch(&self, reference: &str) -> Result<Fetched, SourceError> {
        match Reference::of(reference) {
            // Already in memory, within the request body's limit.
            Reference::Inline => Ok(Fetched { bytes: inline::decode(reference, self.max_bytes)?, _budget: None }),
            Reference::Web => match &self.web {
                Some(web) => web.fetch(reference, &self.io_slots, &self.budget).await,
                None => Err(StorageError::Forbidden("no http(s) prefix is in CLIPFN_ALLOWED_SOURCES".into()).into()),
            },
            Reference::Object => self.fetch_object(reference).await,
        }
    }

    /// Fetches one object, waiting for an I/O slot so that a 100-photo request cannot open 100
    /// connections at once, and for its size in the byte budget before reading the body.
    async fn fetch_object(&self, reference: &str) -> Result<Fetched, SourceError> {
        let (root, key) = objects::resolve(self.store.as_ref(), &self.allowed, reference)?;
        let _slot = self.io_slots.acquire().await.expect("semaphore is never closed");
        let read = root.get(key, self.max_bytes, &self.budget).await?;
        Ok(read.into())
    }
}
