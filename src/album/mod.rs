//! Groupings over one request's photos (an album is at most a request): near-duplicates by
//! perceptual hash (`duplicates`), people by face embedding (`people`). Library-wide grouping is a
//! job over backfill's Parquet, not this (docs/deploy.md, "Near-duplicates across the library").
//!
//! A leaf: it sees hashes and vectors, not photos.

mod duplicates;
mod people;

pub use self::{duplicates::duplicate_groups, people::people};
