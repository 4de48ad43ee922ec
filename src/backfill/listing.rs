//! What a backfill embeds: the lines of a manifest, or the objects under a prefix.

use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;

use super::BackfillError;
use crate::source::{Prefix, Source};

pub enum Listing<'a> {
    /// A file or object URI with one key per line; keys resolve as in the API.
    Manifest(&'a str),
    /// A URI prefix; every object under it is listed by its full URI.
    Prefix(&'a str),
}

/// Every key of the listing (blank lines dropped), except objects under `skip` (the output, when
/// it lies inside a listed prefix). Duplicates are kept: the caller sorts and dedups its share.
pub async fn keys(source: &Source, listing: &Listing<'_>, skip: &Prefix) -> Result<Vec<String>, BackfillError> {
    let (Listing::Manifest(location) | Listing::Prefix(location)) = *listing;
    let failed = |message: String| BackfillError::Listing { location: location.into(), message };
    match listing {
        Listing::Manifest(_) => {
            let bytes = source.fetch_config_object(location).await.map_err(|e| failed(e.to_string()))?;
            let text = std::str::from_utf8(&bytes).map_err(|e| failed(format!("not UTF-8 text: {e}")))?;
            let lines = text.lines().map(|line| line.trim_end_matches('\r'));
            Ok(lines.filter(|line| !line.trim().is_empty()).map(String::from).collect())
        }
        Listing::Prefix(_) => {
            let prefix = source.open_prefix(location).map_err(|e| failed(e.to_string()))?;
            let objects: Vec<ObjectPath> = prefix
                .store
                .list(Some(&prefix.path))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await
                .map_err(|e| failed(e.to_string()))?;
            let output = format!("{}/", skip.uri_of(&skip.path));
            Ok(objects.iter().map(|path| prefix.uri_of(path)).filter(|uri| !uri.starts_with(&output)).collect())
        }
    }
}
