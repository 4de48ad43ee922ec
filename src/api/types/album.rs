//! `/v1/analyze`'s album: its groupings, people and events.

use serde::Serialize;
use utoipa::ToSchema;

use super::analyze::LocationItem;
use crate::api::{error::ErrorBody, schema};

/// The request's album: its groupings, or why it was not computed (the photos' answers stand
/// either way).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum AlbumAnswer {
    Computed(Album),
    NotComputed(AlbumNotComputed),
}

/// An album that was not computed.
#[derive(Serialize, ToSchema)]
pub struct AlbumNotComputed {
    /// Why: `deadline_exceeded` when the request's deadline (CLIPFN_REQUEST_TIMEOUT_MS) passed
    /// before the album stage finished (or before it could start, when photos ran out the clock),
    /// `album_failed` when the stage failed (the server's log says why).
    #[schema(value_type = schema::AlbumError)]
    pub error: ErrorBody,
}

/// Groupings over the request's photos.
#[derive(Serialize, ToSchema)]
pub struct Album {
    /// The near-duplicates: photos whose hashes are at most CLIPFN_DUPLICATE_BITS apart, linked
    /// through each other; groups by their first photo.
    pub duplicates: Vec<GroupItem>,
    /// Runs of photos each taken within CLIPFN_BURST_GAP_MS of the previous one and alike by
    /// embedding (cosine >= CLIPFN_BURST_SIMILARITY), in time order: a moving subject, whose
    /// hashes differ. A photo may be in a burst and a duplicate group.
    pub bursts: Vec<GroupItem>,
    /// The photos that have a `taken_at`, in time order, in runs cut where the gap exceeds
    /// CLIPFN_EVENT_GAP_S or consecutive located photos are further apart than
    /// CLIPFN_EVENT_DISTANCE_M; photos without a time are in none.
    pub events: Vec<EventItem>,
    /// The album's best photo by the best-shot ranking, among the photos that are the best of
    /// every group they are in; absent when no photo was answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cover: Option<usize>,
    /// The faces grouped into people, largest first (when faces were found for the request).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub people: Option<Vec<PersonItem>>,
    /// Faces about equally near two known people (within a tenth of the max distance of each
    /// other), given to neither (when faces were found for the request).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub unsure: Option<Vec<UnsureFace>>,
    /// The pets (CLIPFN_PET_LABELS' objects) grouped by their crops' image embeddings, as faces
    /// into people, largest first (when objects were found for the request).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub pets: Option<Vec<PetItem>>,
    /// Pets about equally near two known pets (within a tenth of CLIPFN_PET_MAX_DISTANCE of each
    /// other), given to neither (when objects were found for the request).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub unsure_pets: Option<Vec<UnsurePet>>,
}

/// A group of photos and its best shot (README, "The best shot and the cover").
#[derive(Serialize, ToSchema)]
pub struct GroupItem {
    /// Input indices, ascending (a burst's in time order).
    pub photos: Vec<usize>,
    /// The input index of the group's best shot.
    pub best: usize,
    /// The criterion on which the best beat the runner-up.
    #[schema(value_type = schema::BestReason)]
    pub why: &'static str,
}

impl From<crate::album::Ranked> for GroupItem {
    fn from(crate::album::Ranked { photos, best, why }: crate::album::Ranked) -> Self {
        GroupItem { photos, best, why: why.code() }
    }
}

/// A face that two known people are about equally near.
#[derive(Serialize, ToSchema)]
pub struct UnsureFace {
    #[schema(value_type = schema::FaceRef)]
    pub face: [usize; 2],
    /// The two known people's ids, nearer first.
    pub between: [String; 2],
}

/// A pet that two known pets are about equally near.
#[derive(Serialize, ToSchema)]
pub struct UnsurePet {
    #[schema(value_type = schema::ObjectRef)]
    pub object: [usize; 2],
    /// The two known pets' ids, nearer first.
    pub between: [String; 2],
}

/// A suggestion: a known person a new person may be.
#[derive(Serialize, ToSchema)]
pub struct Maybe {
    pub id: String,
    /// The cosine distance from the new person's centre to the known person's nearest exemplar.
    pub distance: f32,
}

/// One event: its photos' indices in time order, the first's and last's `taken_at`.
#[derive(Serialize, ToSchema)]
pub struct EventItem {
    /// The first photo's `taken_at`.
    pub start: String,
    /// The last photo's `taken_at`.
    pub end: String,
    pub photos: Vec<usize>,
    /// The mean place of its located photos (no `alt`); absent when none is located, or with
    /// `"location": false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub centre: Option<LocationItem>,
}

/// One pet: objects as `[photo index, object index]`; the rest as a person's.
#[derive(Serialize, ToSchema)]
pub struct PetItem {
    /// The known pet's id (`known_pets`) these objects are; absent for a new pet.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub id: Option<String>,
    #[schema(value_type = Vec<schema::ObjectRef>)]
    pub objects: Vec<[usize; 2]>,
    #[schema(value_type = schema::ObjectRef)]
    pub representative: [usize; 2],
    #[schema(value_type = Vec<schema::ObjectRef>)]
    pub exemplars: Vec<[usize; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub maybe: Option<Maybe>,
}

/// One person: faces as `[photo index, face index]`.
#[derive(Serialize, ToSchema)]
pub struct PersonItem {
    /// The known person's id (`known_people`) these faces are; absent for a new person.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub id: Option<String>,
    #[schema(value_type = Vec<schema::FaceRef>)]
    pub faces: Vec<[usize; 2]>,
    /// The face closest to the person's centre.
    #[schema(value_type = schema::FaceRef)]
    pub representative: [usize; 2],
    /// Up to CLIPFN_PERSON_EXEMPLARS faces spread across the person, the representative first:
    /// their embeddings are what the app keeps as this person's for the next album.
    #[schema(value_type = Vec<schema::FaceRef>)]
    pub exemplars: Vec<[usize; 2]>,
    /// A new person whose centre is within CLIPFN_FACE_SUGGEST_DISTANCE of a known person: a
    /// question for the app's user ("same person?"), never a merge.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub maybe: Option<Maybe>,
}
