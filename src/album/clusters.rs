//! The people's clustering, bounded in time and memory: DBSCAN over the faces' cosine distances,
//! labelled exactly as scikit-learn's `DBSCAN(eps, min_samples, metric="cosine")` labels them, and
//! then the cannot-link (one photo never shows a person twice) on the clusters that break it.
//!
//! The distances come from block matrix products (a block of rows against the faces at a time,
//! ndarray's at the machine's SIMD width, as the known people's do), streamed: no neighbour list
//! is held. Three passes give DBSCAN: each face's neighbour count (its core status), the core faces'
//! links (a union-find: the clusters), and each other face's cluster. Clusters that hold a photo
//! twice are split by one more pass and one sort, never clustered again: their core faces are
//! joined nearest pair first, each face to its nearest face of each other photo within reach, two
//! parts only where they share no photo (single linkage under the cannot-link); their border faces
//! then join the part of their nearest core face that lacks their photo, nearest first; a part of
//! fewer than `min_faces` faces is no one's. Time: the passes are O(n^2 d) multiply-adds, the sort
//! O(e log e) in the e <= n x photos links kept; memory O(n d + e), with a block of 256 rows'
//! products at a time.

use ndarray::{Array2, ArrayView2, Axis, s};

/// The rows of one product: 256 x 5,000 faces (100 photos of 50) is 5 MB of products.
const BLOCK: usize = 256;

/// The caller's stop came while clustering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

/// How often the long loops look at the caller's stop: every this many links.
const LINKS_BETWEEN_STOPS: usize = 1 << 16;

/// The faces being clustered: their photos and their unit embeddings as the rows of one matrix.
pub(super) struct Faces {
    photos: Vec<usize>,
    matrix: Array2<f32>,
}

impl Faces {
    /// `vectors` of one dim (unit length), each with its `photos` entry.
    pub(super) fn new(photos: Vec<usize>, vectors: &[&[f32]]) -> Faces {
        let dim = vectors.first().map_or(0, |v| v.len());
        let matrix = Array2::from_shape_vec((vectors.len(), dim), vectors.concat()).expect("every face has one dim");
        Faces { photos, matrix }
    }

    fn len(&self) -> usize {
        self.photos.len()
    }
}

/// The faces of `subset` (indices into `faces`) as a matrix of their own, in that order.
fn rows_of(faces: &Faces, subset: &[usize]) -> Array2<f32> {
    faces.matrix.select(Axis(0), subset)
}

/// Every pair `(row, column)` of `rows` x `columns` (matrices of unit rows) whose cosine distance is
/// at most `max_distance`, as positions in them, with the distance. With `upper`, `rows` and
/// `columns` are the same faces and only pairs with `column > row` are given. A block of rows at
/// a time; `stop` is asked before each block.
fn pairs_within(
    rows: ArrayView2<f32>,
    columns: ArrayView2<f32>,
    upper: bool,
    max_distance: f32,
    stop: &dyn Fn() -> bool,
    mut each: impl FnMut(usize, usize, f32),
) -> Result<(), Stopped> {
    for first in (0..rows.nrows()).step_by(BLOCK) {
        if stop() {
            return Err(Stopped);
        }
        let last = (first + BLOCK).min(rows.nrows());
        // Above the diagonal only: the columns from the block's first row on.
        let from = if upper { first } else { 0 };
        let products = rows.slice(s![first..last, ..]).dot(&columns.slice(s![from.., ..]).t());
        for (r, similarities) in products.rows().into_iter().enumerate() {
            let row = first + r;
            for (c, &similarity) in similarities.iter().enumerate() {
                let column = from + c;
                let distance = 1.0 - similarity;
                if (!upper || column > row) && distance <= max_distance {
                    each(row, column, distance);
                }
            }
        }
    }
    Ok(())
}

/// A union-find over `0..n`, each set's root the smallest index in it.
struct Sets {
    parent: Vec<usize>,
}

impl Sets {
    fn new(n: usize) -> Sets {
        Sets { parent: (0..n).collect() }
    }

    fn root(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    /// Joins the sets of `a` and `b`; returns the root kept and the root joined to it, if two.
    fn join(&mut self, a: usize, b: usize) -> Option<(usize, usize)> {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra == rb {
            return None;
        }
        let (kept, joined) = (ra.min(rb), ra.max(rb));
        self.parent[joined] = kept;
        Some((kept, joined))
    }
}

/// DBSCAN's clusters of `faces` in scikit-learn's order (by their first core face), each face's
/// index ascending, then the cannot-link on the clusters that hold a photo twice (the module's
/// comment). Faces in no group are no one's.
pub(super) fn clusters(
    faces: &Faces,
    max_distance: f32,
    min_faces: usize,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Vec<usize>>, Stopped> {
    let mut groups = Vec::new();
    for cluster in dbscan(faces, max_distance, min_faces, stop)? {
        if photo_twice(faces, &cluster.members) {
            groups.extend(apart(faces, &cluster, max_distance, min_faces, stop)?);
        } else {
            groups.push(cluster.members);
        }
    }
    Ok(groups)
}

/// One of DBSCAN's clusters: its faces ascending, and which of them are core faces.
#[derive(Debug, PartialEq)]
pub(super) struct Cluster {
    pub members: Vec<usize>,
    pub core: Vec<bool>,
}

/// DBSCAN over `faces`, labelled as scikit-learn labels them. scikit-learn expands a cluster
/// from each core face not yet labelled, in index order, and labels every face it reaches: the
/// core faces linked through each other (within `max_distance`) and the faces within reach of
/// them. So its clusters are the linked groups of core faces, numbered by their first core face,
/// and a face that is not core belongs to the first of those clusters (by that number) holding a
/// core face within its reach, or to none. That is what the three passes compute.
pub(super) fn dbscan(
    faces: &Faces,
    max_distance: f32,
    min_faces: usize,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Cluster>, Stopped> {
    let n = faces.len();
    // 1. Each face's neighbours, itself included.
    let mut count = vec![1usize; n];
    let all = faces.matrix.view();
    pairs_within(all, all, true, max_distance, stop, |i, j, _| {
        count[i] += 1;
        count[j] += 1;
    })?;
    let core: Vec<usize> = (0..n).filter(|&i| count[i] >= min_faces).collect();
    // 2. The core faces' links.
    let core_rows = rows_of(faces, &core);
    let mut sets = Sets::new(core.len());
    pairs_within(core_rows.view(), core_rows.view(), true, max_distance, stop, |a, b, _| {
        sets.join(a, b);
    })?;
    // Clusters numbered by their first core face: with `core` ascending, roots (the least
    // position in each set) come in that order.
    let mut cluster_of = vec![usize::MAX; n];
    let mut root_cluster = vec![usize::MAX; core.len()];
    let mut clusters = 0;
    for position in 0..core.len() {
        let root = sets.root(position);
        if root_cluster[root] == usize::MAX {
            root_cluster[root] = clusters;
            clusters += 1;
        }
        cluster_of[core[position]] = root_cluster[root];
    }
    // 3. Each other face joins the first cluster with a core face in reach.
    let others: Vec<usize> = (0..n).filter(|&i| count[i] < min_faces).collect();
    if !others.is_empty() && !core.is_empty() {
        let other_rows = rows_of(faces, &others);
        let mut first = vec![usize::MAX; others.len()];
        pairs_within(other_rows.view(), core_rows.view(), false, max_distance, stop, |o, c, _| {
            first[o] = first[o].min(cluster_of[core[c]]);
        })?;
        for (position, &face) in others.iter().enumerate() {
            cluster_of[face] = first[position];
        }
    }
    let mut found: Vec<Cluster> = (0..clusters).map(|_| Cluster { members: Vec::new(), core: Vec::new() }).collect();
    for face in 0..n {
        if let Some(cluster) = found.get_mut(cluster_of[face]) {
            cluster.members.push(face);
            cluster.core.push(count[face] >= min_faces);
        }
    }
    Ok(found)
}

/// Whether two of `members` are faces of one photo.
fn photo_twice(faces: &Faces, members: &[usize]) -> bool {
    let mut photos: Vec<usize> = members.iter().map(|&i| faces.photos[i]).collect();
    photos.sort_unstable();
    photos.windows(2).any(|pair| pair[0] == pair[1])
}

/// A set of photos, as bits.
#[derive(Clone)]
struct PhotoSet(Vec<u64>);

impl PhotoSet {
    fn of(photo: usize, words: usize) -> PhotoSet {
        let mut bits = vec![0u64; words];
        bits[photo / 64] |= 1 << (photo % 64);
        PhotoSet(bits)
    }

    fn has(&self, photo: usize) -> bool {
        self.0[photo / 64] & (1 << (photo % 64)) != 0
    }

    fn meets(&self, other: &PhotoSet) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a & b != 0)
    }

    fn add(&mut self, other: &PhotoSet) {
        self.0.iter_mut().zip(&other.0).for_each(|(a, b)| *a |= b);
    }
}

/// A cluster that holds a photo twice, split by the cannot-link (the module's comment): the
/// parts of at least `min_faces` faces, each ascending.
fn apart(
    faces: &Faces,
    cluster: &Cluster,
    max_distance: f32,
    min_faces: usize,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Vec<usize>>, Stopped> {
    let members = &cluster.members;
    let core: Vec<usize> = (0..members.len()).filter(|&m| cluster.core[m]).collect();
    let photo = |m: usize| faces.photos[members[m]];
    let words = members.iter().map(|&i| faces.photos[i]).max().unwrap_or(0) / 64 + 1;
    let nearest = nearest_cores(faces, members, &core, words, max_distance, stop)?;
    let (mut sets, mut photos) = join_cores(&core, &nearest, |m| PhotoSet::of(photo(m), words), stop)?;
    // The border faces, nearest first, each into the part of its nearest core face that lacks
    // its photo.
    let mut part_of: Vec<Option<usize>> = vec![None; members.len()];
    for (position, &m) in core.iter().enumerate() {
        part_of[m] = Some(sets.root(position));
    }
    let mut border: Vec<usize> = (0..members.len()).filter(|&m| !cluster.core[m]).collect();
    border.sort_by(|&a, &b| {
        let first = |m: usize| nearest[m].first().map_or(f32::INFINITY, |n| n.0);
        first(a).total_cmp(&first(b)).then(a.cmp(&b))
    });
    for m in border {
        let part = nearest[m].iter().map(|&(_, c)| sets.root(c)).find(|&root| !photos[root].has(photo(m)));
        if let Some(root) = part {
            photos[root].add(&PhotoSet::of(photo(m), words));
            part_of[m] = Some(root);
        }
    }
    let mut parts: Vec<Vec<usize>> = vec![Vec::new(); core.len()];
    for (m, part) in part_of.into_iter().enumerate() {
        if let Some(root) = part {
            parts[root].push(members[m]);
        }
    }
    Ok(parts.into_iter().filter(|part| part.len() >= min_faces.max(1)).collect())
}

/// Each member's nearest core face of each other photo within reach, as (distance, core
/// position), nearest first; `words` is the photo sets' length in 64-bit words.
fn nearest_cores(
    faces: &Faces,
    members: &[usize],
    core: &[usize],
    words: usize,
    max_distance: f32,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Vec<(f32, usize)>>, Stopped> {
    let photo = |m: usize| faces.photos[members[m]];
    // A scratch slot per photo, cleared after each row.
    let member_rows = rows_of(faces, members);
    let core_rows = member_rows.select(Axis(0), core);
    let mut nearest: Vec<Vec<(f32, usize)>> = vec![Vec::new(); members.len()];
    let mut slot: Vec<Option<(f32, usize)>> = vec![None; words * 64];
    let mut touched: Vec<usize> = Vec::new();
    let mut row_now = usize::MAX;
    let mut flush = |row: usize, slot: &mut Vec<Option<(f32, usize)>>, touched: &mut Vec<usize>| {
        if row == usize::MAX {
            return;
        }
        let mut kept: Vec<(f32, usize)> = touched.drain(..).filter_map(|p| slot[p].take()).collect();
        kept.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        nearest[row] = kept;
    };
    pairs_within(member_rows.view(), core_rows.view(), false, max_distance, stop, |m, c, distance| {
        if m != row_now {
            flush(row_now, &mut slot, &mut touched);
            row_now = m;
        }
        let other = photo(core[c]);
        if other == photo(m) {
            return;
        }
        match &mut slot[other] {
            Some(best) if (best.0, best.1) <= (distance, c) => {}
            Some(best) => *best = (distance, c),
            empty => {
                *empty = Some((distance, c));
                touched.push(other);
            }
        }
    })?;
    flush(row_now, &mut slot, &mut touched);
    Ok(nearest)
}

/// The core faces joined nearest link first, where their parts share no photo: the parts, and
/// each part's photos at its root.
fn join_cores(
    core: &[usize],
    nearest: &[Vec<(f32, usize)>],
    photo_of: impl Fn(usize) -> PhotoSet,
    stop: &dyn Fn() -> bool,
) -> Result<(Sets, Vec<PhotoSet>), Stopped> {
    let mut links: Vec<(f32, usize, usize)> = Vec::new();
    for (position, &m) in core.iter().enumerate() {
        for &(distance, c) in &nearest[m] {
            links.push((distance, position.min(c), position.max(c)));
        }
    }
    links.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    links.dedup_by(|a, b| (a.1, a.2) == (b.1, b.2));
    let mut sets = Sets::new(core.len());
    let mut photos: Vec<PhotoSet> = core.iter().map(|&m| photo_of(m)).collect();
    for (done, &(_, a, b)) in links.iter().enumerate() {
        if done % LINKS_BETWEEN_STOPS == 0 && stop() {
            return Err(Stopped);
        }
        let (ra, rb) = (sets.root(a), sets.root(b));
        if ra != rb && !photos[ra].meets(&photos[rb]) {
            let (kept, joined) = sets.join(ra, rb).expect("two sets");
            let moved = std::mem::replace(&mut photos[joined], PhotoSet(Vec::new()));
            photos[kept].add(&moved);
        }
    }
    Ok((sets, photos))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DBSCAN as scikit-learn runs it, from every neighbour list (what `clusters` replaced): the
    /// reference the passes are held to.
    fn dbscan_by_lists(vectors: &[Vec<f32>], max_distance: f32, min_faces: usize) -> Vec<Vec<usize>> {
        let n = vectors.len();
        // The distances from one product of the whole matrix: the same float sums as the blocks'.
        let matrix = faces_of(vectors, (0..n).collect()).matrix;
        let products = matrix.dot(&matrix.t());
        let distance = |i: usize, j: usize| 1.0 - products[[i, j]];
        let neighbours: Vec<Vec<usize>> =
            (0..n).map(|i| (0..n).filter(|&j| j == i || distance(i, j) <= max_distance).collect()).collect();
        let core: Vec<bool> = neighbours.iter().map(|near| near.len() >= min_faces).collect();
        let mut labels: Vec<Option<usize>> = vec![None; n];
        let mut clusters = 0;
        for start in 0..n {
            if labels[start].is_some() || !core[start] {
                continue;
            }
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
        (0..clusters).map(|c| (0..n).filter(|&i| labels[i] == Some(c)).collect()).collect()
    }

    /// `count` unit vectors of `dim` values near `centres` random directions (each a vector's
    /// centre at random, `spread` the noise's scale), seeded.
    fn clumps(seed: u64, count: usize, centres: usize, dim: usize, spread: f32) -> Vec<Vec<f32>> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let unit = |v: Vec<f32>| {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
        };
        let middles: Vec<Vec<f32>> = (0..centres).map(|_| unit((0..dim).map(|_| rng.f32() - 0.5).collect())).collect();
        (0..count)
            .map(|_| {
                let middle = &middles[rng.usize(..centres)];
                unit(middle.iter().map(|x| x + spread * (rng.f32() - 0.5)).collect())
            })
            .collect()
    }

    fn faces_of(vectors: &[Vec<f32>], photos: Vec<usize>) -> Faces {
        Faces::new(photos, &vectors.iter().map(Vec::as_slice).collect::<Vec<_>>())
    }

    fn never() -> bool {
        false
    }

    /// The passes label as the neighbour lists do, across blocks (more faces than BLOCK), with
    /// faces at the reach of two clusters (the noise is wide enough for clusters to touch), at
    /// several `min_faces`.
    #[test]
    fn the_passes_are_scikit_learns_dbscan() {
        let (mut clusters_seen, mut noise_seen) = (0, 0);
        for (seed, count, centres, spread) in [(1, 40, 3, 0.9), (2, 300, 12, 0.7), (3, 600, 40, 0.6), (4, 90, 2, 2.0)] {
            let vectors = clumps(seed, count, centres, 8, spread);
            let faces = faces_of(&vectors, (0..count).collect());
            for (max_distance, min_faces) in [(0.05, 2), (0.1, 3), (0.2, 5), (0.02, 1)] {
                let expected = dbscan_by_lists(&vectors, max_distance, min_faces);
                let found: Vec<Vec<usize>> = dbscan(&faces, max_distance, min_faces, &never)
                    .unwrap()
                    .into_iter()
                    .map(|cluster| cluster.members)
                    .collect();
                assert_eq!(found, expected, "seed {seed}, {max_distance} {min_faces}");
                clusters_seen += expected.len();
                noise_seen += count - expected.iter().map(Vec::len).sum::<usize>();
                // One face a photo: the cannot-link has nothing to split.
                assert_eq!(clusters(&faces, max_distance, min_faces, &never).unwrap(), expected);
            }
        }
        assert!(clusters_seen >= 50 && noise_seen >= 50, "{clusters_seen} clusters, {noise_seen} noise faces");
    }

    /// Twelve people in each of 30 photos, some of them alike enough that DBSCAN chains them:
    /// the split gives each person's faces back, one per photo, without clustering again.
    #[test]
    fn chained_people_come_apart_one_face_a_photo() {
        let (people, photos, dim) = (12, 30, 16);
        let mut rng = fastrand::Rng::with_seed(9);
        let unit = |v: Vec<f32>| {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
        };
        // People along one arc, 6 degrees apart: neighbours within the 0.0155 reach (10 degrees)
        // chain, the faces of one person lie within 1.5 degrees of their own.
        let person = |p: usize, rng: &mut fastrand::Rng| {
            let angle = (p as f32 * 6.0 + 3.0 * (rng.f32() - 0.5)).to_radians();
            let mut v = vec![0.0; dim];
            v[0] = angle.cos();
            v[1] = angle.sin();
            v[2 + p % (dim - 2)] = 0.01 * rng.f32();
            unit(v)
        };
        let (mut vectors, mut photo_of, mut truth) = (Vec::new(), Vec::new(), Vec::new());
        for photo in 0..photos {
            for p in 0..people {
                vectors.push(person(p, &mut rng));
                photo_of.push(photo);
                truth.push(p);
            }
        }
        let faces = faces_of(&vectors, photo_of.clone());
        let chained = dbscan(&faces, 0.0155, 2, &never).unwrap();
        assert_eq!(chained.len(), 1, "DBSCAN chains them all");
        let found = clusters(&faces, 0.0155, 2, &never).unwrap();
        for group in &found {
            let mut seen: Vec<usize> = group.iter().map(|&i| photo_of[i]).collect();
            seen.sort_unstable();
            assert!(seen.windows(2).all(|w| w[0] != w[1]), "a photo twice in {group:?}");
        }
        // Pairwise precision and recall against the truth.
        let mut group_of = vec![usize::MAX; vectors.len()];
        for (g, group) in found.iter().enumerate() {
            group.iter().for_each(|&i| group_of[i] = g);
        }
        let (mut same, mut together, mut right) = (0, 0, 0);
        for i in 0..vectors.len() {
            for j in i + 1..vectors.len() {
                let with = group_of[i] != usize::MAX && group_of[i] == group_of[j];
                same += usize::from(truth[i] == truth[j]);
                together += usize::from(with);
                right += usize::from(with && truth[i] == truth[j]);
            }
        }
        let (precision, recall) = (right as f64 / together as f64, right as f64 / same as f64);
        assert!(precision >= 0.99 && recall >= 0.9, "precision {precision:.3}, recall {recall:.3}");
    }

    #[test]
    fn a_stop_stops_and_no_faces_make_no_clusters() {
        let vectors = clumps(5, 50, 2, 4, 0.3);
        let faces = faces_of(&vectors, (0..50).collect());
        assert_eq!(clusters(&faces, 0.1, 2, &|| true), Err(Stopped));
        let none = Faces::new(Vec::new(), &[]);
        assert_eq!(clusters(&none, 0.1, 2, &never), Ok(Vec::new()));
    }
}
