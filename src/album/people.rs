//! People: the faces of a request grouped by DBSCAN over their cosine distances, as the album app
//! (`DBSCAN(eps, min_samples, metric="cosine")`) and Immich group them, in scikit-learn's order, so
//! that a face between two people joins the one scikit-learn gives it.

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
pub fn people(faces: &[(usize, usize, &[f32])], max_distance: f32, min_faces: usize) -> Vec<Person> {
    let n = faces.len();
    let distance = |i: usize, j: usize| 1.0 - dot(faces[i].2, faces[j].2);
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
    let mut people: Vec<Person> = (0..clusters)
        .map(|cluster| {
            let members: Vec<usize> = (0..n).filter(|&i| labels[i] == Some(cluster)).collect();
            let dim = faces[members[0]].2.len();
            let mut centre = vec![0.0f32; dim];
            for &i in &members {
                centre.iter_mut().zip(faces[i].2).for_each(|(c, x)| *c += x);
            }
            let closest = members
                .iter()
                .copied()
                .max_by(|&a, &b| dot(faces[a].2, &centre).total_cmp(&dot(faces[b].2, &centre)).then(b.cmp(&a)))
                .expect("a person has a face");
            Person {
                faces: members.iter().map(|&i| (faces[i].0, faces[i].1)).collect(),
                representative: (faces[closest].0, faces[closest].1),
            }
        })
        .collect();
    // Stable: equal sizes keep their first face's order.
    people.sort_by_key(|person| std::cmp::Reverse(person.faces.len()));
    people
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
}
