//! The OCR views, made on the decode threads, as RapidOCR 1.4.4 makes them with OpenCV:
//!
//! - the detector's view: the photo with its short side scaled down to `CLIPFN_OCR_RESOLUTION`
//!   (never up; Immich's rule) and its long side to [`MAX_VIEW_SIDE`], each side rounded to a
//!   multiple of 32 (`DetPreProcess.resize`);
//! - each line cut from the decoded pixels by a perspective warp of its box (bicubic, edges
//!   repeated: `get_rotate_crop_image`), turned upright when 1.5 times taller than wide;
//! - the classifier's and the recognizer's inputs: the line at height 48, its width from its
//!   aspect, capped at the input's width (`resize_norm_img`).
//!
//! The decoded pixels (at the DCT scale that covers the view, finer than the view whenever the
//! photo is larger) are kept with the view until the detector has answered, and the lines are cut
//! from them: small text keeps the pixels the detector's view lost. Resizes are OpenCV's
//! `INTER_LINEAR` (no antialiasing), the reference's.

use std::sync::Arc;

use image::{Rgb, RgbImage};

use crate::settings::OcrSizes;

/// The detector view's longest side: a 16,000 px panorama would otherwise keep its width at 736
/// px high (a 47 MB probability map), where RapidOCR caps the long side at 2,000.
pub const MAX_VIEW_SIDE: u32 = 4096;

/// The recognizer's and the classifier's input height.
pub const LINE_HEIGHT: u32 = 48;
/// The classifier's input width (PP-OCR's `cls_image_shape` [3, 48, 192]).
pub const CLASSIFIER_WIDTH: u32 = 192;
/// The narrowest of [`RECOGNIZER_WIDTHS`] (PP-OCR's `rec_image_shape` [3, 48, 320]).
pub const MIN_RECOGNIZER_WIDTH: u32 = RECOGNIZER_WIDTHS[0];
/// The recognizer's input widths: a line is padded (zeros, PP-OCR's own padding) to the narrowest
/// that holds it, so that its text never depends on what it is batched with, and the recognizer
/// runs a few shapes (model/shapes.rs); wider lines are squeezed into the last. Each is about 5/4 of
/// the last, a multiple of 8 (the recognizer's stride). Any padding moves what PP-OCRv4 reads (its
/// global mixing sees the whole width): of the test photos' 235 lines, these widths change the text
/// of 3 and move a kept line's score by 0.016 at most, against 0.046 and 4 lines for 320 / 480 /
/// 720 / ... (tools/ocr_buckets.py; docs/ocr.md, "Widths").
pub const RECOGNIZER_WIDTHS: [u32; 10] = [320, 400, 496, 624, 784, 976, 1224, 1528, 1912, 2560];

/// A photo's view for the text detector, and the pixels its lines are cut from.
#[derive(Debug, Clone)]
pub struct OcrView {
    /// The detector's input, each side a multiple of 32.
    pub view: RgbImage,
    /// The decoded photo, upright, at `1 / denom` of its full size.
    pub pixels: Arc<RgbImage>,
    /// Decoded pixels per pixel of the upright full-size photo.
    pub scale: f64,
    /// The upright full-size photo's width and height.
    pub full_size: (u32, u32),
}

impl OcrView {
    /// The pixels it keeps while it waits for the detector: the view and the decode lines are cut from.
    pub fn kept_bytes(&self) -> u64 {
        (self.view.as_raw().len() + self.pixels.as_raw().len()) as u64
    }
}

/// A line at the recognizer's height, and the input width it is padded to.
#[derive(Debug, Clone)]
pub struct LineInput {
    pub image: RgbImage,
    pub width: u32,
}

/// The detector's view of a decoded photo (`image`, of an upright `full_size` photo).
pub fn ocr_view(image: Arc<RgbImage>, full_size: (u32, u32), resolution: u32) -> OcrView {
    let (width, height) = view_size(full_size, resolution);
    OcrView {
        view: resize_linear(&image, width, height),
        scale: f64::from(image.width()) / f64::from(full_size.0),
        pixels: image,
        full_size,
    }
}

/// The view's size: the short side scaled down to `resolution` and the long side to
/// [`MAX_VIEW_SIDE`] (never up), truncated, then each side rounded to a multiple of 32 (at least 32).
pub fn view_size((width, height): (u32, u32), resolution: u32) -> (u32, u32) {
    let ratio = (f64::from(resolution) / f64::from(width.min(height)))
        .min(f64::from(MAX_VIEW_SIDE) / f64::from(width.max(height)))
        .min(1.0);
    let side = |s: u32| (((f64::from(s) * ratio).trunc() / 32.0).round_ties_even() as u32 * 32).max(32);
    (side(width), side(height))
}

/// The line whose box has these `corners` (top-left, top-right, bottom-right, bottom-left, in
/// full-size pixels) cut from the decoded `pixels` (`scale` of a pixel each per full-size pixel),
/// turned upright when 1.5 times taller than wide.
pub fn line_crop(pixels: &RgbImage, scale: f64, corners: &[[f32; 2]; 4]) -> RgbImage {
    let points = corners.map(|[x, y]| [f64::from(x) * scale, f64::from(y) * scale]);
    let length = |a: [f64; 2], b: [f64; 2]| (a[0] - b[0]).hypot(a[1] - b[1]);
    let width = length(points[0], points[1]).max(length(points[2], points[3])) as u32;
    let height = length(points[0], points[3]).max(length(points[1], points[2])) as u32;
    let crop = warp(pixels, &points, width.max(1), height.max(1));
    // numpy's rot90: a quarter turn counter-clockwise.
    if f64::from(crop.height()) / f64::from(crop.width()) >= 1.5 { image::imageops::rotate270(&crop) } else { crop }
}

/// A line for the classifier: at height 48, at most 192 wide (the tower pads it).
pub fn classifier_input(line: &RgbImage) -> RgbImage {
    resize_linear(line, fitted_width(line, CLASSIFIER_WIDTH), LINE_HEIGHT)
}

/// A line for the recognizer: at height 48, padded to the narrowest of [`RECOGNIZER_WIDTHS`] that
/// holds it (`Declared` sizes), or to the next 8 px at least [`MIN_RECOGNIZER_WIDTH`] (`Exact`: the
/// recognizer's stride, which reads as RapidOCR reads a line alone).
pub fn recognizer_input(line: &RgbImage, sizes: OcrSizes) -> LineInput {
    let widest = RECOGNIZER_WIDTHS[RECOGNIZER_WIDTHS.len() - 1];
    let wanted = fitted_width(line, widest);
    let width = match sizes {
        OcrSizes::Exact => wanted.next_multiple_of(8).max(MIN_RECOGNIZER_WIDTH),
        _ => RECOGNIZER_WIDTHS.into_iter().find(|&width| width >= wanted).unwrap_or(widest),
    };
    LineInput { image: resize_linear(line, wanted, LINE_HEIGHT), width }
}

/// `ceil(48 * w / h)`, at most `cap`, at least 1.
fn fitted_width(line: &RgbImage, cap: u32) -> u32 {
    let aspect = f64::from(line.width()) / f64::from(line.height());
    ((f64::from(LINE_HEIGHT) * aspect).ceil() as u32).clamp(1, cap)
}

/// OpenCV's `INTER_LINEAR` resize of 8-bit pixels: each output pixel's centre mapped to the
/// source, two taps each way, edges repeated, no antialiasing when shrinking; as OpenCV computes it,
/// in fixed point (each tap's weight in 11 bits, each pass separable: the rows, then the columns).
pub fn resize_linear(image: &RgbImage, width: u32, height: u32) -> RgbImage {
    /// OpenCV's `INTER_RESIZE_COEF_BITS`.
    const BITS: u32 = 11;
    let one = 1i32 << BITS;
    let taps = |out: u32, source: u32| -> Vec<(usize, usize, i32)> {
        let scale = f64::from(source) / f64::from(out);
        (0..out)
            .map(|i| {
                let at = ((f64::from(i) + 0.5) * scale - 0.5).max(0.0);
                let first = (at.floor() as u32).min(source - 1);
                let weight = if first >= source - 1 { 0 } else { ((at - at.floor()) * f64::from(one)).round() as i32 };
                (first as usize, (first + 1).min(source - 1) as usize, weight)
            })
            .collect()
    };
    let (columns, rows) = (taps(width, image.width()), taps(height, image.height()));
    let (source, stride) = (image.as_raw(), image.width() as usize * 3);
    // One source row through the columns' taps: values in 11 bits of fraction.
    let across = |y: usize| -> Vec<i32> {
        let row = &source[y * stride..(y + 1) * stride];
        let mut out = Vec::with_capacity(columns.len() * 3);
        for &(x0, x1, weight) in &columns {
            for k in 0..3 {
                let (a, b) = (i32::from(row[x0 * 3 + k]), i32::from(row[x1 * 3 + k]));
                out.push(a * (one - weight) + b * weight);
            }
        }
        out
    };
    let mut resized = Vec::with_capacity(width as usize * height as usize * 3);
    let mut cached: [(usize, Vec<i32>); 2] = [(usize::MAX, Vec::new()), (usize::MAX, Vec::new())];
    for &(y0, y1, weight) in &rows {
        for (slot, y) in [(0, y0), (1, y1)] {
            if cached[slot].0 != y {
                cached[slot] = match cached.iter().position(|(at, _)| *at == y) {
                    Some(other) => cached[other].clone(),
                    None => (y, across(y)),
                };
            }
        }
        let half = 1i32 << (2 * BITS - 1);
        resized.extend(cached[0].1.iter().zip(&cached[1].1).map(|(&top, &bottom)| {
            // Both passes' weights: 22 bits of fraction, rounded off.
            ((top * (one - weight) + bottom * weight + half) >> (2 * BITS)).clamp(0, 255) as u8
        }));
    }
    RgbImage::from_raw(width, height, resized).expect("three values a pixel")
}

/// `image` warped so that `quad` fills a `width` x `height` crop (its corners onto the crop's
/// corners, `(0, 0)` to `(width, height)`, as `cv2.getPerspectiveTransform` places them),
/// sampled bicubically (OpenCV's a = -0.75) with the edge pixels repeated outside.
fn warp(image: &RgbImage, quad: &[[f64; 2]; 4], width: u32, height: u32) -> RgbImage {
    let map = square_to_quad(quad);
    RgbImage::from_fn(width, height, |x, y| {
        let (u, v) = (f64::from(x) / f64::from(width), f64::from(y) / f64::from(height));
        let [sx, sy] = map(u, v);
        Rgb(bicubic(image, sx, sy))
    })
}

/// The projective map of the unit square onto `quad` ((0,0), (1,0), (1,1), (0,1) onto its
/// corners in order), in Heckbert's closed form.
fn square_to_quad(quad: &[[f64; 2]; 4]) -> impl Fn(f64, f64) -> [f64; 2] {
    let [[x0, y0], [x1, y1], [x2, y2], [x3, y3]] = *quad;
    let (sx, sy) = (x0 - x1 + x2 - x3, y0 - y1 + y2 - y3);
    let (dx1, dx2, dy1, dy2) = (x1 - x2, x3 - x2, y1 - y2, y3 - y2);
    let det = dx1 * dy2 - dx2 * dy1;
    let (g, h) =
        if det.abs() < 1e-12 { (0.0, 0.0) } else { ((sx * dy2 - dx2 * sy) / det, (dx1 * sy - sx * dy1) / det) };
    let (a, b, d, e) = (x1 - x0 + g * x1, x3 - x0 + h * x3, y1 - y0 + g * y1, y3 - y0 + h * y3);
    move |u, v| {
        let w = g * u + h * v + 1.0;
        [(a * u + b * v + x0) / w, (d * u + e * v + y0) / w]
    }
}

/// The image at `(x, y)`, bicubically, indices clamped to the image.
fn bicubic(image: &RgbImage, x: f64, y: f64) -> [u8; 3] {
    const A: f64 = -0.75;
    let weights = |t: f64| {
        let w = |d: f64| {
            let d = d.abs();
            if d <= 1.0 {
                ((A + 2.0) * d - (A + 3.0)) * d * d + 1.0
            } else if d < 2.0 {
                ((A * d - 5.0 * A) * d + 8.0 * A) * d - 4.0 * A
            } else {
                0.0
            }
        };
        [w(t + 1.0), w(t), w(1.0 - t), w(2.0 - t)]
    };
    let (x0, y0) = (x.floor(), y.floor());
    let (wx, wy) = (weights(x - x0), weights(y - y0));
    let clamp = |v: f64, size: u32| v.clamp(0.0, f64::from(size - 1)) as u32;
    let mut sum = [0.0f64; 3];
    for (j, wyj) in wy.iter().enumerate() {
        let row = clamp(y0 - 1.0 + j as f64, image.height());
        for (i, wxi) in wx.iter().enumerate() {
            let pixel = image.get_pixel(clamp(x0 - 1.0 + i as f64, image.width()), row);
            for (k, s) in sum.iter_mut().enumerate() {
                *s += wyj * wxi * f64::from(pixel.0[k]);
            }
        }
    }
    sum.map(|s| s.round().clamp(0.0, 255.0) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_is_scaled_down_only_and_in_multiples_of_32() {
        assert_eq!(view_size((4000, 3000), 736), (992, 736), "int(4000 * 736 / 3000) = 981 -> 992");
        assert_eq!(view_size((384, 191), 736), (384, 192), "never up");
        assert_eq!(view_size((1680, 1050), 736), (1184, 736));
        assert_eq!(view_size((16000, 500), 736), (4096, 128), "a panorama's long side capped");
        assert_eq!(view_size((10, 10), 736), (32, 32));
    }

    #[test]
    fn a_box_already_upright_is_copied() {
        let pixels = RgbImage::from_fn(100, 60, |x, y| Rgb([x as u8, y as u8, 9]));
        // Full-size corners: (40, 20)-(140, 60), i.e. (20, 10)-(70, 30) in the decoded pixels.
        let crop = line_crop(&pixels, 0.5, &[[40.0, 20.0], [140.0, 20.0], [140.0, 60.0], [40.0, 60.0]]);
        assert_eq!(crop.dimensions(), (50, 20));
        assert_eq!(crop.get_pixel(0, 0).0, [20, 10, 9]);
        assert_eq!(crop.get_pixel(49, 19).0, [69, 29, 9]);
    }

    #[test]
    fn a_tall_crop_is_turned_a_quarter_counter_clockwise() {
        let pixels = RgbImage::from_fn(20, 60, |_, y| Rgb([if y < 30 { 255 } else { 0 }, 0, 0]));
        let crop = line_crop(&pixels, 1.0, &[[0.0, 0.0], [20.0, 0.0], [20.0, 60.0], [0.0, 60.0]]);
        // The top half (red) goes left.
        assert_eq!(crop.dimensions(), (60, 20));
        assert_eq!((crop.get_pixel(5, 10).0[0], crop.get_pixel(55, 10).0[0]), (255, 0));
    }

    #[test]
    fn lines_go_to_height_48_and_the_narrowest_width_that_holds_them() {
        let line = RgbImage::new(200, 20);
        let declared = |line: &RgbImage| recognizer_input(line, OcrSizes::Declared);
        let input = declared(&line);
        assert_eq!((input.image.dimensions(), input.width), ((480, 48), 496));
        assert_eq!(declared(&RgbImage::new(83, 10)).width, 400, "ceil(48 * 83 / 10) = 399");
        assert_eq!(declared(&RgbImage::new(84, 10)).width, 496, "ceil(48 * 84 / 10) = 404");
        assert_eq!(declared(&RgbImage::new(10, 20)).width, 320);
        assert_eq!(classifier_input(&line).dimensions(), (192, 48), "capped at 192");
        assert_eq!(declared(&RgbImage::new(5000, 20)).image.width(), 2560, "squeezed into the last");
        // Exact: the next 8 px, at least 320.
        let exact = |line: &RgbImage| recognizer_input(line, OcrSizes::Exact);
        assert_eq!((exact(&line).image.width(), exact(&line).width), (480, 480));
        assert_eq!(exact(&RgbImage::new(84, 10)).width, 408, "ceil(48 * 84 / 10) = 404");
        assert_eq!(exact(&RgbImage::new(10, 20)).width, 320);
        assert_eq!(exact(&RgbImage::new(5000, 20)).width, 2560);
    }

    #[test]
    fn the_linear_resize_keeps_flat_areas_and_halves_by_averaging_pairs() {
        let flat = RgbImage::from_pixel(30, 30, Rgb([7, 8, 9]));
        assert!(resize_linear(&flat, 13, 41).pixels().all(|p| p.0 == [7, 8, 9]));
        let stripes = RgbImage::from_fn(8, 2, |x, _| Rgb([if x % 2 == 0 { 0 } else { 100 }; 3]));
        assert!(resize_linear(&stripes, 4, 1).pixels().all(|p| p.0 == [50; 3]), "OpenCV's taps at 2x + 0.5");
    }
}
