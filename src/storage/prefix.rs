//! A folder in a store, named by a URI: what backfill lists and writes under.

use std::sync::Arc;

use object_store::{ObjectStore, path::Path as ObjectPath};

pub struct Prefix {
    pub store: Arc<dyn ObjectStore>,
    /// The folder inside `store`.
    pub path: ObjectPath,
    /// `scheme://bucket/`, which an object's location completes into its URI.
    pub(super) base: String,
}

impl Prefix {
    /// The URI of an object in this prefix's store.
    pub fn uri_of(&self, location: &ObjectPath) -> String {
        format!("{}{location}", self.base)
    }
}
