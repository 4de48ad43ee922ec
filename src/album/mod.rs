//! Groupings over one request's photos (an album is at most a request): near-duplicates by
//! perceptual hash (`duplicates`), people by face embedding (`people`), events by capture time and
//! place (`events`). Library-wide grouping is a
//! job over backfill's Parquet, not this (docs/deploy.md, "Near-duplicates across the library").
//!
//! A leaf: it sees hashes, vectors, times and coordinates, not photos.

mod duplicates;
mod events;
mod people;

pub use self::{
    duplicates::duplicate_groups,
    events::{Timed, events},
    people::{Known, Rules, people},
};
