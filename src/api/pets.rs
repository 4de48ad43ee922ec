//! `/v1/analyze`'s pets: the request's `known_pets` held to the image model (a pet's embedding is
//! the image tower's embedding of its crop), and the album's pets grouped with them as faces are
//! into people (`people::Grouping`) into `album.pets`.

use super::{
    error::ApiError,
    people::{Group, Grouping, KnownPeople, Unsure, known_ones},
    photos::PhotoResult,
    types::{KnownPerson, KnownPet, PetItem, UnsurePet},
};
use crate::{
    album::{Rules, Stopped},
    settings::{FaceSettings, ObjectSettings},
};

/// The request's `known_pets`: as `known_people`, their embeddings the image model's `dim`.
pub(super) fn known_pets(given: Vec<KnownPet>, dim: usize, settings: &FaceSettings) -> Result<KnownPeople, ApiError> {
    let given = given.into_iter().map(|KnownPet { id, embeddings }| KnownPerson { id, embeddings }).collect();
    known_ones(given, ("known_pets", "pets"), (dim, "the image model's"), settings)
}

/// The album's pets: every object with a crop embedding, with the request's known pets.
pub(super) struct AlbumPets(Grouping);

impl AlbumPets {
    /// A pet seen once is a pet (DBSCAN's min_samples 1): an album often holds one photo of a
    /// friend's dog. Exemplars as many as a person's.
    pub(super) fn new(
        results: &[PhotoResult],
        known: KnownPeople,
        objects: &ObjectSettings,
        faces: &FaceSettings,
    ) -> Self {
        let members = results
            .iter()
            .enumerate()
            .filter_map(|(photo, r)| Some((photo, &r.as_ref().ok()?.objects.as_ref()?.as_ref().ok()?.objects)))
            .flat_map(|(photo, found)| found.iter().enumerate().map(move |(i, object)| (photo, i, object)))
            .filter_map(|(photo, i, object)| Some((photo, i, object.embedding.clone()?)))
            .collect();
        let max_distance = objects.pet_max_distance;
        let rules = Rules {
            max_distance,
            min_faces: 1,
            margin: max_distance / 10.0,
            suggest_distance: 1.5 * max_distance,
            exemplars: faces.person_exemplars,
        };
        AlbumPets(Grouping { members, known, rules })
    }

    /// The album's pets, and the pets about equally near two known ones; `Err` once `stop` says
    /// to stop.
    pub(super) fn pets(&self, stop: &dyn Fn() -> bool) -> Result<(Vec<PetItem>, Vec<UnsurePet>), Stopped> {
        let (groups, unsure) = self.0.groups(stop)?;
        let pets = groups
            .into_iter()
            .map(|Group { id, members, representative, exemplars, maybe }| PetItem {
                id,
                objects: members,
                representative,
                exemplars,
                maybe,
            })
            .collect();
        let unsure =
            unsure.into_iter().map(|Unsure { member, between }| UnsurePet { object: member, between }).collect();
        Ok((pets, unsure))
    }
}
