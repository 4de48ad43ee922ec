//! People: the faces of a request grouped by DBSCAN over their cosine distances, as the album app
//! (`DBSCAN(eps, min_samples, metric="cosine")`) and Immich group them, in scikit-learn's order, so
//! that a face between two people joins the one scikit-learn gives it; and never two faces of one
//! photo in one person (a cannot-link: one photo cannot show a person twice).

use ndarray::Array2;

use super::clusters::{Faces, Stopped, clusters};

/// One person: their faces, as `(photo index, face index)`, in input order, the one closest to
/// their centre, and up to `Rules::exemplars` faces spread across them (for the app to keep and
/// send back as a known person's).
#[derive(Debug, Clone, PartialEq)]
pub struct Person {
    pub faces: Vec<(usize, usize)>,
    pub representative: (usize, usize),
    pub exemplars: Vec<(usize, usize)>,
    /// The known person these faces are (an index into `known`).
    pub known: Option<usize>,
    /// For a new person: the known person whose exemplars its centre is within
    /// `Rules::suggest_distance` of, and that distance: a question for the app's user.
    pub maybe: Option<(usize, f32)>,
}

/// A person the app already knows: exemplar embeddings of the recognizer's, of unit length.
pub struct Known<'a> {
    pub exemplars: Vec<&'a [f32]>,
}

/// How faces become people.
pub struct Rules {
    /// DBSCAN's eps, and the reach of a known person's exemplars (cosine distance).
    pub max_distance: f32,
    /// DBSCAN's min_samples.
    pub min_faces: usize,
    /// A face whose two nearest known people are within this of each other goes to neither.
    pub margin: f32,
    /// The reach of a suggestion (`Person::maybe`).
    pub suggest_distance: f32,
    /// The most exemplars a person answers.
    pub exemplars: usize,
}

/// People, and the faces that were about equally near two known people (the face, and the two).
#[derive(Debug, Default, PartialEq)]
pub struct People {
    pub people: Vec<Person>,
    pub unsure: Vec<((usize, usize), [usize; 2])>,
}

/// The people among `faces` (each `(photo, face, unit embedding)`), given the `known` ones.
///
/// A face within `max_distance` of a known person's nearest exemplar is that person's, unless a
/// second known person is within `margin` of that: then it is neither's (`unsure`) and goes on as
/// unknown. Of one photo's faces that one known person takes, the nearest stays and the others go
/// on as unknown. The unknown faces are clustered (DBSCAN: a face with at least `min_faces` faces,
/// itself included, within `max_distance` is a core face; a person is the core faces linked
/// through each other and the faces within reach of them; faces reached by no core face belong to
/// no one), and one photo never shows a person twice: a cluster that would hold two faces of one
/// photo is split, its core faces joined again nearest pair first where the parts share no photo,
/// its other faces given to the part of their nearest core face that lacks their photo, and parts
/// of fewer than `min_faces` faces are no one's (`clusters`). Known people first, in `known`'s
/// order; then the new, largest first, equal sizes in the order of their first face.
pub fn people(faces: &[(usize, usize, &[f32])], known: &[Known], rules: &Rules) -> People {
    people_until(faces, known, rules, &|| false).expect("never stopped")
}

/// [`people`], asking `stop` between blocks of work: `Err` once it says to stop.
pub fn people_until(
    faces: &[(usize, usize, &[f32])],
    known: &[Known],
    rules: &Rules,
    stop: &dyn Fn() -> bool,
) -> Result<People, Stopped> {
    let mut unsure = Vec::new();
    // Each face's known person, where it has one: (person, distance).
    let mut claimed: Vec<Option<(usize, f32)>> = vec![None; faces.len()];
    let vectors: Vec<&[f32]> = faces.iter().map(|face| face.2).collect();
    for (i, distances) in known_distances(&vectors, known).iter().enumerate() {
        match two_nearest(distances) {
            [Some((first, d1)), Some((second, d2))] if d1 <= rules.max_distance && d2 - d1 < rules.margin => {
                unsure.push(((faces[i].0, faces[i].1), [first, second]));
            }
            [Some((first, d1)), _] if d1 <= rules.max_distance => claimed[i] = Some((first, d1)),
            _ => {}
        }
    }
    // One photo, one face a known person: the nearest (the lower index of equals).
    let mut by_person: Vec<(usize, usize, f32, usize)> = claimed
        .iter()
        .enumerate()
        .filter_map(|(i, claim)| claim.map(|(person, distance)| (person, faces[i].0, distance, i)))
        .collect();
    by_person.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(a.2.total_cmp(&b.2)).then(a.3.cmp(&b.3)));
    for pair in by_person.windows(2) {
        if (pair[0].0, pair[0].1) == (pair[1].0, pair[1].1) {
            claimed[pair[1].3] = None;
        }
    }
    let mut members_of: Vec<Vec<usize>> = vec![Vec::new(); known.len()];
    for (i, claim) in claimed.iter().enumerate() {
        if let Some((person, _)) = claim {
            members_of[*person].push(i);
        }
    }
    let mut found: Vec<Person> = members_of
        .iter()
        .enumerate()
        .filter(|(_, members)| !members.is_empty())
        .map(|(k, members)| Person { known: Some(k), ..person(faces, members, rules.exemplars) })
        .collect();
    let unknown: Vec<usize> = (0..faces.len()).filter(|&i| claimed[i].is_none()).collect();
    let unknown_faces = Faces::new(
        unknown.iter().map(|&i| faces[i].0).collect(),
        &unknown.iter().map(|&i| faces[i].2).collect::<Vec<_>>(),
    );
    let groups: Vec<Vec<usize>> = clusters(&unknown_faces, rules.max_distance, rules.min_faces, stop)?
        .into_iter()
        .map(|group| group.into_iter().map(|position| unknown[position]).collect())
        .collect();
    if stop() {
        return Err(Stopped);
    }
    let centres: Vec<Vec<f32>> = groups.iter().map(|members| normalised(centre(faces, members))).collect();
    let centres: Vec<&[f32]> = centres.iter().map(Vec::as_slice).collect();
    let mut new: Vec<Person> = groups
        .iter()
        .zip(known_distances(&centres, known))
        .map(|(members, distances)| Person {
            maybe: two_nearest(&distances)[0].filter(|(_, d)| *d <= rules.suggest_distance),
            ..person(faces, members, rules.exemplars)
        })
        .collect();
    // Stable: equal sizes keep their first face's order.
    new.sort_by_key(|person| (std::cmp::Reverse(person.faces.len()), person.faces[0]));
    found.append(&mut new);
    Ok(People { people: found, unsure })
}

/// The vectors whose distances to the known people are taken a block at a time: the block's
/// product with every exemplar stays small (256 x 20,000 exemplars, the most a request carries,
/// is 20 MB).
const BLOCK: usize = 256;

/// Each vector's distance (cosine, all of unit length) to each known person: to that person's
/// nearest exemplar. One matrix product of the vectors with all the exemplars (ndarray's, at the
/// machine's SIMD width) instead of a dot product a pair: an album's 200 faces against 1,000
/// people of 5 exemplars are 10^6 of them (docs/bench/people.md).
fn known_distances(vectors: &[&[f32]], known: &[Known]) -> Vec<Vec<f32>> {
    let exemplars: Vec<&[f32]> = known.iter().flat_map(|person| person.exemplars.iter().copied()).collect();
    let Some(dim) = exemplars.first().map(|e| e.len()) else { return vec![Vec::new(); vectors.len()] };
    let rows_of = |vectors: &[&[f32]]| Array2::from_shape_vec((vectors.len(), dim), vectors.concat());
    let matrix = rows_of(&exemplars).expect("every exemplar has the recognizer's dim");
    let mut distances = Vec::with_capacity(vectors.len());
    for block in vectors.chunks(BLOCK) {
        let similarities = rows_of(block).expect("every vector has the recognizer's dim").dot(&matrix.t());
        for row in similarities.rows() {
            let row = row.to_slice().expect("a product's row is contiguous");
            let mut first = 0;
            let per_person = known.iter().map(|person| {
                let nearest = row[first..first + person.exemplars.len()].iter().fold(f32::MIN, |a, &b| a.max(b));
                first += person.exemplars.len();
                1.0 - nearest
            });
            distances.push(per_person.collect());
        }
    }
    distances
}

/// The nearest and the second nearest (person, distance) of `distances`, the lower index first
/// where two are equal.
fn two_nearest(distances: &[f32]) -> [Option<(usize, f32)>; 2] {
    let mut nearest = [None, None];
    for (k, &d) in distances.iter().enumerate() {
        if nearest[0].is_none_or(|(_, best)| d < best) {
            nearest = [Some((k, d)), nearest[0]];
        } else if nearest[1].is_none_or(|(_, next)| d < next) {
            nearest[1] = Some((k, d));
        }
    }
    nearest
}

/// A person of `members`: the representative is the face nearest their centre, and the exemplars
/// start from it and add, each time, the member farthest from those chosen (farthest-point
/// sampling: spread across the person, not bunched at its centre).
fn person(faces: &[(usize, usize, &[f32])], members: &[usize], exemplars: usize) -> Person {
    let centre = centre(faces, members);
    let closest = members
        .iter()
        .copied()
        .max_by(|&a, &b| dot(faces[a].2, &centre).total_cmp(&dot(faces[b].2, &centre)).then(b.cmp(&a)))
        .expect("a person has a face");
    let mut chosen = vec![closest];
    while chosen.len() < exemplars.min(members.len()) {
        let nearest_chosen =
            |i: usize| chosen.iter().map(|&c| 1.0 - dot(faces[i].2, faces[c].2)).fold(f32::INFINITY, f32::min);
        let farthest = members
            .iter()
            .copied()
            .filter(|i| !chosen.contains(i))
            .max_by(|&a, &b| nearest_chosen(a).total_cmp(&nearest_chosen(b)).then(b.cmp(&a)))
            .expect("a member is left");
        chosen.push(farthest);
    }
    let at = |i: usize| (faces[i].0, faces[i].1);
    Person {
        faces: members.iter().map(|&i| at(i)).collect(),
        representative: at(closest),
        exemplars: chosen.into_iter().map(at).collect(),
        known: None,
        maybe: None,
    }
}

/// The sum of `members`' embeddings: their centre's direction.
fn centre(faces: &[(usize, usize, &[f32])], members: &[usize]) -> Vec<f32> {
    let mut centre = vec![0.0f32; faces[members[0]].2.len()];
    for &i in members {
        centre.iter_mut().zip(faces[i].2).for_each(|(c, x)| *c += x);
    }
    centre
}

fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = dot(&v, &v).sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Eight sums at a time, so that the compiler can keep them in SIMD lanes (a single running sum
/// it must add in order).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    let mut sums = [0f32; 8];
    for (x, y) in a8.zip(b8) {
        for k in 0..8 {
            sums[k] += x[k] * y[k];
        }
    }
    sums.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DBSCAN's rules with no known people (suggestions and exemplars aside).
    fn rules(max_distance: f32, min_faces: usize) -> Rules {
        Rules {
            max_distance,
            min_faces,
            margin: max_distance / 10.0,
            suggest_distance: max_distance * 1.5,
            exemplars: 5,
        }
    }

    fn plain(faces: &[(usize, usize, &[f32])], max_distance: f32, min_faces: usize) -> Vec<Person> {
        people(faces, &[], &rules(max_distance, min_faces)).people
    }

    fn unit(angle_degrees: f32) -> Vec<f32> {
        let a = angle_degrees.to_radians();
        vec![a.cos(), a.sin()]
    }

    #[test]
    fn close_faces_are_one_person_and_a_lone_face_is_no_one() {
        // Cosine distance 1 - cos(angle): 20 degrees is 0.06, 90 is 1.
        let vectors = [unit(0.0), unit(90.0), unit(20.0), unit(95.0), unit(200.0), unit(10.0)];
        let faces: Vec<(usize, usize, &[f32])> =
            vectors.iter().enumerate().map(|(i, v)| (i / 2, i % 2, &v[..])).collect();
        let found = plain(&faces, 0.5, 2);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].faces, [(0, 0), (1, 0), (2, 1)], "largest first");
        assert_eq!(found[0].representative, (2, 1), "10 degrees is the centre of 0, 20 and 10");
        assert_eq!(found[1].faces, [(0, 1), (1, 1)]);
        assert!(found.iter().all(|p| !p.faces.contains(&(2, 0))), "the face at 200 degrees is no one's");
    }

    #[test]
    fn min_faces_of_one_makes_every_face_someone() {
        let vectors = [unit(0.0), unit(120.0)];
        let faces: Vec<(usize, usize, &[f32])> = vectors.iter().enumerate().map(|(i, v)| (i, 0, &v[..])).collect();
        assert_eq!(plain(&faces, 0.5, 1).len(), 2);
        assert!(plain(&faces, 0.5, 2).is_empty());
    }

    /// `(photo, face, embedding)` for each `(photo, angle)`, the faces of a photo numbered in order.
    fn at(faces: &[(usize, f32)]) -> Vec<(usize, usize, Vec<f32>)> {
        let mut seen = std::collections::HashMap::new();
        faces
            .iter()
            .map(|&(photo, angle)| {
                let face = seen.entry(photo).or_insert(0);
                *face += 1;
                (photo, *face - 1, unit(angle))
            })
            .collect()
    }

    fn grouped(faces: &[(usize, usize, Vec<f32>)], max_distance: f32) -> Vec<Person> {
        let faces: Vec<(usize, usize, &[f32])> = faces.iter().map(|(p, f, v)| (*p, *f, &v[..])).collect();
        plain(&faces, max_distance, 2)
    }

    /// 1 - cos(10 degrees) is 0.0152: faces link up to about 10 degrees apart.
    const TEN_DEGREES: f32 = 0.0155;

    #[test]
    fn two_faces_of_one_photo_are_never_one_person() {
        // Photo 0 shows two faces close together, photo 1 one near both.
        let faces = at(&[(0, 0.0), (0, 4.0), (1, 1.0)]);
        let found = grouped(&faces, TEN_DEGREES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].faces, [(0, 0), (1, 0)], "the face farther from the centre leaves: {found:?}");
        // Without photo 1, the two faces of photo 0 are no one's: neither has a neighbour left.
        assert!(grouped(&faces[..2], TEN_DEGREES).is_empty());
    }

    #[test]
    fn a_face_that_leaves_may_start_a_person_of_its_own() {
        // Photos 0 and 1 each show two people, A near 0 degrees and B near 6: DBSCAN chains them.
        let faces = at(&[(0, 0.0), (0, 6.0), (1, 1.0), (1, 7.0), (2, 0.5)]);
        let found = grouped(&faces, TEN_DEGREES);
        let people: Vec<_> = found.iter().map(|p| p.faces.clone()).collect();
        assert_eq!(people, [vec![(0, 0), (1, 0), (2, 0)], vec![(0, 1), (1, 1)]], "{found:?}");
    }

    #[test]
    fn where_a_face_kept_out_was_the_bridge_its_parts_are_two_people() {
        // One part near 0-8 degrees (photo 1 among them at 5), another at 26 and 30, and photo 1's
        // second face at 17 the only link between them (9 degrees from 8 and from 26). DBSCAN
        // chains all ten; photo 1's faces cannot be one person, so the parts come apart: the
        // nearest links join first, the first part holds photo 1 by then, and the bridge joins
        // the second, the one within its reach that lacks its photo.
        let faces = at(&[
            (2, 0.0),
            (3, 2.0),
            (4, 4.0),
            (1, 5.0),
            (5, 6.0),
            (6, 7.0),
            (7, 8.0),
            (1, 17.0),
            (8, 26.0),
            (9, 30.0),
        ]);
        let everything = grouped(&faces, TEN_DEGREES);
        assert_eq!(everything.len(), 2, "{everything:?}");
        assert_eq!(everything[0].faces, [(2, 0), (3, 0), (4, 0), (1, 0), (5, 0), (6, 0), (7, 0)]);
        assert_eq!(everything[1].faces, [(1, 1), (8, 0), (9, 0)]);
        // The same faces with the bridge in a photo of its own: one person, as DBSCAN has it.
        let mut own = faces.clone();
        own[7].0 = 10;
        assert_eq!(grouped(&own, TEN_DEGREES).len(), 1);
        // Without the second part, the bridge reaches only the first, which holds its photo: no
        // one's, and the first part is as before.
        let alone = grouped(&faces[..8], TEN_DEGREES);
        assert_eq!(alone.len(), 1, "{alone:?}");
        assert_eq!(alone[0].faces, everything[0].faces);
    }

    fn known(angles: &[f32]) -> Vec<Vec<f32>> {
        angles.iter().map(|&a| unit(a)).collect()
    }

    #[test]
    fn faces_near_a_known_persons_exemplars_are_that_person() {
        // A known near 0 degrees, B near 90; faces at 3 and 88 in two photos, one at 45 (no one).
        let (a, b) = (known(&[0.0, 5.0]), known(&[90.0]));
        let known = [Known { exemplars: a.iter().map(|v| &v[..]).collect() }, Known { exemplars: vec![&b[0][..]] }];
        let faces = at(&[(0, 3.0), (1, 88.0), (1, 45.0), (2, 2.0)]);
        let faces: Vec<(usize, usize, &[f32])> = faces.iter().map(|(p, f, v)| (*p, *f, &v[..])).collect();
        let found = people(&faces, &known, &rules(TEN_DEGREES, 2));
        assert_eq!(found.people.len(), 2, "{found:?}");
        assert_eq!((found.people[0].known, &found.people[0].faces[..]), (Some(0), &[(0, 0), (2, 0)][..]));
        assert_eq!((found.people[1].known, &found.people[1].faces[..]), (Some(1), &[(1, 0)][..]), "one face is enough");
        assert!(found.unsure.is_empty());
    }

    #[test]
    fn a_face_between_two_known_people_is_neithers_and_said() {
        // A at 0, B at 8: a face at 4 is as near to both (margin: a tenth of the distance).
        let (a, b) = (known(&[0.0]), known(&[8.0]));
        let known = [Known { exemplars: vec![&a[0][..]] }, Known { exemplars: vec![&b[0][..]] }];
        let faces = at(&[(0, 4.0)]);
        let faces: Vec<(usize, usize, &[f32])> = faces.iter().map(|(p, f, v)| (*p, *f, &v[..])).collect();
        let found = people(&faces, &known, &rules(TEN_DEGREES, 2));
        assert!(found.people.is_empty(), "{found:?}");
        assert_eq!(found.unsure, [((0, 0), [0, 1])]);
    }

    #[test]
    fn one_photo_gives_a_known_person_its_nearest_face_and_the_other_goes_on() {
        // Photo 0 shows two faces near A (1 and 6 degrees); photos 1 and 2 one face near 7 each.
        let a = known(&[0.0]);
        let known = [Known { exemplars: vec![&a[0][..]] }];
        let faces = at(&[(0, 1.0), (0, 6.0), (1, 7.5), (2, 8.0)]);
        let faces: Vec<(usize, usize, &[f32])> = faces.iter().map(|(p, f, v)| (*p, *f, &v[..])).collect();
        let found = people(&faces, &known, &rules(TEN_DEGREES, 2));
        assert_eq!(found.people[0].faces, [(0, 0), (1, 0), (2, 0)], "{found:?}");
        assert_eq!(found.people[0].known, Some(0));
        // The farther face of photo 0 went on as unknown, and is no one's: its neighbours are A's.
        assert!(found.people.iter().all(|p| !p.faces.contains(&(0, 1))), "{found:?}");
    }

    #[test]
    fn a_new_person_near_a_known_one_is_a_suggestion_and_exemplars_spread() {
        // A known at 0; a new person at 14-22 degrees, farther than the reach (10), within 1.5 x.
        let a = known(&[0.0]);
        let known = [Known { exemplars: vec![&a[0][..]] }];
        let faces = at(&[(0, 14.0), (1, 16.0), (2, 18.0), (3, 20.0), (4, 22.0), (5, 17.0), (6, 19.0)]);
        let faces: Vec<(usize, usize, &[f32])> = faces.iter().map(|(p, f, v)| (*p, *f, &v[..])).collect();
        let mut near = rules(TEN_DEGREES, 2);
        near.suggest_distance = 1.0 - 20f32.to_radians().cos();
        near.exemplars = 3;
        let found = people(&faces, &known, &near);
        assert_eq!(found.people.len(), 1, "{found:?}");
        let person = &found.people[0];
        assert_eq!(person.known, None);
        let (to, distance) = person.maybe.expect("a suggestion");
        assert!(to == 0 && (distance - (1.0 - 18f32.to_radians().cos())).abs() < 1e-3, "{distance}");
        // The representative (18 degrees, the centre), then the two ends.
        assert_eq!(person.exemplars, [(2, 0), (0, 0), (4, 0)]);
        near.suggest_distance = 1.0 - 15f32.to_radians().cos();
        assert_eq!(people(&faces, &known, &near).people[0].maybe, None, "beyond the suggestion's reach");
    }

    /// The matrix product gives each vector's distance to each person's nearest exemplar, across
    /// blocks (more vectors than BLOCK) and people of different sizes, as a dot product a pair does.
    #[test]
    fn known_distances_are_the_nearest_exemplars_across_blocks() {
        let mut seed = 7u32;
        let mut random_unit = |dim: usize| {
            let v: Vec<f32> = (0..dim)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
                })
                .collect();
            normalised(v)
        };
        let vectors: Vec<Vec<f32>> = (0..BLOCK + 44).map(|_| random_unit(21)).collect();
        let exemplars: Vec<Vec<Vec<f32>>> =
            [1, 3, 2, 5].iter().map(|&n| (0..n).map(|_| random_unit(21)).collect()).collect();
        let known: Vec<Known> =
            exemplars.iter().map(|e| Known { exemplars: e.iter().map(Vec::as_slice).collect() }).collect();
        let slices: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
        let distances = known_distances(&slices, &known);
        assert_eq!(distances.len(), vectors.len());
        for (v, row) in vectors.iter().zip(&distances) {
            assert_eq!(row.len(), known.len());
            for (person, &d) in known.iter().zip(row) {
                let nearest = person.exemplars.iter().map(|e| 1.0 - dot(v, e)).fold(f32::INFINITY, f32::min);
                assert!((d - nearest).abs() < 1e-5, "{d} against {nearest}");
            }
        }
        assert_eq!(known_distances(&slices, &[]), vec![Vec::<f32>::new(); vectors.len()]);
        assert_eq!(two_nearest(&[0.3, 0.1, 0.1, 0.2]), [Some((1, 0.1)), Some((2, 0.1))]);
        assert_eq!(two_nearest(&[0.4]), [Some((0, 0.4)), None]);
    }
}
