//! The best shot of a group (duplicates, a burst) and the album's cover: one documented order
//! (README, "The best shot and the cover"), deterministic, and the reason the winner won.
//!
//! Sharpness is compared within the group, at one size for all of its photos: for photos of one
//! size the album app's 300 px on the long side; for photos of several sizes the largest of 300,
//! 150 and 75 px that every one of them is shrunk at least [`SHRINK`] times to, so that a smaller
//! copy's resampling and codec artefacts, which raise the measure at 300 px, are averaged away. A
//! photo within [`TOLERANCE`] of the group's sharpest counts as sharp; among those the larger wins,
//! and only then the sharper. A JPEG under [`LOW_QUALITY`] loses before
//! sharpness. Each photo's key is read against its group, so the order stays total.

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
    /// The variance of the Laplacian at [`SIDES`] px on the long side.
    pub sharpness: [f64; 3],
    /// Width x height at full size.
    pub pixels: u64,
    /// The long side at full size.
    pub long_side: u32,
    /// A JPEG's estimated quality (1 to 100); none for other formats.
    pub jpeg_quality: Option<u8>,
}

/// The long sides sharpness is measured at: the album app's 300 px, and half and a quarter of it.
pub const SIDES: [u32; 3] = [300, 150, 75];

/// How many times every photo of a group of several sizes must be shrunk to the size their
/// sharpness is compared at (the smallest, 75 px, when a photo is too small for that): at 2, copies
/// at 30% of the side measured up to 1.19 times their originals' sharpness, at 3 up to 1.09
/// (docs/design.md, "The best shot and the cover").
pub const SHRINK: u32 = 3;

/// A photo whose sharpness is at least the group's sharpest divided by this counts as sharp: the
/// largest ratio a downscaled copy measured over its original at the compared size (1.09), with
/// room; a Gaussian blur of radius 2 px on those photos measured 0.41 to 0.79 of the original.
pub const TOLERANCE: f64 = 1.2;

/// A JPEG whose estimated quality is under this counts as heavily compressed (a messenger's or an
/// app's low-quality re-encode): libjpeg's and Pillow's default is 75, phones write 85 to 95. The
/// number says how the last encode was made, not what an earlier one lost: a copy saved again at
/// 90 reads 90, whatever its original read, so the number orders nothing above it.
pub const LOW_QUALITY: u8 = 50;

/// The criterion on which a winner beat the runner-up, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NotBlurry,
    FewerFacesCut,
    Head,
    /// The runner-up is a JPEG of a quality under [`LOW_QUALITY`].
    LessCompressed,
    /// The runner-up is less sharp than the group's sharpest by more than the tolerance.
    Sharper,
    /// Both are sharp within the tolerance: the larger wins.
    MorePixels,
    /// Both sharp within the tolerance and of one size: the sharper wins.
    SlightlySharper,
    /// Every criterion tied: the first in the request wins.
    First,
}

impl Reason {
    pub const ALL: [Reason; 8] = [
        Reason::NotBlurry,
        Reason::FewerFacesCut,
        Reason::Head,
        Reason::LessCompressed,
        Reason::Sharper,
        Reason::MorePixels,
        Reason::SlightlySharper,
        Reason::First,
    ];

    /// What the answer's `why` says.
    pub fn code(self) -> &'static str {
        match self {
            Reason::NotBlurry => "not_blurry",
            Reason::FewerFacesCut => "fewer_faces_cut",
            Reason::Head => "head",
            Reason::LessCompressed => "less_compressed",
            Reason::Sharper => "sharper",
            Reason::MorePixels => "more_pixels",
            Reason::SlightlySharper => "slightly_sharper",
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

/// What a photo's merits are read against: its group's (or the cover's candidates').
struct Among {
    /// Which of [`SIDES`] sharpness is compared at.
    side: usize,
    /// The sharpest at that size, of the photos that are not blurry (of all when every one is).
    sharpest: f64,
}

impl Among {
    fn of<'a>(merits: impl Iterator<Item = &'a Merits> + Clone) -> Among {
        let smallest = merits.clone().map(|m| m.long_side).min().unwrap_or(0);
        let one_size = merits.clone().all(|m| m.long_side == smallest);
        let side = match one_size {
            // Photos of one size share their artefacts' scale: the album app's 300 px.
            true => 0,
            false => SIDES.iter().position(|&side| side * SHRINK <= smallest).unwrap_or(SIDES.len() - 1),
        };
        // The sharpest of the photos that are not blurry (blur is decided before), else of all.
        let blurry = merits.clone().all(|m| m.blurry);
        let sharpest = merits.clone().filter(|m| blurry || !m.blurry).map(|m| m.sharpness[side]).fold(0.0, f64::max);
        Among { side, sharpest }
    }

    fn sharp(&self, m: &Merits) -> bool {
        m.sharpness[self.side] * TOLERANCE >= self.sharpest
    }
}

/// How `a` compares with `b` among `among` (`Less`: `a` is better), and on which criterion they
/// first differ. A total order within one `among`: an unknown face count ranks after every known
/// one, and so does a missing score.
fn compare(a: &Merits, b: &Merits, among: &Among) -> (Ordering, Reason) {
    let faces = |m: &Merits| (m.faces_cut.is_none(), m.faces_cut.unwrap_or(0));
    let head = |m: &Merits| (m.head.is_none(), -m.head.unwrap_or(0.0));
    let low = |m: &Merits| m.jpeg_quality.is_some_and(|quality| quality < LOW_QUALITY);
    let side = among.side;
    let steps = [
        (a.blurry.cmp(&b.blurry), Reason::NotBlurry),
        (faces(a).cmp(&faces(b)), Reason::FewerFacesCut),
        (head(a).0.cmp(&head(b).0).then(head(a).1.total_cmp(&head(b).1)), Reason::Head),
        (low(a).cmp(&low(b)), Reason::LessCompressed),
        (among.sharp(b).cmp(&among.sharp(a)), Reason::Sharper),
        (b.pixels.cmp(&a.pixels), Reason::MorePixels),
        (b.sharpness[side].total_cmp(&a.sharpness[side]), Reason::SlightlySharper),
    ];
    steps.into_iter().find(|(order, _)| order.is_ne()).unwrap_or((Ordering::Equal, Reason::First))
}

/// `candidates` best first (ties by index), among themselves. Every candidate must have merits.
fn order(candidates: &mut [usize], merits: &[Option<Merits>]) -> Among {
    let of = |i: usize| merits[i].as_ref().expect("a ranked photo has merits");
    let among = Among::of(candidates.iter().map(|&i| of(i)));
    candidates.sort_by(|&a, &b| compare(of(a), of(b), &among).0.then(a.cmp(&b)));
    among
}

/// Each group (of photos that all have merits) with its best photo and why it beat the second.
pub fn ranked(groups: Vec<Vec<usize>>, merits: &[Option<Merits>]) -> Vec<Ranked> {
    groups
        .into_iter()
        .map(|photos| {
            let mut order_of = photos.clone();
            let among = order(&mut order_of, merits);
            let of = |i: usize| merits[i].as_ref().expect("a ranked photo has merits");
            let why = match order_of.as_slice() {
                [best, second, ..] => match compare(of(*best), of(*second), &among) {
                    (Ordering::Equal, _) => Reason::First,
                    (_, reason) => reason,
                },
                _ => Reason::First,
            };
            Ranked { best: order_of[0], photos, why }
        })
        .collect()
}

/// Whether `i` is in one of `groups` and not its best.
pub fn beaten(i: usize, groups: &[Ranked]) -> bool {
    groups.iter().any(|group| group.best != i && group.photos.contains(&i))
}

/// The album's cover: the best of the photos with merits that are the best of every group they
/// are in (a photo in a duplicate group and a burst must win both), ranked among themselves.
/// `None` without candidates.
pub fn cover(merits: &[Option<Merits>], groups: &[&[Ranked]]) -> Option<usize> {
    let mut candidates: Vec<usize> =
        (0..merits.len()).filter(|&i| merits[i].is_some() && !groups.iter().any(|g| beaten(i, g))).collect();
    order(&mut candidates, merits);
    candidates.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Merits = Merits {
        blurry: false,
        faces_cut: Some(0),
        head: None,
        sharpness: [100.0; 3],
        pixels: 1_000_000,
        long_side: 1_200,
        jpeg_quality: Some(90),
    };

    fn one(photos: &[usize], merits: &[Option<Merits>]) -> (usize, Reason) {
        let ranked = ranked(vec![photos.to_vec()], merits);
        (ranked[0].best, ranked[0].why)
    }

    fn sharp(by: f64) -> [f64; 3] {
        [by; 3]
    }

    #[test]
    fn each_criterion_decides_in_its_turn() {
        // Each loser is worse than PLAIN on one criterion and better on every later one, so PLAIN
        // wins on that criterion alone.
        let bigger = 4_000_000;
        let cases = [
            (Merits { blurry: true, sharpness: sharp(500.0), pixels: bigger, ..PLAIN }, Reason::NotBlurry),
            (Merits { faces_cut: Some(1), sharpness: sharp(500.0), pixels: bigger, ..PLAIN }, Reason::FewerFacesCut),
            (Merits { faces_cut: None, sharpness: sharp(500.0), pixels: bigger, ..PLAIN }, Reason::FewerFacesCut),
            // Quality 49 is heavily compressed; 50 is not yet.
            (
                Merits { jpeg_quality: Some(49), sharpness: sharp(500.0), pixels: bigger, ..PLAIN },
                Reason::LessCompressed,
            ),
            // Less sharp than PLAIN by more than the tolerance (100 / 83 = 1.205).
            (Merits { jpeg_quality: Some(50), sharpness: sharp(83.0), pixels: bigger, ..PLAIN }, Reason::Sharper),
            // As sharp within the tolerance (and sharper): the larger wins, even against a higher quality.
            (Merits { sharpness: sharp(119.0), pixels: 999_999, long_side: 1_199, ..PLAIN }, Reason::MorePixels),
            (
                Merits { sharpness: sharp(119.0), jpeg_quality: Some(100), pixels: 999_999, long_side: 1_199, ..PLAIN },
                Reason::MorePixels,
            ),
            (Merits { sharpness: sharp(99.0), ..PLAIN }, Reason::SlightlySharper),
        ];
        for (loser, reason) in cases {
            assert_eq!(one(&[0, 1], &[Some(loser), Some(PLAIN)]), (1, reason), "{loser:?}");
            assert_eq!(one(&[1, 0], &[Some(PLAIN), Some(loser)]), (0, reason), "{loser:?}");
        }
        // A photo that is not a JPEG counts as the best quality; the head decides before
        // compression and sharpness, and a missing score loses to any score.
        let png = Merits { jpeg_quality: None, ..PLAIN };
        assert_eq!(
            one(&[0, 1], &[Some(Merits { jpeg_quality: Some(30), ..PLAIN }), Some(png)]),
            (1, Reason::LessCompressed)
        );
        let scored = |head, sharpness| Some(Merits { head, sharpness: sharp(sharpness), ..PLAIN });
        assert_eq!(one(&[0, 1], &[scored(Some(0.4), 900.0), scored(Some(0.6), 10.0)]), (1, Reason::Head));
        assert_eq!(one(&[0, 1], &[scored(None, 900.0), scored(Some(-3.0), 10.0)]), (1, Reason::Head));
    }

    #[test]
    fn sharpness_is_compared_where_every_photo_of_the_group_is_shrunk_three_times() {
        // A 400 px copy measures sharper at 300 and 150 px (its artefacts), as sharp at 75: 75 px
        // is the largest size both are shrunk three times to, so the original wins on its size.
        let original = Merits { sharpness: [100.0, 100.0, 100.0], ..PLAIN };
        let copy = Merits { sharpness: [170.0, 140.0, 110.0], pixels: 400 * 300, long_side: 400, ..PLAIN };
        assert_eq!(one(&[0, 1], &[Some(copy), Some(original)]), (1, Reason::MorePixels));
        // A 900 px copy is compared at 300 px, where its 170 is beyond the tolerance: sharper.
        let larger_copy = Merits { long_side: 900, pixels: 900 * 600, ..copy };
        assert_eq!(one(&[0, 1], &[Some(larger_copy), Some(original)]), (0, Reason::Sharper));
        // With a blurred original the copy is sharper at any size.
        let blurred = Merits { sharpness: [60.0, 70.0, 85.0], ..original };
        assert_eq!(one(&[0, 1], &[Some(copy), Some(blurred)]), (0, Reason::Sharper));
        // Photos under 225 px are compared at 75 px, however small.
        let tiny = Merits { long_side: 100, pixels: 100 * 75, sharpness: [500.0, 300.0, 100.0], ..PLAIN };
        assert_eq!(one(&[0, 1], &[Some(tiny), Some(original)]), (1, Reason::MorePixels));
        // Photos of one size, however small, at 300 px: 640 px frames differing at 300 px only.
        let frame = |sharpness| Merits { long_side: 640, pixels: 640 * 480, sharpness, ..PLAIN };
        let (blurred, crisp) = (frame([100.0, 100.0, 100.0]), frame([150.0, 101.0, 100.0]));
        assert_eq!(one(&[0, 1], &[Some(blurred), Some(crisp)]), (1, Reason::Sharper));
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
        // 2 beats 0 on size (both sharp) and 1 on blur: the runner-up is 0, so "more_pixels".
        let merits = [
            Some(Merits { pixels: 900_000, ..PLAIN }),
            Some(Merits { blurry: true, ..PLAIN }),
            Some(Merits { sharpness: sharp(90.0), ..PLAIN }),
        ];
        assert_eq!(one(&[0, 1, 2], &merits), (2, Reason::MorePixels));
    }

    #[test]
    fn the_cover_is_the_best_photo_no_group_ranks_below_another() {
        let sharp_by = |sharpness| Some(Merits { sharpness: sharp(sharpness), ..PLAIN });
        let merits = [
            Some(Merits { blurry: true, sharpness: sharp(999.0), ..PLAIN }),
            sharp_by(50.0),
            sharp_by(80.0),
            sharp_by(70.0),
            None, // failed: never the cover
            sharp_by(60.0),
        ];
        // Duplicates {0, 1}: 1 wins (0 is blurry). A burst {2, 3}: 2 wins. 5 is in no group.
        let duplicates = ranked(vec![vec![0, 1]], &merits);
        let burst = ranked(vec![vec![2, 3]], &merits);
        assert_eq!(cover(&merits, &[&duplicates, &burst]), Some(2));
        // A photo must win every group it is in: were 3 the best of a duplicate group {2, 3} (as
        // it is not by these merits; the group is given), 2 would be out, and 3 lost the burst,
        // so the cover is 5 (sharp within the tolerance of the sharpest candidate, 60 against
        // 50, and of one size: the sharper).
        let given = [Ranked { photos: vec![2, 3], best: 3, why: Reason::Sharper }];
        assert_eq!(cover(&merits, &[&given, &burst]), Some(5));
        assert!(beaten(2, &given) && !beaten(5, &given));
        assert_eq!(cover(&[None, None], &[]), None);
    }
}
