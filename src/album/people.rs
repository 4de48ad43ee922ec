//! People: the faces of a request grouped by DBSCAN over their cosine distances, as the album app
//! (`DBSCAN(eps, min_samples, metric="cosine")`) and Immich group them, in scikit-learn's order, so
//! that a face between two people joins the one scikit-learn gives it; and never two faces of one
//! photo in one person (a cannot-link: one photo cannot show a person twice).

/// One person: their faces, as `(photo index, face index)`, in input order, and the one closest to
/// their centre.
#[derive(Debug, Clone, PartialEq)]
pub struct Person {
    pub faces: Vec<(usize, usize)>,
    pub representative: (usize, usize),
}

/// The people among `faces` (each `(photo, face, unit embedding)`): a face with at least
/// `min_faces` faces (itself included) within `max_distance` is a core face; a person is the core
/// faces linked through each other and the faces within reach of them. Faces reached by no core
/// face belong to no one. Largest first; equal sizes in the order of their first face.
///
/// Where a person would hold two faces of one photo, the one of them farther from the person's
/// centre leaves it, and the rest is grouped again on its own: where the face that left was the
/// bridge between two parts, those parts are two people now (or one, and faces of no one). The
/// faces that left are grouped the same way among themselves: each becomes one of a new person
/// if it has neighbours of its own there, or no one's.
pub fn people(faces: &[(usize, usize, &[f32])], max_distance: f32, min_faces: usize) -> Vec<Person> {
    let everyone: Vec<usize> = (0..faces.len()).collect();
    let mut people: Vec<Person> =
        apart(faces, &everyone, max_distance, min_faces).into_iter().map(|members| person(faces, &members)).collect();
    // Stable: equal sizes keep their first face's order.
    people.sort_by_key(|person| (std::cmp::Reverse(person.faces.len()), person.faces[0]));
    people
}

/// The groups of `members` (indices into `faces`) that hold no photo twice.
fn apart(faces: &[(usize, usize, &[f32])], members: &[usize], max_distance: f32, min_faces: usize) -> Vec<Vec<usize>> {
    let (mut kept, mut left) = (Vec::new(), Vec::new());
    let mut todo = dbscan(faces, members, max_distance, min_faces);
    while let Some(group) = todo.pop() {
        match farthest_twice_seen(faces, &group) {
            Some(leaver) => {
                left.push(leaver);
                let rest: Vec<usize> = group.into_iter().filter(|&i| i != leaver).collect();
                todo.extend(dbscan(faces, &rest, max_distance, min_faces));
            }
            None => kept.push(group),
        }
    }
    // Fewer than `members`: each group that lost a face kept at least one.
    if !left.is_empty() {
        left.sort_unstable();
        kept.extend(apart(faces, &left, max_distance, min_faces));
    }
    kept
}

/// Of the faces of `group` whose photo shows another of them, the farthest from its centre.
fn farthest_twice_seen(faces: &[(usize, usize, &[f32])], group: &[usize]) -> Option<usize> {
    let photo_twice = |i: &usize| group.iter().any(|&j| j != *i && faces[j].0 == faces[*i].0);
    let centre = centre(faces, group);
    group
        .iter()
        .copied()
        .filter(photo_twice)
        .min_by(|&a, &b| dot(faces[a].2, &centre).total_cmp(&dot(faces[b].2, &centre)).then(b.cmp(&a)))
}

/// DBSCAN over `members` alone, in scikit-learn's order: each group's indices ascending.
fn dbscan(faces: &[(usize, usize, &[f32])], members: &[usize], max_distance: f32, min_faces: usize) -> Vec<Vec<usize>> {
    let n = members.len();
    let distance = |i: usize, j: usize| 1.0 - dot(faces[members[i]].2, faces[members[j]].2);
    let neighbours: Vec<Vec<usize>> =
        (0..n).map(|i| (0..n).filter(|&j| distance(i, j) <= max_distance).collect()).collect();
    let core: Vec<bool> = neighbours.iter().map(|near| near.len() >= min_faces).collect();
    let mut labels: Vec<Option<usize>> = vec![None; n];
    let mut clusters = 0;
    for start in 0..n {
        if labels[start].is_some() || !core[start] {
            continue;
        }
        // scikit-learn's expansion, step for step: a stack, labelled as popped.
        let mut stack = Vec::new();
        let mut i = start;
        loop {
            if labels[i].is_none() {
                labels[i] = Some(clusters);
                if core[i] {
                    stack.extend(neighbours[i].iter().copied().filter(|&j| labels[j].is_none()));
                }
            }
            match stack.pop() {
                Some(next) => i = next,
                None => break,
            }
        }
        clusters += 1;
    }
    (0..clusters).map(|cluster| (0..n).filter(|&i| labels[i] == Some(cluster)).map(|i| members[i]).collect()).collect()
}

fn person(faces: &[(usize, usize, &[f32])], members: &[usize]) -> Person {
    let centre = centre(faces, members);
    let closest = members
        .iter()
        .copied()
        .max_by(|&a, &b| dot(faces[a].2, &centre).total_cmp(&dot(faces[b].2, &centre)).then(b.cmp(&a)))
        .expect("a person has a face");
    Person {
        faces: members.iter().map(|&i| (faces[i].0, faces[i].1)).collect(),
        representative: (faces[closest].0, faces[closest].1),
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

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let found = people(&faces, 0.5, 2);
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
        assert_eq!(people(&faces, 0.5, 1).len(), 2);
        assert!(people(&faces, 0.5, 2).is_empty());
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
        people(&faces, max_distance, 2)
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
    fn where_the_face_that_leaves_was_the_bridge_its_parts_are_two_people() {
        // One part near 0-8 degrees (photo 1 among them at 5), another at 26 and 30, and photo 1's
        // second face at 17 the only link between them: it is farther from the centre than its
        // photo's other face, so it leaves, and the parts fall apart.
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
        assert_eq!(everything[1].faces, [(8, 0), (9, 0)]);
        assert!(everything.iter().all(|p| !p.faces.contains(&(1, 1))), "the bridge is no one's: {everything:?}");
        // The same faces with the bridge in a photo of its own: one person, as DBSCAN has it.
        let mut own = faces.clone();
        own[7].0 = 10;
        assert_eq!(grouped(&own, TEN_DEGREES).len(), 1);
    }
}
