//! `/v1/analyze`'s people: the request's `known_people` checked against the server's recognizer
//! and limits, and the album's faces, owned for the album stage, grouped with them (`album::people`) into
//! `album.people` and `album.unsure`.

use super::{
    error::ApiError,
    photos::PhotoResult,
    types::{KnownPerson, Maybe, PersonItem, UnsureFace},
};
use crate::{
    album::{Known, Rules, Stopped, people_until},
    model::RecognizerInfo,
    settings::FaceSettings,
};

/// The known people of a request, checked: one entry an id (an id given twice pools its
/// embeddings), embeddings of unit length.
pub(super) struct KnownPeople {
    ids: Vec<String>,
    exemplars: Vec<Vec<Vec<f32>>>,
}

/// The model a request's `field` names (`recognizer`, `known_pets_model`) must be this server's
/// `what` (`ours`), with or without known ones (the OpenAPI document allows only its id), so that
/// embeddings of two models never meet.
pub(super) fn same_model(field: &str, named: Option<&str>, (what, ours): (&str, &str)) -> Result<(), ApiError> {
    match named.filter(|named| *named != ours) {
        Some(named) => Err(ApiError::BadRequest(format!(
            "{field}: the request names '{named}', and this server's {what} is '{ours}'; embeddings of two \
             {what}s do not compare"
        ))),
        None => Ok(()),
    }
}

/// The request's `known_people`, held to `recognizer` (every embedding of its dim, finite and not
/// all zero) and to the settings' limits.
pub(super) fn known_people(
    given: Vec<KnownPerson>,
    recognizer: &RecognizerInfo,
    settings: &FaceSettings,
) -> Result<KnownPeople, ApiError> {
    known_ones(given, ("known_people", "people"), (recognizer.dim, "this recognizer's"), settings)
}

/// `given` (the request's `field`, of `ones`), held to embeddings of `dim` (`whose`) and to the
/// settings' limits.
pub(super) fn known_ones(
    given: Vec<KnownPerson>,
    (field, ones): (&str, &str),
    (dim, whose): (usize, &str),
    settings: &FaceSettings,
) -> Result<KnownPeople, ApiError> {
    let bad = |message: String| Err(ApiError::BadRequest(message));
    if given.len() > settings.max_known_people {
        return bad(format!(
            "{field} holds {} {ones}, over the limit of {} (CLIPFN_MAX_KNOWN_PEOPLE)",
            given.len(),
            settings.max_known_people
        ));
    }
    let (mut ids, mut exemplars): (Vec<String>, Vec<Vec<Vec<f32>>>) = (Vec::new(), Vec::new());
    for (i, person) in given.into_iter().enumerate() {
        if person.id.is_empty() || person.id.chars().count() > 256 {
            return bad(format!("{field}[{i}].id must be 1 to 256 characters"));
        }
        let count = person.embeddings.len();
        if count == 0 || count > settings.max_exemplars {
            return bad(format!(
                "{field}[{i}].embeddings must hold 1 to {} embeddings (CLIPFN_MAX_EXEMPLARS), got {count}",
                settings.max_exemplars
            ));
        }
        let mut unit = Vec::with_capacity(count);
        for (j, mut embedding) in person.embeddings.into_iter().enumerate() {
            let problem = if embedding.len() != dim {
                format!("has {} values, and {whose} embeddings have {dim}", embedding.len())
            } else if !embedding.iter().all(|x| x.is_finite()) {
                "holds a value that is not a finite float32".to_string()
            } else if embedding.iter().all(|&x| x == 0.0) {
                "is all zeros, which has no direction".to_string()
            } else {
                let norm = embedding.iter().map(|x| x * x).sum::<f32>().sqrt();
                embedding.iter_mut().for_each(|x| *x /= norm);
                unit.push(embedding);
                continue;
            };
            return bad(format!("{field}[{i}].embeddings[{j}] {problem}"));
        }
        match ids.iter().position(|id| *id == person.id) {
            Some(same) => exemplars[same].extend(unit),
            None => {
                ids.push(person.id);
                exemplars.push(unit);
            }
        }
    }
    Ok(KnownPeople { ids, exemplars })
}

/// What is grouped, owned (the album stage runs off the runtime and may be left behind at the
/// deadline): each member as `(photo, index in the photo, unit embedding)`, the request's known
/// ones and the rules.
pub(super) struct Grouping {
    pub members: Vec<(usize, usize, Vec<f32>)>,
    pub known: KnownPeople,
    pub rules: Rules,
}

/// One group: its known one's id, its members, representative and exemplars as `[photo, index]`,
/// and the known one it may be.
pub(super) struct Group {
    pub id: Option<String>,
    pub members: Vec<[usize; 2]>,
    pub representative: [usize; 2],
    pub exemplars: Vec<[usize; 2]>,
    pub maybe: Option<Maybe>,
}

/// A member about equally near two known ones: `[photo, index]` and their ids, nearer first.
pub(super) struct Unsure {
    pub member: [usize; 2],
    pub between: [String; 2],
}

impl Grouping {
    /// The groups and the members about equally near two known ones; `Err` once `stop` says to stop.
    pub(super) fn groups(&self, stop: &dyn Fn() -> bool) -> Result<(Vec<Group>, Vec<Unsure>), Stopped> {
        let members: Vec<(usize, usize, &[f32])> = self.members.iter().map(|(p, f, v)| (*p, *f, &v[..])).collect();
        let known = &self.known;
        let known_ones: Vec<Known> = known
            .exemplars
            .iter()
            .map(|exemplars| Known { exemplars: exemplars.iter().map(Vec::as_slice).collect() })
            .collect();
        let found = people_until(&members, &known_ones, &self.rules, stop)?;
        let at = |(photo, member): (usize, usize)| [photo, member];
        let groups = found
            .people
            .into_iter()
            .map(|person| Group {
                id: person.known.map(|k| known.ids[k].clone()),
                members: person.faces.into_iter().map(at).collect(),
                representative: at(person.representative),
                exemplars: person.exemplars.into_iter().map(at).collect(),
                maybe: person.maybe.map(|(k, distance)| Maybe { id: known.ids[k].clone(), distance }),
            })
            .collect();
        let unsure = found
            .unsure
            .into_iter()
            .map(|(member, [a, b])| Unsure {
                member: at(member),
                between: [known.ids[a].clone(), known.ids[b].clone()],
            })
            .collect();
        Ok((groups, unsure))
    }
}

/// The album's faces: every face of the photos that have them but those under
/// CLIPFN_FACE_MIN_SIZE, with the request's known people and the recognizer's rules.
pub(super) struct AlbumFaces(Grouping);

impl AlbumFaces {
    pub(super) fn new(
        results: &[PhotoResult],
        known: KnownPeople,
        recognizer: &RecognizerInfo,
        settings: &FaceSettings,
    ) -> Self {
        let faces = results
            .iter()
            .enumerate()
            .filter_map(|(photo, r)| Some((photo, r.as_ref().ok()?.faces.as_ref()?.as_ref().ok()?)))
            .flat_map(|(photo, found)| found.faces.iter().enumerate().map(move |(i, face)| (photo, i, face)))
            .filter(|(_, _, face)| face.chip_pixels >= settings.face_min_size as f32)
            .map(|(photo, i, face)| (photo, i, face.embedding.clone()))
            .collect();
        let max_distance = recognizer.max_distance(settings).value;
        let rules = Rules {
            max_distance,
            min_faces: settings.face_min_faces,
            // "About equally near": within a tenth of the distance that joins (0.05 for ArcFace's
            // 0.5, 0.0075 for dlib's 0.075), so the margin follows the recognizer's scale.
            margin: max_distance / 10.0,
            suggest_distance: settings.face_suggest_distance.unwrap_or(1.5 * max_distance),
            exemplars: settings.person_exemplars,
        };
        AlbumFaces(Grouping { members: faces, known, rules })
    }

    /// The faces that take part.
    pub(super) fn count(&self) -> usize {
        self.0.members.len()
    }

    /// The album's people and unsure faces, grouped with the known people at the recognizer's
    /// distance; `Err` once `stop` says to stop.
    pub(super) fn people(&self, stop: &dyn Fn() -> bool) -> Result<(Vec<PersonItem>, Vec<UnsureFace>), Stopped> {
        let (groups, unsure) = self.0.groups(stop)?;
        let unsure =
            unsure.into_iter().map(|Unsure { member, between }| UnsureFace { face: member, between }).collect();
        let people = groups
            .into_iter()
            .map(|Group { id, members, representative, exemplars, maybe }| PersonItem {
                id,
                faces: members,
                representative,
                exemplars,
                maybe,
            })
            .collect();
        Ok((people, unsure))
    }
}

impl KnownPeople {
    /// No known people: the album's faces are clustered from scratch.
    pub(super) fn none() -> Self {
        KnownPeople { ids: Vec::new(), exemplars: Vec::new() }
    }
}
