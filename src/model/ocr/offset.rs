//! DB's unclip as RapidOCR 1.4.4 runs it: the rectangle pushed out by `area * ratio / perimeter`
//! with pyclipper's round offset (Clipper 6.4's `ClipperOffset`, `JT_ROUND`, arc tolerance 0.25)
//! on whole-pixel coordinates, then the minimum-area rectangle of that outline. Clipper truncates
//! the corners to integers and rounds each outline point, so the box moves by up to a pixel from
//! the exact expansion; lines are cut from those boxes, and a pixel decides how a borderline line
//! reads, so the outline is made as Clipper makes it.

use std::f64::consts::PI;

use imageproc::{geometry::convex_hull, point::Point as Pixel};

use super::rect::{MiniBox, Point, distance, min_area_rect};

/// Clipper's default arc tolerance, as pyclipper's `PyclipperOffset` sets it.
const ARC_TOLERANCE: f64 = 0.25;

/// The rectangle grown by `ratio` (RapidOCR's `unclip` then `get_mini_boxes`).
pub fn unclip(rect: &MiniBox, ratio: f64) -> MiniBox {
    let [p0, p1, _, p3] = rect.corners;
    let (width, height) = (distance(p0, p1), distance(p0, p3));
    let (area, perimeter) = (width * height, 2.0 * (width + height));
    // A rectangle with no area (dropped by its short side before this) has nothing to push out.
    if area == 0.0 {
        return *rect;
    }
    // pyclipper takes the corners as integers, truncated.
    let path: Vec<Point> = rect.corners.iter().map(|p| [p[0].trunc(), p[1].trunc()]).collect();
    let outline = round_offset(&path, area * ratio / perimeter);
    let hull: Vec<Point> = convex_hull(outline).into_iter().map(|p| [f64::from(p.x), f64::from(p.y)]).collect();
    min_area_rect(&hull)
}

/// Clipper's `Round`: halves away from zero.
fn round(value: f64) -> i32 {
    if value < 0.0 { (value - 0.5) as i32 } else { (value + 0.5) as i32 }
}

/// The outline of a closed `path` (clockwise in image coordinates, as a `MiniBox`'s corners go)
/// pushed out by `delta`, each corner joined by an arc of Clipper's steps, every point rounded.
fn round_offset(path: &[Point], delta: f64) -> Vec<Pixel<i32>> {
    let mut path = path.to_vec();
    path.dedup();
    while path.len() > 1 && path.first() == path.last() {
        path.pop();
    }
    let normal = |a: Point, b: Point| {
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        let length = dx.hypot(dy);
        if length == 0.0 { [0.0, 0.0] } else { [dy / length, -dx / length] }
    };
    let count = path.len();
    let normals: Vec<Point> = (0..count).map(|j| normal(path[j], path[(j + 1) % count])).collect();
    let tolerance = ARC_TOLERANCE.min(delta.abs() * ARC_TOLERANCE);
    let steps = (PI / (1.0 - tolerance / delta.abs()).acos()).min(delta.abs() * PI);
    let (sin, cos, steps_per_radian) = ((2.0 * PI / steps).sin(), (2.0 * PI / steps).cos(), steps / (2.0 * PI));
    let at = |p: Point, n: Point| Pixel::new(round(p[0] + n[0] * delta), round(p[1] + n[1] * delta));
    let mut outline = Vec::new();
    for j in 0..count {
        let (k, p) = ((j + count - 1) % count, path[j]);
        let (nk, nj) = (normals[k], normals[j]);
        let sin_a = (nk[0] * nj[1] - nj[0] * nk[1]).clamp(-1.0, 1.0);
        let cos_a = nk[0] * nj[0] + nk[1] * nj[1];
        if (sin_a * delta).abs() < 1.0 && cos_a > 0.0 {
            outline.push(at(p, nk));
        } else if sin_a * delta < 0.0 {
            outline.extend([at(p, nk), Pixel::new(p[0] as i32, p[1] as i32), at(p, nj)]);
        } else {
            let turns = (steps_per_radian * sin_a.atan2(cos_a).abs()).round().max(1.0) as usize;
            let [mut x, mut y] = nk;
            for _ in 0..turns {
                outline.push(at(p, [x, y]));
                [x, y] = [x * cos - sin * y, x * sin + y * cos];
            }
            outline.push(at(p, nj));
        }
    }
    outline
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ocr::rect::min_area_rect;

    #[test]
    fn an_upright_rectangle_grows_by_area_times_ratio_over_perimeter_in_whole_pixels() {
        // d = 2000 * 1.6 / 240 = 13.33: the outline's sides lie at -13 and 113, -13 and 33.
        let rect = min_area_rect(&[[0.0, 0.0], [100.0, 0.0], [100.0, 20.0], [0.0, 20.0]]);
        let grown = unclip(&rect, 1.6);
        assert_eq!(grown.corners, [[-13.0, -13.0], [113.0, -13.0], [113.0, 33.0], [-13.0, 33.0]]);
        assert_eq!(grown.short_side, 46.0);
    }

    #[test]
    fn corners_are_truncated_first_as_pyclipper_takes_them() {
        // 0.9 and 20.9 truncate to 0 and 20: the same outline as the rectangle of whole pixels.
        let exact = min_area_rect(&[[0.0, 0.0], [100.0, 0.0], [100.0, 20.0], [0.0, 20.0]]);
        let fractional = min_area_rect(&[[0.9, 0.9], [100.9, 0.9], [100.9, 20.9], [0.9, 20.9]]);
        assert_eq!(unclip(&fractional, 1.6).corners, unclip(&exact, 1.6).corners);
    }

    #[test]
    fn a_point_gives_an_empty_rectangle() {
        let rect = min_area_rect(&[[3.0, 4.0]]);
        assert_eq!(unclip(&rect, 1.6).corners, rect.corners);
    }
}
