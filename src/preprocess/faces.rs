//! The face views, made on the decode threads: the detector's canvas (the photo letterboxed into a
//! square, keeping its aspect: into the top-left of a black one as InsightFace and OpenCV feed their
//! detectors, or centred in a grey one as YOLOv5-face's `letterbox` does), and once the detector
//! has found faces on it, each face aligned to the recognizer's chip (ArcFace's 112 x 112, dlib's
//! 150 x 150).
//!
//! A chip is cut from pixels at least as fine as the chip: from the canvas where it holds the face
//! at the chip's size, else from the photo decoded again, from the bytes kept with the canvas
//! until the detector has answered, at the DCT scale that does (docs/design.md, "Finer pixels").

use std::{fmt, sync::Arc};

use fast_image_resize::{FilterType, ResizeAlg, ResizeOptions, Resizer};
use image::RgbImage;

use super::PreprocessError;
use crate::decode::{DecodeOptions, Decoded};

/// A recognizer's face chip: its side, and where the five landmarks (eyes, nose, mouth corners)
/// go on it. The chip is part of a recognizer's format: a model fed faces placed otherwise
/// answers embeddings that match worse, silently.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chip {
    pub side: u32,
    pub template: [[f32; 2]; 5],
}

/// ArcFace's 112 x 112 chip (InsightFace's `norm_crop`).
pub const ARCFACE_CHIP: Chip = Chip {
    side: 112,
    template: [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
};

/// dlib's 150 x 150 chip (`get_face_chip_details`: padding 0.25 around its 68-point mean face),
/// for a detector's five points: each eye's six points averaged, the nose tip (30) and the mouth
/// corners (48, 54) of that mean face, mapped by (p + 0.25) / 1.5 x 150 (tools/dlib_template.py;
/// docs/faces-real-weights.md).
pub const DLIB_CHIP: Chip = Chip {
    side: 150,
    template: [[47.5492, 46.599], [100.4761, 46.599], [74.0127, 76.5625], [50.4149, 103.0233], [97.6104, 103.0233]],
};

/// The version of how chips are cut (their templates, the pixels they come from): part of a
/// recognizer's id, since embeddings of chips cut otherwise do not compare. Raise it whenever a
/// chip changes. 2: dlib's template from its mean face (issue 35). 3: faces the canvas holds
/// smaller than their chip cut from a finer decode of the photo.
pub const CHIP_RULE: u32 = 3;

/// Where a detector wants the photo on its canvas, and what around it: part of a detector's format,
/// since a detector fed the photo placed otherwise answers boxes shifted, or misses faces at the
/// padding's edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Letterbox {
    /// In the top-left corner, black around it (InsightFace's SCRFD, OpenCV's YuNet).
    TopLeft,
    /// Centred, the padding split with its odd pixel at the bottom or right, grey 114 around it
    /// (YOLOv5's `letterbox`).
    Centred,
}

/// The detector's canvas: its side and its letterbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanvasLayout {
    pub side: u32,
    pub letterbox: Letterbox,
}

/// A photo on the face detector's canvas.
#[derive(Debug, Clone)]
pub struct FaceCanvas {
    /// Shared: the detector reads it, and the faces it finds are cut from it afterwards.
    pub image: Arc<RgbImage>,
    /// Canvas pixels per pixel of the upright full-size photo.
    pub scale: f32,
    /// Where the photo's top-left corner lies on the canvas, in canvas pixels.
    pub offset: [f32; 2],
    /// The upright full-size photo's width and height.
    pub full_size: (u32, u32),
    /// The photo's bytes, kept until the detector has answered, for faces too small on the canvas.
    pub photo: Option<KeptBytes>,
}

/// A photo's bytes (and whatever they hold, such as their share of the fetched-bytes budget),
/// shared by whoever may decode them again.
#[derive(Clone)]
pub struct KeptBytes(Arc<dyn AsRef<[u8]> + Send + Sync>);

impl KeptBytes {
    pub fn new(bytes: impl AsRef<[u8]> + Send + Sync + 'static) -> Self {
        KeptBytes(Arc::new(bytes))
    }
}

impl AsRef<[u8]> for KeptBytes {
    fn as_ref(&self) -> &[u8] {
        (*self.0).as_ref()
    }
}

impl fmt::Debug for KeptBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeptBytes({} bytes)", self.as_ref().len())
    }
}

impl FaceCanvas {
    /// The pixels it keeps while it waits for the detector (its bytes are the fetched budget's).
    pub fn kept_bytes(&self) -> u64 {
        self.image.as_raw().len() as u64
    }

    /// A canvas position `[x, y]` in pixels of the upright full-size photo.
    pub fn to_photo(&self, [x, y]: [f32; 2]) -> [f32; 2] {
        [(x - self.offset[0]) / self.scale, (y - self.offset[1]) / self.scale]
    }
}

/// `image` (the decode of an upright `full_size` photo, at whatever DCT scale) resized into a
/// `layout.side` square canvas, its long side filling it, placed as `layout.letterbox` says.
pub fn canvas(image: &RgbImage, full_size: (u32, u32), layout: CanvasLayout) -> Result<FaceCanvas, PreprocessError> {
    let side = layout.side;
    let (width, height) = full_size;
    // InsightFace's arithmetic, truncating: the short side is int(side * short / long).
    let (new_width, new_height) = if height > width {
        ((f64::from(side) * f64::from(width) / f64::from(height)) as u32, side)
    } else {
        (side, (f64::from(side) * f64::from(height) / f64::from(width)) as u32)
    };
    let (new_width, new_height) = (new_width.max(1), new_height.max(1));
    let mut resized = RgbImage::new(new_width, new_height);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    Resizer::new().resize(image, &mut resized, &options).map_err(|e| PreprocessError::Resize(e.to_string()))?;
    // YOLOv5's `letterbox` rounds `dw / 2 - 0.1`: the smaller half before, the odd pixel after.
    let (x, y, fill) = match layout.letterbox {
        Letterbox::TopLeft => (0, 0, 0),
        Letterbox::Centred => ((side - new_width) / 2, (side - new_height) / 2, 114),
    };
    let mut canvas = RgbImage::from_pixel(side, side, image::Rgb([fill; 3]));
    image::imageops::replace(&mut canvas, &resized, i64::from(x), i64::from(y));
    let (scale, offset) = (new_height as f32 / height as f32, [x as f32, y as f32]);
    Ok(FaceCanvas { image: Arc::new(canvas), scale, offset, full_size, photo: None })
}

/// How to decode the photo again for the faces with these `landmarks` (canvas pixels): at the
/// coarsest DCT scale that holds each face the canvas would enlarge into its chip at least at the
/// chip's size (the decode's 90% rule: enlarged by at most 1.11x; full size for every format but
/// JPEG), or `None` where the canvas holds every face at its chip's size.
pub fn finer_decode(
    canvas: &FaceCanvas,
    landmarks: &[[[f32; 2]; 5]],
    chip: &Chip,
    max_pixels: u64,
) -> Option<DecodeOptions> {
    let enlargement = landmarks.iter().map(|points| enlargement(points, chip)).fold(1.0, f32::max);
    if enlargement <= 1.0 {
        return None;
    }
    let short = canvas.full_size.0.min(canvas.full_size.1);
    // Chip pixels per full-size pixel, over the photo's short side.
    let target = (f64::from(short) * f64::from(enlargement * canvas.scale)).ceil() as u32;
    Some(if target >= short {
        DecodeOptions::full_size(max_pixels)
    } else {
        DecodeOptions::for_input(target, max_pixels)
    })
}

/// Each face's chip, and how many pixels of what it was cut from stand for one of the full-size
/// photo: cut from the canvas where it holds the face at least at the chip's size, else from
/// `finer`, the photo decoded as [`finer_decode`] says.
pub fn chips(
    canvas: &FaceCanvas,
    landmarks: &[[[f32; 2]; 5]],
    chip: &Chip,
    finer: Option<&Decoded>,
) -> Vec<(RgbImage, f32)> {
    let cut = |points: &[[f32; 2]; 5]| match finer {
        Some(photo) if enlargement(points, chip) > 1.0 => {
            let scale = photo.image.width() as f32 / photo.full_size.0 as f32;
            let on_photo = points.map(|point| canvas.to_photo(point).map(|v| v * scale));
            (aligned_face(&photo.image, &on_photo, chip), scale)
        }
        _ => (aligned_face(&canvas.image, points, chip), canvas.scale),
    };
    landmarks.iter().map(cut).collect()
}

/// Chip pixels per pixel of `landmarks`' image: over 1, the chip would enlarge the face.
fn enlargement(landmarks: &[[f32; 2]; 5], chip: &Chip) -> f32 {
    let [a, b, ..] = similarity(landmarks, &chip.template);
    a.hypot(b) as f32
}

/// The face with these `landmarks` (canvas pixels) aligned to `chip`: the least-squares similarity
/// (rotation, uniform scale, shift; Umeyama's, no reflection) from the landmarks to the chip's
/// template, applied by bilinear sampling with black outside the canvas, as OpenCV's `warpAffine`.
pub fn aligned_face(canvas: &RgbImage, landmarks: &[[f32; 2]; 5], chip: &Chip) -> RgbImage {
    let [a, b, tx, ty] = similarity(landmarks, &chip.template);
    // The inverse of x' = [a -b; b a] x + t, to find each crop pixel's source.
    let norm = a * a + b * b;
    let (ia, ib) = (a / norm, -b / norm);
    let mut crop = RgbImage::new(chip.side, chip.side);
    for (x, y, pixel) in crop.enumerate_pixels_mut() {
        let (dx, dy) = (x as f64 - tx, y as f64 - ty);
        let (sx, sy) = (ia * dx - ib * dy, ib * dx + ia * dy);
        pixel.0 = bilinear(canvas, sx, sy);
    }
    crop
}

/// `[a, b, tx, ty]` minimising the squared distances from `[a -b; b a] p + t` to `q`: the similarity
/// Umeyama's method gives in two dimensions.
fn similarity(from: &[[f32; 2]; 5], to: &[[f32; 2]; 5]) -> [f64; 4] {
    let mean = |points: &[[f32; 2]; 5]| {
        let n = points.len() as f64;
        [
            points.iter().map(|p| f64::from(p[0])).sum::<f64>() / n,
            points.iter().map(|p| f64::from(p[1])).sum::<f64>() / n,
        ]
    };
    let (mp, mq) = (mean(from), mean(to));
    let (mut dot, mut cross, mut spread) = (0.0, 0.0, 0.0);
    for (p, q) in from.iter().zip(to) {
        let (px, py) = (f64::from(p[0]) - mp[0], f64::from(p[1]) - mp[1]);
        let (qx, qy) = (f64::from(q[0]) - mq[0], f64::from(q[1]) - mq[1]);
        dot += px * qx + py * qy;
        cross += px * qy - py * qx;
        spread += px * px + py * py;
    }
    // Landmarks all in one place have no similarity to find: a degenerate (but finite) map.
    let spread = spread.max(f64::EPSILON);
    let (a, b) = (dot / spread, cross / spread);
    [a, b, mq[0] - (a * mp[0] - b * mp[1]), mq[1] - (b * mp[0] + a * mp[1])]
}

/// The canvas at `(x, y)`, bilinearly, pixels outside it black.
fn bilinear(image: &RgbImage, x: f64, y: f64) -> [u8; 3] {
    let (x0, y0) = (x.floor(), y.floor());
    let (fx, fy) = (x - x0, y - y0);
    let (width, height) = (i64::from(image.width()), i64::from(image.height()));
    let at = |xi: i64, yi: i64| -> [f64; 3] {
        if xi < 0 || yi < 0 || xi >= width || yi >= height {
            return [0.0; 3];
        }
        image.get_pixel(xi as u32, yi as u32).0.map(f64::from)
    };
    let (x0, y0) = (x0 as i64, y0 as i64);
    let (p00, p10, p01, p11) = (at(x0, y0), at(x0 + 1, y0), at(x0, y0 + 1), at(x0 + 1, y0 + 1));
    std::array::from_fn(|c| {
        let top = p00[c] * (1.0 - fx) + p10[c] * fx;
        let bottom = p01[c] * (1.0 - fx) + p11[c] * fx;
        (top * (1.0 - fy) + bottom * fy).round().clamp(0.0, 255.0) as u8
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP_LEFT: CanvasLayout = CanvasLayout { side: 640, letterbox: Letterbox::TopLeft };

    #[test]
    fn the_canvas_keeps_the_aspect_in_its_top_left_corner() {
        let photo = RgbImage::from_pixel(300, 200, image::Rgb([200, 100, 50]));
        let canvas = canvas(&photo, (1200, 800), TOP_LEFT).unwrap();
        // InsightFace's scale is the short side's: 426 rows for 800.
        assert_eq!(canvas.scale, 426.0 / 800.0);
        assert_eq!(canvas.image.get_pixel(639, 425).0, [200, 100, 50]);
        assert_eq!(canvas.image.get_pixel(0, 426).0, [0, 0, 0], "below the photo: 640 * 800 / 1200 = 426 rows");
        let tall = super::canvas(&photo, (800, 1200), TOP_LEFT).unwrap();
        assert_eq!((tall.scale, tall.image.get_pixel(426, 0).0), (640.0 / 1200.0, [0, 0, 0]));
    }

    #[test]
    fn a_centred_canvas_pads_grey_on_both_sides_the_odd_pixel_after() {
        let photo = RgbImage::from_pixel(300, 200, image::Rgb([200, 100, 50]));
        let layout = CanvasLayout { side: 640, letterbox: Letterbox::Centred };
        // 426 rows of 640: 214 of padding, 107 above and 107 below.
        let wide = canvas(&photo, (1200, 800), layout).unwrap();
        assert_eq!(wide.offset, [0.0, 107.0]);
        let column: Vec<[u8; 3]> = [0, 106, 107, 532, 533, 639].map(|y| wide.image.get_pixel(0, y).0).into();
        let (grey, photo_pixel) = ([114; 3], [200, 100, 50]);
        assert_eq!(column, [grey, grey, photo_pixel, photo_pixel, grey, grey]);
        // 853 x 1280 is 426 columns of 640: 107 left, 107 right; 427 would leave 106 and 107.
        let tall = canvas(&photo, (853, 1280), layout).unwrap();
        assert_eq!(tall.offset, [107.0, 0.0]);
        assert_eq!(tall.to_photo([107.0 + 32.0, 64.0]), [64.0, 128.0]);
        let odd = canvas(&photo, (854, 1280), layout).unwrap();
        assert_eq!((odd.offset, odd.image.get_pixel(639, 0).0), ([106.0, 0.0], grey));
    }

    #[test]
    fn the_similarity_maps_a_scaled_turned_template_back_onto_it() {
        // The template turned 30 degrees, doubled and moved: the fit undoes exactly that.
        let (angle, scale, shift) = (30f64.to_radians(), 2.0, [100.0, 40.0]);
        let template = ARCFACE_CHIP.template;
        let moved = template.map(|[x, y]| {
            let (x, y) = (f64::from(x), f64::from(y));
            let (c, s) = (angle.cos() * scale, angle.sin() * scale);
            [(c * x - s * y + shift[0]) as f32, (s * x + c * y + shift[1]) as f32]
        });
        let [a, b, tx, ty] = similarity(&moved, &template);
        for (p, q) in moved.iter().zip(template) {
            let (x, y) = (f64::from(p[0]), f64::from(p[1]));
            assert!((a * x - b * y + tx - f64::from(q[0])).abs() < 1e-3);
            assert!((b * x + a * y + ty - f64::from(q[1])).abs() < 1e-3);
        }
        assert!(((a * a + b * b).sqrt() - 0.5).abs() < 1e-6, "the scale is undone");
    }

    #[test]
    fn a_face_already_on_the_template_is_copied_and_the_outside_is_black() {
        let mut canvas = RgbImage::new(112, 112);
        canvas.enumerate_pixels_mut().for_each(|(x, y, p)| p.0 = [x as u8, y as u8, 7]);
        let crop = aligned_face(&canvas, &ARCFACE_CHIP.template, &ARCFACE_CHIP);
        assert_eq!(crop, canvas, "the identity warp");
        let shifted = ARCFACE_CHIP.template.map(|[x, y]| [x + 10.0, y]);
        let crop = aligned_face(&canvas, &shifted, &ARCFACE_CHIP);
        assert_eq!(crop.get_pixel(0, 5).0, [10, 5, 7]);
        assert_eq!(crop.get_pixel(111, 5).0, [0, 0, 0], "x 121 lies outside the 112-wide canvas");
    }

    #[test]
    fn a_face_the_canvas_holds_smaller_than_its_chip_is_cut_from_a_finer_decode() {
        // A 4000 x 3000 photo on the 640 canvas (scale 0.16): a face whose eyes lie 35.2 canvas px
        // apart fits ArcFace's chip; one at 11.7 px would be enlarged 3x, so the photo is decoded
        // again with its short side covering 3000 x 0.16 x 3 = 1440 px (a JPEG's 1/2 scale).
        let mut canvas = canvas(&RgbImage::new(400, 300), (4000, 3000), TOP_LEFT).unwrap();
        canvas.scale = 0.16;
        let fits = ARCFACE_CHIP.template;
        let small = ARCFACE_CHIP.template.map(|[x, y]| [x / 3.0 + 200.0, y / 3.0 + 100.0]);
        assert_eq!(finer_decode(&canvas, &[fits], &ARCFACE_CHIP, 1 << 30), None);
        let options = finer_decode(&canvas, &[fits, small], &ARCFACE_CHIP, 1 << 30).unwrap();
        assert_eq!((options.target_short_side, options.max_pixels), (Some(1440), 1 << 30));
        // Where that would pass the photo's own side, it is decoded at full size.
        canvas.scale = 0.5;
        let full = finer_decode(&canvas, &[small], &ARCFACE_CHIP, 1 << 30).unwrap();
        assert_eq!(full.target_short_side, None);

        // The small face comes from the finer pixels (white), the other from the canvas (black).
        canvas.scale = 0.16;
        let finer = Decoded {
            image: RgbImage::from_pixel(2000, 1500, image::Rgb([255; 3])),
            format: crate::decode::Format::Jpeg,
            full_size: (4000, 3000),
            scale_denom: 2,
            metadata: Default::default(),
        };
        let cut = chips(&canvas, &[fits, small], &ARCFACE_CHIP, Some(&finer));
        assert_eq!((cut[0].1, cut[1].1), (0.16, 0.5), "pixels per full-size pixel of each source");
        assert_eq!((cut[0].0.get_pixel(56, 56).0, cut[1].0.get_pixel(56, 56).0), ([0; 3], [255; 3]));
    }

    #[test]
    fn a_dlib_chip_is_150_wide_and_frames_the_face_closer() {
        // The same face on both chips: dlib's template puts the eyes 0.35 of its side apart,
        // ArcFace's 0.31 (dlib's padding 0.25 is around the mean face's inner points only).
        let share = |chip: &Chip| (chip.template[1][0] - chip.template[0][0]) / chip.side as f32;
        assert!(share(&DLIB_CHIP) > share(&ARCFACE_CHIP) + 0.03, "{} vs {}", share(&DLIB_CHIP), share(&ARCFACE_CHIP));
        let canvas = RgbImage::from_pixel(300, 300, image::Rgb([9, 9, 9]));
        let crop = aligned_face(&canvas, &ARCFACE_CHIP.template.map(|[x, y]| [x + 80.0, y + 80.0]), &DLIB_CHIP);
        assert_eq!((crop.width(), crop.height(), crop.get_pixel(75, 75).0), (150, 150, [9, 9, 9]));
    }
}
