//! What a backfill embeds: the lines of a manifest, or the objects under a prefix.

use futures::TryStreamExt;

use super::{BackfillError, shard::Task};
use crate::storage::{Prefix, Storage};

pub enum Listing<'a> {
    /// A file or object URI with one key per line; keys resolve as in the API.
    Manifest(&'a str),
    /// A URI prefix; every object under it is listed by its full URI.
    Prefix(&'a str),
}

/// The keys of the listing that `task` owns (blank lines dropped), except objects under `skip`
/// (the output, when it lies inside a listed prefix), and how many keys the listing held in all.
/// Only this task's share is kept in memory. Duplicates are kept: the caller sorts and dedups.
pub async fn keys(
    storage: &Storage,
    listing: &Listing<'_>,
    skip: &Prefix,
    task: Task,
) -> Result<(usize, Vec<String>), BackfillError> {
    let (Listing::Manifest(location) | Listing::Prefix(location)) = *listing;
    let failed = |message: String| BackfillError::Listing { location: location.into(), message };
    let mut listed = 0;
    let mut owned = Vec::new();
    let mut add = |key: String| {
        listed += 1;
        if task.owns(&key) {
            owned.push(key);
        }
    };
    match listing {
        Listing::Manifest(_) => {
            let bytes = storage.read(location).await.map_err(|e| failed(e.to_string()))?;
            let text = std::str::from_utf8(&bytes).map_err(|e| failed(format!("not UTF-8 text: {e}")))?;
            let lines = text.lines().map(|line| line.trim_end_matches('\r'));
            lines.filter(|line| !line.trim().is_empty()).for_each(|line| add(line.to_string()));
        }
        Listing::Prefix(_) => {
            let prefix = storage.open_prefix(location).map_err(|e| failed(e.to_string()))?;
            let output = format!("{}/", skip.uri_of(&skip.path));
            let mut objects = prefix.store.list(Some(&prefix.path));
            while let Some(meta) = objects.try_next().await.map_err(|e| failed(e.to_string()))? {
                let uri = prefix.uri_of(&meta.location);
                if !uri.starts_with(&output) {
                    add(uri);
                }
            }
        }
    }
    Ok((listed, owned))
}
