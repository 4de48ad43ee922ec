//! The best shot of a group (duplicates, a burst) and the album's cover: one documented order
//! (README, "The best shot and the cover"), deterministic, and the reason the winner won.

use std::cmp::Ordering;

/// What the ranking reads of one photo.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Merits {
    pub blurry: bool,
    /// Its faces whose box, before clipping, leaves the photo: a face cut by the edge. `None`
    /// where faces were looked for and the face models failed on it; 0 where none were looked for.
    pub faces_cut: Option<usize>,
    /// The score of CLIPFN_RANK_HEAD, when one is configured.
    pub head: Option<f32>,
    pub sharpness: f64,
    /// Width x height at full size.
    pub pixels: u64,
}

/// The criterion on which a winner beat the runner-up, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NotBlurry,
    FewerFacesCut,
    Head,
    Sharper,
    MorePixels,
    /// Every criterion tied: the first in the request wins.
    First,
}

impl Reason {
    pub const ALL: [Reason; 6] =
        [Reason::NotBlurry, Reason::FewerFacesCut, Reason::Head, Reason::Sharper, Reason::MorePixels, Reason::First];

    /// What the answer's `why` says.
    pub fn code(self) -> &'static str {
        match self {
            Reason::NotBlurry => "not_blurry",
            Reason::FewerFacesCut => "fewer_faces_cut",
            Reason::Head => "head",
            Reason::Sharper => "sharper",
            Reason::MorePixels => "more_pixels",
            Reason::First => "first",
        }
    }
}

/// A group with its best photo.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// Indices, as the grouping gave them.
    pub photos: Vec<usize>,
    pub best: usize,
    pub why: Reason,
}

/// A photo's size class: its pixels by factors of 4 (a factor of 2 on each side). Sharpness is
/// measured at 300 px whatever the photo's size, so it cannot tell a thumbnail from its original
/// (the thumbnail, resampled less, often measures sharper); a copy at half the side or less
/// loses on size before sharpness is compared.
fn size_class(pixels: u64) -> u32 {
    pixels.checked_ilog2().map_or(0, |log2| log2 / 2)
}

/// How `a` compares with `b` (`Less`: `a` is better), and on which criterion they first differ.
/// A total order: an unknown face count ranks after every known one, and so does a missing score.
fn compare(a: &Merits, b: &Merits) -> (Ordering, Reason) {
    let faces = |m: &Merits| (m.faces_cut.is_none(), m.faces_cut.unwrap_or(0));
    let head = |m: &Merits| (m.head.is_none(), -m.head.unwrap_or(0.0));
    let steps = [
        (a.blurry.cmp(&b.blurry), Reason::NotBlurry),
        (faces(a).cmp(&faces(b)), Reason::FewerFacesCut),
        (size_class(b.pixels).cmp(&size_class(a.pixels)), Reason::MorePixels),
        (head(a).0.cmp(&head(b).0).then(head(a).1.total_cmp(&head(b).1)), Reason::Head),
        (b.sharpness.total_cmp(&a.sharpness), Reason::Sharper),
        (b.pixels.cmp(&a.pixels), Reason::MorePixels),
    ];
    steps.into_iter().find(|(order, _)| order.is_ne()).unwrap_or((Ordering::Equal, Reason::First))
}

/// `candidates` best first (ties by index). Every candidate must have merits.
fn order(candidates: &mut [usize], merits: &[Option<Merits>]) {
    let of = |i: usize| merits[i].as_ref().expect("a ranked photo has merits");
    candidates.sort_by(|&a, &b| compare(of(a), of(b)).0.then(a.cmp(&b)));
}

/// Each group (of photos that all have merits) with its best photo and why it beat the second.
pub fn ranked(groups: Vec<Vec<usize>>, merits: &[Option<Merits>]) -> Vec<Ranked> {
    groups
        .into_iter()
        .map(|photos| {
            let mut order_of = photos.clone();
            order(&mut order_of, merits);
            let why = match order_of.as_slice() {
                [best, second, ..] => match compare(merits[*best].as_ref().unwrap(), merits[*second].as_ref().unwrap())
                {
                    (Ordering::Equal, _) => Reason::First,
                    (_, reason) => reason,
                },
                _ => Reason::First,
            };
            Ranked { best: order_of[0], photos, why }
        })
        .collect()
}

/// The album's cover: the best of the photos with merits that are the best of every group they
/// are in (a photo in a duplicate group and a burst must win both). `None` without candidates.
pub fn cover(merits: &[Option<Merits>], groups: &[&[Ranked]]) -> Option<usize> {
    let beaten =
        |i: usize| groups.iter().flat_map(|g| g.iter()).any(|group| group.best != i && group.photos.contains(&i));
    let mut candidates: Vec<usize> = (0..merits.len()).filter(|&i| merits[i].is_some() && !beaten(i)).collect();
    order(&mut candidates, merits);
    candidates.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Merits = Merits { blurry: false, faces_cut: Some(0), head: None, sharpness: 100.0, pixels: 1_000 };

    fn one(photos: &[usize], merits: &[Option<Merits>]) -> (usize, Reason) {
        let ranked = ranked(vec![photos.to_vec()], merits);
        (ranked[0].best, ranked[0].why)
    }

    #[test]
    fn each_criterion_decides_in_its_turn() {
        // Each loser is worse than PLAIN on one criterion and better on every later one, so PLAIN
        // wins on that criterion alone.
        let cases = [
            (Merits { blurry: true, sharpness: 500.0, pixels: 9_000, ..PLAIN }, Reason::NotBlurry),
            (Merits { faces_cut: Some(1), sharpness: 500.0, pixels: 9_000, ..PLAIN }, Reason::FewerFacesCut),
            (Merits { faces_cut: None, sharpness: 500.0, pixels: 9_000, ..PLAIN }, Reason::FewerFacesCut),
            // A quarter of the pixels or less is another size class: it loses before sharpness.
            (Merits { sharpness: 500.0, pixels: 250, ..PLAIN }, Reason::MorePixels),
            // 1,020 is PLAIN's class (256 to 1,023): sharpness decides, then pixels.
            (Merits { sharpness: 99.0, pixels: 1_020, ..PLAIN }, Reason::Sharper),
            (Merits { pixels: 999, ..PLAIN }, Reason::MorePixels),
        ];
        for (loser, reason) in cases {
            assert_eq!(one(&[0, 1], &[Some(loser), Some(PLAIN)]), (1, reason), "{loser:?}");
            assert_eq!(one(&[1, 0], &[Some(PLAIN), Some(loser)]), (0, reason), "{loser:?}");
        }
        assert_eq!((size_class(0), size_class(1), size_class(1_023), size_class(1_024)), (0, 0, 4, 5));
        // The head decides before sharpness, and a missing score loses to any score.
        let scored = |head, sharpness| Some(Merits { head, sharpness, ..PLAIN });
        assert_eq!(one(&[0, 1], &[scored(Some(0.4), 900.0), scored(Some(0.6), 10.0)]), (1, Reason::Head));
        assert_eq!(one(&[0, 1], &[scored(None, 900.0), scored(Some(-3.0), 10.0)]), (1, Reason::Head));
    }

    #[test]
    fn ties_go_to_the_first_in_the_request_and_groups_keep_their_order() {
        let merits = [Some(PLAIN), Some(PLAIN), Some(PLAIN)];
        let ranked = ranked(vec![vec![2, 1], vec![0, 2]], &merits);
        assert_eq!((ranked[0].best, ranked[0].why, &ranked[0].photos), (1, Reason::First, &vec![2, 1]));
        assert_eq!((ranked[1].best, ranked[1].why), (0, Reason::First));
    }

    #[test]
    fn the_reason_is_against_the_runner_up() {
        // 2 beats 0 on sharpness and 1 on blur: the runner-up is 0, so "sharper".
        let sharp = |sharpness| Some(Merits { sharpness, ..PLAIN });
        let merits = [sharp(10.0), Some(Merits { blurry: true, ..PLAIN }), sharp(20.0)];
        assert_eq!(one(&[0, 1, 2], &merits), (2, Reason::Sharper));
    }

    #[test]
    fn the_cover_is_the_best_photo_no_group_ranks_below_another() {
        let sharp = |sharpness| Some(Merits { sharpness, ..PLAIN });
        let merits = [
            Some(Merits { blurry: true, sharpness: 999.0, ..PLAIN }),
            sharp(50.0),
            sharp(80.0),
            sharp(70.0),
            None, // failed: never the cover
            sharp(60.0),
        ];
        // Duplicates {0, 1}: 1 wins (0 is blurry). A burst {2, 3}: 2 wins. 5 is in no group.
        let duplicates = ranked(vec![vec![0, 1]], &merits);
        let burst = ranked(vec![vec![2, 3]], &merits);
        assert_eq!(cover(&merits, &[&duplicates, &burst]), Some(2));
        // A photo must win every group it is in: were 3 the best of a duplicate group {2, 3} (as
        // it is not by these merits; the group is given), 2 would be out, and 3 lost the burst,
        // so the cover is 5, sharper than 1.
        let given = [Ranked { photos: vec![2, 3], best: 3, why: Reason::Sharper }];
        assert_eq!(cover(&merits, &[&given, &burst]), Some(5));
        assert_eq!(cover(&[None, None], &[]), None);
    }
}
