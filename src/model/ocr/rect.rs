//! The rectangles of DB's post-process, as RapidOCR 1.4.4 takes them with OpenCV and pyclipper:
//! a region's minimum-area rectangle (OpenCV's `minAreaRect` and `get_mini_boxes`' corner order)
//! and the clockwise order the crops are cut in; `offset` grows it by the unclip ratio.

/// A point, `[x, y]`.
pub type Point = [f64; 2];

/// A rectangle's corners and its short side, as `get_mini_boxes` answers: the corners start at the
/// upper of the two leftmost points and go clockwise (in image coordinates, y down).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MiniBox {
    pub corners: [Point; 4],
    pub short_side: f64,
}

/// The minimum-area rectangle around a convex `hull` (its points in either turn), by rotating
/// calipers: one side of the best rectangle lies along an edge of the hull. A single point or a
/// line gives a rectangle with a zero side.
pub fn min_area_rect(hull: &[Point]) -> MiniBox {
    let mut best: Option<(f64, [Point; 4], f64)> = None;
    for (i, a) in hull.iter().enumerate() {
        let b = hull[(i + 1) % hull.len()];
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        let length = dx.hypot(dy);
        // A one-point hull still needs a frame: the axes.
        let (ux, uy) = if length > 0.0 { (dx / length, dy / length) } else { (1.0, 0.0) };
        let (mut lo_u, mut hi_u, mut lo_v, mut hi_v) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for p in hull {
            let (u, v) = (p[0] * ux + p[1] * uy, -p[0] * uy + p[1] * ux);
            (lo_u, hi_u, lo_v, hi_v) = (lo_u.min(u), hi_u.max(u), lo_v.min(v), hi_v.max(v));
        }
        let area = (hi_u - lo_u) * (hi_v - lo_v);
        if best.as_ref().is_none_or(|(least, ..)| area < *least) {
            let at = |u: f64, v: f64| [u * ux - v * uy, u * uy + v * ux];
            let corners = [at(lo_u, lo_v), at(hi_u, lo_v), at(hi_u, hi_v), at(lo_u, hi_v)];
            best = Some((area, corners, (hi_u - lo_u).min(hi_v - lo_v)));
        }
    }
    let (_, corners, short_side) = best.expect("a hull has a point");
    MiniBox { corners: mini_box_order(corners), short_side }
}

/// `get_mini_boxes`' order: the points by x; of the two leftmost the upper first, of the two
/// rightmost the upper second, so that the four go round clockwise.
fn mini_box_order(mut points: [Point; 4]) -> [Point; 4] {
    points.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (first, fourth) = if points[1][1] > points[0][1] { (0, 1) } else { (1, 0) };
    let (second, third) = if points[3][1] > points[2][1] { (2, 3) } else { (3, 2) };
    [points[first], points[second], points[third], points[fourth]]
}

/// RapidOCR's `order_points_clockwise`: the two leftmost points (by x) top then bottom, the two
/// rightmost likewise, as top-left, top-right, bottom-right, bottom-left.
pub fn clockwise(points: [Point; 4]) -> [Point; 4] {
    let mut by_x = points;
    by_x.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let by_y = |a: Point, b: Point| if b[1] < a[1] { (b, a) } else { (a, b) };
    let (top_left, bottom_left) = by_y(by_x[0], by_x[1]);
    let (top_right, bottom_right) = by_y(by_x[2], by_x[3]);
    [top_left, top_right, bottom_right, bottom_left]
}

pub fn distance(a: Point, b: Point) -> f64 {
    (a[0] - b[0]).hypot(a[1] - b[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: [Point; 4], b: [Point; 4]) -> bool {
        a.iter().zip(&b).all(|(p, q)| distance(*p, *q) < 1e-9)
    }

    #[test]
    fn an_upright_rectangle_is_its_own_and_starts_top_left() {
        let hull = [[10.0, 20.0], [10.0, 5.0], [40.0, 5.0], [40.0, 20.0]];
        let rect = min_area_rect(&hull);
        assert!(close(rect.corners, [[10.0, 5.0], [40.0, 5.0], [40.0, 20.0], [10.0, 20.0]]), "{rect:?}");
        assert_eq!(rect.short_side, 15.0);
    }

    #[test]
    fn a_turned_rectangle_is_found_along_its_edge() {
        // A 20 x 4 rectangle turned by 30 degrees, with a point inside it: its own area, 80, not
        // the 20.3 x 18.8 upright box around it.
        let (c, s) = (30f64.to_radians().cos(), 30f64.to_radians().sin());
        let at = |u: f64, v: f64| [100.0 + u * c - v * s, 50.0 + u * s + v * c];
        let hull = [at(0.0, 0.0), at(20.0, 0.0), at(20.0, 4.0), at(0.0, 4.0), at(10.0, 2.0)];
        let rect = min_area_rect(&hull);
        let [p0, p1, _, p3] = rect.corners;
        assert!((distance(p0, p1) * distance(p0, p3) - 80.0).abs() < 1e-6);
        assert!((rect.short_side - 4.0).abs() < 1e-9);
        assert!(close(rect.corners, clockwise(rect.corners)), "clockwise from the top left: {rect:?}");
    }

    #[test]
    fn clockwise_starts_top_left_whatever_the_order() {
        let points = [[5.0, 9.0], [1.0, 2.0], [6.0, 1.0], [0.0, 8.0]];
        assert_eq!(clockwise(points), [[1.0, 2.0], [6.0, 1.0], [5.0, 9.0], [0.0, 8.0]]);
    }
}
