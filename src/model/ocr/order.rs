//! Reading order, as RapidOCR sorts its boxes (`sorted_boxes`): by the top-left corner's y, then
//! x; then a box whose top-left lies within 10 px of the one before it in y, and left of it, moves
//! ahead of it, so that the boxes of one line read left to right.

use super::db::TextBox;

/// How far apart in y two top-left corners may be and still be one line.
const SAME_LINE: f32 = 10.0;

pub fn reading_order(boxes: &mut [TextBox]) {
    let top_left = |b: &TextBox| b.corners[0];
    boxes.sort_by(|a, b| {
        let (a, b) = (top_left(a), top_left(b));
        a[1].total_cmp(&b[1]).then(a[0].total_cmp(&b[0]))
    });
    for i in 0..boxes.len().saturating_sub(1) {
        for j in (0..=i).rev() {
            let (this, next) = (top_left(&boxes[j]), top_left(&boxes[j + 1]));
            if (next[1] - this[1]).abs() < SAME_LINE && next[0] < this[0] {
                boxes.swap(j, j + 1);
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(x: f32, y: f32) -> TextBox {
        TextBox { corners: [[x, y], [x + 10.0, y], [x + 10.0, y + 5.0], [x, y + 5.0]], score: 0.9 }
    }

    #[test]
    fn top_to_bottom_then_left_to_right_within_a_line() {
        let tops = |mut boxes: Vec<TextBox>| {
            reading_order(&mut boxes);
            boxes.iter().map(|b| b.corners[0]).collect::<Vec<_>>()
        };
        // 4 px apart in y: one line, the left one first; 12 px apart: two lines, the upper first.
        let one_line = tops(vec![at(50.0, 100.0), at(10.0, 44.0), at(200.0, 40.0)]);
        assert_eq!(one_line, [[10.0, 44.0], [200.0, 40.0], [50.0, 100.0]]);
        let two_lines = tops(vec![at(10.0, 52.0), at(200.0, 40.0)]);
        assert_eq!(two_lines, [[200.0, 40.0], [10.0, 52.0]]);
    }
}
