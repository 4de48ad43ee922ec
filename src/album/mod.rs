//! Groupings over one request's photos (an album is at most a request): near-duplicates by
//! perceptual hash (`duplicates`), bursts by time and embedding (`bursts`), people by face
//! embedding (`people`), events by capture time and place (`events`), and the best shot of each
//! group and the album's cover (`ranking`). Library-wide grouping is a job over backfill's
//! Parquet, not this (docs/deploy.md, "Near-duplicates across the library").
//!
//! A leaf: it sees hashes, vectors, times and coordinates, not photos.

mod bursts;
mod clusters;
mod duplicates;
mod events;
mod people;
mod ranking;

pub use self::{
    bursts::{Shot, bursts},
    clusters::Stopped,
    duplicates::duplicate_groups,
    events::{Timed, events},
    people::{Known, Rules, people, people_until},
    ranking::{Merits, Ranked, Reason, beaten, cover, ranked},
};
