//! DB's post-process: the detector's probability map to text boxes, every step RapidOCR 1.4.4's
//! `DBPostProcess` (and its `filter_tag_det_res`) takes, with its defaults. A pure function of the
//! map, run on the decode threads.
//!
//! 1. binarise at 0.3 and dilate by a 2 x 2 square;
//! 2. take the regions' borders (outer and hole borders alike, as OpenCV's `RETR_LIST`), at most
//!    1,000;
//! 3. each border's minimum-area rectangle, dropped under 3 px on its short side;
//! 4. its score, the map's mean over the rectangle (`box_score_fast`), dropped under 0.5;
//! 5. the rectangle pushed out by the unclip ratio 1.6, dropped under 5 px on its short side;
//! 6. its corners scaled to the photo and rounded, put in clockwise order, clipped to the photo,
//!    dropped at 3 px or less on a side.

use image::{GrayImage, Luma};
use imageproc::{contours::find_contours, drawing::draw_polygon_mut, geometry::convex_hull};

use super::{
    offset::unclip,
    rect::{MiniBox, Point, clockwise, distance, min_area_rect},
};

const THRESHOLD: f32 = 0.3;
/// A box whose mean probability is under this is dropped, unless the caller asks another (Immich's
/// detection `minScore`): RapidOCR's `box_thresh`.
pub const BOX_THRESHOLD: f32 = 0.5;
const MAX_CANDIDATES: usize = 1000;
const UNCLIP_RATIO: f64 = 1.6;
const MIN_SIZE: f64 = 3.0;

/// The detector's output for one view: the probability of text at each of its pixels.
#[derive(Debug, Clone)]
pub struct ProbabilityMap {
    pub width: u32,
    pub height: u32,
    /// Row-major, `width * height`.
    pub values: Vec<f32>,
}

/// One text line as the detector found it, in pixels of the photo the map is scaled to.
#[derive(Debug, Clone, PartialEq)]
pub struct TextBox {
    /// Top-left, top-right, bottom-right, bottom-left, whole pixels.
    pub corners: [[f32; 2]; 4],
    /// The map's mean inside the line's rectangle.
    pub score: f32,
}

impl ProbabilityMap {
    fn at(&self, x: u32, y: u32) -> f32 {
        self.values[(y * self.width + x) as usize]
    }
}

/// The text boxes on `map` scoring at least `min_score`, scaled to a `photo` of that width and
/// height, in the order the borders were found (the caller sorts them into reading order).
pub fn text_boxes(map: &ProbabilityMap, photo: (u32, u32), min_score: f32) -> Vec<TextBox> {
    let mask = dilated_mask(map);
    let mut boxes = Vec::new();
    for contour in find_contours::<i32>(&mask).into_iter().take(MAX_CANDIDATES) {
        // Back from the padded mask's coordinates.
        let hull: Vec<Point> =
            convex_hull(contour.points).into_iter().map(|p| [f64::from(p.x - 1), f64::from(p.y - 1)]).collect();
        if hull.is_empty() {
            continue;
        }
        let rect = min_area_rect(&hull);
        if rect.short_side < MIN_SIZE {
            continue;
        }
        let score = box_score(map, &rect);
        if score < f64::from(min_score) {
            continue;
        }
        let grown = unclip(&rect, UNCLIP_RATIO);
        if grown.short_side < MIN_SIZE + 2.0 {
            continue;
        }
        if let Some(corners) = on_photo(&grown, (map.width, map.height), photo) {
            boxes.push(TextBox { corners: corners.map(|p| p.map(|v| v as f32)), score: score as f32 });
        }
    }
    boxes
}

/// The map over the threshold, then dilated by OpenCV's 2 x 2 kernel (anchored at its centre,
/// (1, 1)): a pixel is set when it or its left, upper or upper-left neighbour is. The mask has a
/// clear 1-pixel frame around the map: imageproc's border following starts no outer border in
/// the first column, where OpenCV's takes the outside as clear.
fn dilated_mask(map: &ProbabilityMap) -> GrayImage {
    let over = |x: u32, y: u32| map.at(x, y) > THRESHOLD;
    GrayImage::from_fn(map.width + 2, map.height + 2, |x, y| {
        if x == 0 || y == 0 || x > map.width || y > map.height {
            return Luma([0]);
        }
        let (x, y) = (x - 1, y - 1);
        let set = over(x, y)
            || (x > 0 && over(x - 1, y))
            || (y > 0 && over(x, y - 1))
            || (x > 0 && y > 0 && over(x - 1, y - 1));
        Luma([if set { 255 } else { 0 }])
    })
}

/// The map's mean over the rectangle's pixels (`box_score_fast`: the rectangle's corners truncated
/// to whole pixels inside its clipped bounding box, then filled as `cv2.fillPoly` fills: each
/// scanline between the edges, and the edges' own pixels, which imageproc's polygon fill draws
/// alike).
fn box_score(map: &ProbabilityMap, rect: &MiniBox) -> f64 {
    let (max_x, max_y) = (f64::from(map.width - 1), f64::from(map.height - 1));
    let fold =
        |pick: fn(f64, f64) -> f64, axis: usize| rect.corners.iter().map(|p| p[axis]).reduce(pick).unwrap_or(0.0);
    let (x0, x1) = (fold(f64::min, 0).floor().clamp(0.0, max_x), fold(f64::max, 0).ceil().clamp(0.0, max_x));
    let (y0, y1) = (fold(f64::min, 1).floor().clamp(0.0, max_y), fold(f64::max, 1).ceil().clamp(0.0, max_y));
    let polygon = rect.corners.map(|[x, y]| imageproc::point::Point::new((x - x0) as i32, (y - y0) as i32));
    let mut mask = GrayImage::new((x1 - x0) as u32 + 1, (y1 - y0) as u32 + 1);
    draw_polygon_mut(&mut mask, &polygon, Luma([1]));
    let (mut sum, mut count) = (0.0, 0u32);
    for (x, y, _) in mask.enumerate_pixels().filter(|(_, _, inside)| inside.0[0] == 1) {
        sum += f64::from(map.at(x0 as u32 + x, y0 as u32 + y));
        count += 1;
    }
    if count == 0 { 0.0 } else { sum / f64::from(count) }
}

/// The rectangle's corners scaled from the `map` size to the `photo`'s and rounded (clamped to
/// 0..=width), in clockwise order, clipped to the last pixel; `None` when a side is 3 px or less.
fn on_photo(rect: &MiniBox, map: (u32, u32), photo: (u32, u32)) -> Option<[Point; 4]> {
    let (scale_x, scale_y) = (f64::from(photo.0) / f64::from(map.0), f64::from(photo.1) / f64::from(map.1));
    let (width, height) = (f64::from(photo.0), f64::from(photo.1));
    let scaled =
        rect.corners.map(|[x, y]| [(x * scale_x).round().clamp(0.0, width), (y * scale_y).round().clamp(0.0, height)]);
    let corners = clockwise(scaled).map(|[x, y]| [x.clamp(0.0, width - 1.0), y.clamp(0.0, height - 1.0)]);
    let (side, across) = (distance(corners[0], corners[1]).trunc(), distance(corners[0], corners[3]).trunc());
    (side > MIN_SIZE && across > MIN_SIZE).then_some(corners)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `width` x `height` map, `inside` over the given upright boxes `[x0, y0, x1, y1]` (ends
    /// excluded), 0.05 elsewhere.
    fn map(width: u32, height: u32, boxes: &[[u32; 4]], inside: f32) -> ProbabilityMap {
        let values = (0..height)
            .flat_map(|y| (0..width).map(move |x| (x, y)))
            .map(
                |(x, y)| {
                    if boxes.iter().any(|b| x >= b[0] && x < b[2] && y >= b[1] && y < b[3]) { inside } else { 0.05 }
                },
            )
            .collect();
        ProbabilityMap { width, height, values }
    }

    #[test]
    fn a_line_is_found_grown_and_scaled_to_the_photo() {
        // A 60 x 10 region on a 160 x 64 map of a 320 x 128 photo.
        let found = text_boxes(&map(160, 64, &[[20, 20, 80, 30]], 0.9), (320, 128), BOX_THRESHOLD);
        let [TextBox { corners, score }] = &found[..] else { panic!("{found:?}") };
        // The dilated region is 61 x 11: its rectangle covers 600 pixels at 0.9 and 71 at 0.05.
        let mean = (600.0 * 0.9 + 71.0 * 0.05) / 671.0;
        assert!((score - mean).abs() < 1e-4, "the mean inside the box: {score}, not {mean}");
        // The border runs 20..=80 by 20..=30 after dilation: 60 x 10, pushed out by
        // 600 * 1.6 / 140 = 6.86, then doubled and rounded.
        assert_eq!(*corners, [[26.0, 26.0], [174.0, 26.0], [174.0, 74.0], [26.0, 74.0]]);
    }

    #[test]
    fn weak_small_and_thin_regions_are_dropped() {
        let weak = map(100, 50, &[[10, 10, 60, 20]], 0.45);
        assert_eq!(text_boxes(&weak, (100, 50), BOX_THRESHOLD), [], "a mean of 0.45 is under 0.5");
        assert_eq!(text_boxes(&weak, (100, 50), 0.4).len(), 1, "a caller's lower minimum keeps it");
        let speck = map(100, 50, &[[10, 10, 11, 11]], 0.9);
        assert_eq!(text_boxes(&speck, (100, 50), BOX_THRESHOLD), [], "2 x 2 after dilation: under 3 px");
        let empty = map(100, 50, &[], 0.9);
        assert_eq!(text_boxes(&empty, (100, 50), BOX_THRESHOLD), []);
    }

    #[test]
    fn boxes_stay_on_the_photo() {
        let found = text_boxes(&map(64, 32, &[[0, 0, 64, 8]], 0.9), (64, 32), BOX_THRESHOLD);
        let [TextBox { corners, .. }] = &found[..] else { panic!("{found:?}") };
        assert!(corners.iter().all(|[x, y]| (0.0..=63.0).contains(x) && (0.0..=31.0).contains(y)), "{corners:?}");
    }

    #[test]
    fn the_mask_is_dilated_right_and_down() {
        let dilated = dilated_mask(&map(4, 4, &[[1, 1, 2, 2]], 0.9));
        let set: Vec<(u32, u32)> = dilated.enumerate_pixels().filter(|p| p.2.0[0] > 0).map(|p| (p.0, p.1)).collect();
        assert_eq!(set, [(2, 2), (3, 2), (2, 3), (3, 3)], "(1, 1) and its right and lower neighbours, framed");
    }
}
