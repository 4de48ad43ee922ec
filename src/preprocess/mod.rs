//! Preprocess stage: a decoded photo -> the model's S x S square of RGB bytes, exactly as CLIP's
//! reference pipeline resizes and crops (torchvision on Pillow images): resize with antialiased
//! filtering, then center crop S x S. The numbers come from a [`Transform`]: CLIP ViT-B/32's by
//! default, or a model folder's `preprocessor_config.json`. The square stays bytes until its batch
//! is laid out; rescaling and normalising belong to the image tower (`model::PixelBatch`).
//!
//! One decode, several views: [`decode_views`] is the one sequence from bytes to what a photo is
//! used as (decode once, at the scale the largest view needs, then each view of those pixels): the
//! model's square for the photos that need an embedding ([`SquareFor`]), the luma that pixel
//! signals are measured on (`signals`), the face detector's canvas (`faces`), the text
//! detector's view (`ocr`) and the object detector's (`objects`) when the request asks for them.
//! The pipeline runs it on its decode threads; the benches run it as [`decode_square`].

mod faces;
mod objects;
mod ocr;

use fast_image_resize::{FilterType, ResizeAlg, ResizeOptions, Resizer};
use image::{GrayImage, RgbImage};

pub use self::{
    faces::{
        ARCFACE_CHIP, CHIP_RULE, CanvasLayout, Chip, DLIB_CHIP, FaceCanvas, KeptBytes, Letterbox, chips, finer_decode,
    },
    objects::{ObjectLayout, ObjectView, Placed, object_view, pet_crop},
    ocr::{
        CLASSIFIER_WIDTH, LINE_HEIGHT, LineInput, MAX_VIEW_SIDE, MIN_RECOGNIZER_WIDTH, OcrView, RECOGNIZER_WIDTHS,
        classifier_input, line_crop, ocr_view, recognizer_input, view_size,
    },
};
use crate::{
    decode::{DecodeError, DecodeOptions, Decoded, Metadata, decode},
    signals::luma_size,
};

/// CLIP's per-channel statistics (OpenAI CLIP, `_transform`).
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
#[allow(clippy::excessive_precision)] // the digits CLIP publishes, kept recognisable
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

/// How a photo becomes model input.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Transform {
    pub resize: Resize,
    /// Side of the center crop; `None` keeps the resized square whole.
    pub crop: Option<u32>,
    pub filter: Filter,
    /// Multiplies 0..255 pixel values before normalising (1/255 for CLIP).
    pub rescale: f32,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resize {
    /// The short side becomes this, the aspect ratio stays (torchvision's `Resize(int)`).
    ShortestEdge(u32),
    /// Both sides become this, the aspect ratio goes (SigLIP-style `{height, width}`).
    Square(u32),
}

/// The resampling filter, named as Pillow names it; both are antialiased when shrinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Filter {
    Bicubic,
    Bilinear,
}

impl Transform {
    /// CLIP's own preprocessing for a model taking `size` x `size` input.
    pub fn clip(size: u32) -> Self {
        Transform {
            resize: Resize::ShortestEdge(size),
            crop: Some(size),
            filter: Filter::Bicubic,
            rescale: 1.0 / 255.0,
            mean: CLIP_MEAN,
            std: CLIP_STD,
        }
    }

    /// Side of the square the model takes.
    pub fn side(&self) -> u32 {
        self.crop.unwrap_or(self.resize_side())
    }

    /// The short side of the photo once resized, before the crop: decoding may shrink to this.
    pub fn resize_side(&self) -> u32 {
        match self.resize {
            Resize::ShortestEdge(side) | Resize::Square(side) => side,
        }
    }

    /// Width and height of a `width` x `height` photo after the resize.
    fn resized_dims(&self, width: u32, height: u32) -> (u32, u32) {
        match self.resize {
            Resize::ShortestEdge(side) => shortest_edge_dims(width, height, side),
            Resize::Square(side) => (side, side),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PreprocessError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("resize failed: {0}")]
    Resize(String),
}

/// Which photos get the image tower's square.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SquareFor {
    /// Every photo.
    #[default]
    Every,
    /// Only a photo whose metadata has a capture time (`taken_at`).
    Timed,
    /// No photo.
    NoPhoto,
}

/// The views of one photo that a request asks for.
#[derive(Debug, Clone)]
pub struct Views {
    /// How the model's square is made. The decode is sized for it whether the square is made or
    /// not, so that the other views are the same pixels either way.
    pub square: Transform,
    /// Which photos the square is made for.
    pub square_for: SquareFor,
    /// Whether the luma is wanted too.
    pub luma: bool,
    /// The face detector's canvas, when faces are wanted.
    pub canvas: Option<CanvasLayout>,
    /// The text detector's view, at this resolution (CLIPFN_OCR_RESOLUTION), when OCR is wanted.
    pub ocr: Option<u32>,
    /// The object detector's view, when objects are wanted.
    pub objects: Option<ObjectLayout>,
    /// Whether the object view keeps the decoded photo, to cut pets from.
    pub pet_crops: bool,
}

impl Views {
    /// Whether a detector waits for one of them.
    pub fn for_a_detector(&self) -> bool {
        self.canvas.is_some() || self.ocr.is_some() || self.objects.is_some()
    }
}

/// One photo's views.
pub struct Viewed {
    /// Present when `square_for` says this photo gets one.
    pub square: Option<RgbImage>,
    /// Present when asked for: the luma of the whole photo, at the size the pixel signals are
    /// measured at (`signals::luma_size`).
    pub luma: Option<GrayImage>,
    /// Present when asked for.
    pub canvas: Option<FaceCanvas>,
    /// Present when asked for: the text detector's view, with the decoded pixels its lines are cut
    /// from.
    pub ocr: Option<OcrView>,
    /// Present when asked for: the object detector's view.
    pub objects: Option<ObjectView>,
    /// The upright photo's width and height at its full size.
    pub full_size: (u32, u32),
    /// When and where it was taken, read from the same bytes by the decode.
    pub metadata: Metadata,
}

/// Decodes `bytes` once, just large enough for the largest view (a JPEG at the smallest DCT scale
/// that still covers the square and the canvas; that also covers the luma signals' sizes), and
/// makes each view of it. The bytes (and whatever they hold, such as their share of the
/// fetched-bytes budget) are let go as soon as they are decoded.
pub fn decode_views(bytes: impl AsRef<[u8]>, views: &Views, max_pixels: u64) -> Result<Viewed, PreprocessError> {
    let decoded = decode(bytes.as_ref(), &decode_options(views, max_pixels))?;
    drop(bytes);
    let luma = views.luma.then(|| luma_view(&decoded.image)).transpose()?;
    let canvas = views.canvas.map(|layout| faces::canvas(&decoded.image, decoded.full_size, layout)).transpose()?;
    let square = match views.square_for {
        SquareFor::Every => true,
        SquareFor::Timed => decoded.metadata.taken_at.is_some(),
        SquareFor::NoPhoto => false,
    };
    let square = square.then(|| preprocess(&decoded, &views.square)).transpose()?;
    let mut objects = views.objects.map(|layout| object_view(&decoded.image, decoded.full_size, layout)).transpose()?;
    // Last: they keep the decoded pixels.
    let pets = objects.as_mut().filter(|_| views.pet_crops);
    let photo = (views.ocr.is_some() || pets.is_some()).then(|| std::sync::Arc::new(decoded.image));
    if let Some(view) = pets {
        view.photo = photo.clone();
    }
    let ocr = views.ocr.zip(photo).map(|(resolution, photo)| ocr_view(photo, decoded.full_size, resolution));
    Ok(Viewed { square, luma, canvas, ocr, objects, full_size: decoded.full_size, metadata: decoded.metadata })
}

/// [`decode_views`] for the square alone.
pub fn decode_square(
    bytes: impl AsRef<[u8]>,
    transform: &Transform,
    max_pixels: u64,
) -> Result<RgbImage, PreprocessError> {
    let views = Views {
        square: transform.clone(),
        square_for: SquareFor::Every,
        luma: false,
        canvas: None,
        ocr: None,
        objects: None,
        pet_crops: false,
    };
    decode_views(bytes, &views, max_pixels).map(|viewed| viewed.square.expect("made for every photo"))
}

/// The photo box-filtered to the pixel signals' size (as OpenCV's area filter shrinks), then its
/// luma: in that order, since the resize is fast on RGB and the luma then costs a fraction.
fn luma_view(image: &RgbImage) -> Result<GrayImage, PreprocessError> {
    let (width, height) = luma_size(image.width(), image.height());
    let mut small = RgbImage::new(width, height);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Box));
    Resizer::new().resize(image, &mut small, &options).map_err(|e| PreprocessError::Resize(e.to_string()))?;
    Ok(luma(&small))
}

/// The luma of an RGB image as Pillow's `convert("L")` computes it (ITU-R 601-2 weights, in
/// 16-bit fixed point, rounded), which ImageHash and the album app start from.
pub fn luma(image: &RgbImage) -> GrayImage {
    let values = image
        .as_raw()
        .chunks_exact(3)
        .map(|px| {
            ((u32::from(px[0]) * 19595 + u32::from(px[1]) * 38470 + u32::from(px[2]) * 7471 + 0x8000) >> 16) as u8
        })
        .collect();
    GrayImage::from_raw(image.width(), image.height(), values).expect("one value per pixel")
}

/// How [`decode_views`] decodes for `views`: what the decode memory budget is reckoned for. The
/// text detector's view asks for a decode whose short side is at least its resolution (the DCT
/// scale's 90% rule would otherwise let the view be enlarged from coarser pixels).
pub fn decode_options(views: &Views, max_pixels: u64) -> DecodeOptions {
    let ocr = views.ocr.map_or(0, |resolution| resolution.div_ceil(9) * 10);
    let objects = views.objects.map_or(0, ObjectLayout::side);
    DecodeOptions {
        target_long_side: views.canvas.map(|layout| layout.side),
        ..DecodeOptions::for_input(views.square.resize_side().max(ocr).max(objects), max_pixels)
    }
}

/// Resizes and crops a decoded photo to the model's square.
pub fn preprocess(decoded: &Decoded, transform: &Transform) -> Result<RgbImage, PreprocessError> {
    resize_and_crop_scaled(&decoded.image, decoded.full_size, decoded.scale_denom, transform)
}

/// Resize-then-center-crop, done as one resize of the matching source box: the filter still reads
/// pixels outside the box (as Pillow does), so the result is the same as resizing the whole image
/// first, for a fraction of the work.
///
/// The image may be decoded at 1/`scale_denom` of a `full_size` photo (JPEG DCT scaling). The
/// output size and crop offsets come from the full-size geometry, as the reference computes them;
/// the source box is then placed on the decoded grid, where one pixel is exactly `scale_denom`
/// full-size pixels. The decoded image's last row and column may be partial (its size is rounded
/// up), so mapping by its own pixel count would shift the crop by up to half a decoded pixel,
/// which high-frequency detail turns into a visible difference.
pub fn resize_and_crop_scaled(
    image: &RgbImage,
    full_size: (u32, u32),
    scale_denom: u32,
    transform: &Transform,
) -> Result<RgbImage, PreprocessError> {
    let (width, height) = full_size;
    let (resized_w, resized_h) = transform.resized_dims(width, height);
    let size = transform.side();
    // torchvision's CenterCrop: offset = int(round((resized - size) / 2)).
    let left = ((resized_w - size) as f64 / 2.0).round_ties_even();
    let top = ((resized_h - size) as f64 / 2.0).round_ties_even();
    let denom = f64::from(scale_denom.max(1));
    // Decoded pixels per output pixel.
    let (sx, sy) = (width as f64 / denom / resized_w as f64, height as f64 / denom / resized_h as f64);
    let (x, y) = (left * sx, top * sy);
    // The box lies inside the image; the clamp only absorbs floating-point excess (29 / 224 * 224
    // can be 29.000000000000004), which the resizer would refuse.
    let (w, h) = ((size as f64 * sx).min(image.width() as f64 - x), (size as f64 * sy).min(image.height() as f64 - y));
    let filter = match transform.filter {
        // Pillow's bicubic is the Catmull-Rom kernel (a = -0.5); its bilinear is the triangle.
        Filter::Bicubic => FilterType::CatmullRom,
        Filter::Bilinear => FilterType::Bilinear,
    };
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(filter)).crop(x, y, w, h);
    let mut square = RgbImage::new(size, size);
    Resizer::new().resize(image, &mut square, &options).map_err(|e| PreprocessError::Resize(e.to_string()))?;
    Ok(square)
}

/// torchvision's `Resize(size)`: the short side becomes `size`, the long side `int(size * long / short)`.
fn shortest_edge_dims(width: u32, height: u32, size: u32) -> (u32, u32) {
    let long = |l: u32, s: u32| ((u64::from(size) * u64::from(l)) / u64::from(s)) as u32;
    if width <= height { (size, long(height, width).max(size)) } else { (long(width, height).max(size), size) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CLIP's resize and crop of a photo decoded at full size.
    fn resize_and_crop(image: &RgbImage, size: u32) -> Result<RgbImage, PreprocessError> {
        resize_and_crop_scaled(image, image.dimensions(), 1, &Transform::clip(size))
    }

    #[test]
    fn short_side_becomes_size() {
        assert_eq!(shortest_edge_dims(4000, 3000, 224), (298, 224));
        assert_eq!(shortest_edge_dims(3000, 4000, 224), (224, 298));
        assert_eq!(shortest_edge_dims(100, 100, 224), (224, 224));
    }

    #[test]
    fn thin_images_resize_without_rounding_errors() {
        for (w, h) in [(29, 100), (100, 29), (1, 1), (1, 5000), (7, 3)] {
            assert_eq!(resize_and_crop(&RgbImage::new(w, h), 224).unwrap().dimensions(), (224, 224), "{w}x{h}");
        }
    }

    #[test]
    fn scaled_decodes_map_onto_the_full_size_geometry() {
        // A 2293x1433 photo decoded at 1/4 is 574x359, its last column and row partial. A vertical
        // edge at full-size x = 1148 (decoded 287) must land where the full-size resize puts it.
        let edge_at = |edge: u32| move |x: u32, _| image::Rgb([if x < edge { 0 } else { 255 }; 3]);
        let full = RgbImage::from_fn(2293, 1433, edge_at(1148));
        let scaled = RgbImage::from_fn(574, 359, edge_at(287));
        let a = resize_and_crop(&full, 224).unwrap();
        let b = resize_and_crop_scaled(&scaled, (2293, 1433), 4, &Transform::clip(224)).unwrap();
        let row = |img: &RgbImage| (0..224).map(|x| i32::from(img.get_pixel(x, 100).0[0])).collect::<Vec<_>>();
        let diff = row(&a).iter().zip(row(&b)).map(|(p, q)| (p - q).abs()).max().unwrap();
        assert!(diff <= 8, "edge moved: max difference {diff}\n{:?}\n{:?}", row(&a), row(&b));
    }

    #[test]
    fn crop_keeps_the_center() {
        // Left third red, middle green, right third blue: the square crop of a 3:1 strip is green.
        let image = RgbImage::from_fn(672, 224, |x, _| match x / 224 {
            0 => image::Rgb([255, 0, 0]),
            1 => image::Rgb([0, 255, 0]),
            _ => image::Rgb([0, 0, 255]),
        });
        let square = resize_and_crop(&image, 224).unwrap();
        assert_eq!(square.get_pixel(112, 112).0, [0, 255, 0]);
        assert_eq!(square.get_pixel(5, 5).0, [0, 255, 0]);
    }

    #[test]
    fn the_filter_is_the_one_asked_for() {
        // A 64 -> 192 step, shrunk: Pillow's bicubic (Catmull-Rom) overshoots beside the edge,
        // its bilinear (triangle) never leaves the range.
        let step = RgbImage::from_fn(500, 500, |x, _| image::Rgb([if x < 250 { 64 } else { 192 }; 3]));
        let range = |filter| {
            let transform = Transform { filter, ..Transform::clip(200) };
            let square = resize_and_crop_scaled(&step, step.dimensions(), 1, &transform).unwrap();
            let values = square.as_raw();
            (*values.iter().min().unwrap(), *values.iter().max().unwrap())
        };
        assert_eq!(range(Filter::Bilinear), (64, 192));
        let (low, high) = range(Filter::Bicubic);
        assert!(low < 64 && high > 192, "bicubic stayed in {low}..{high}");
    }
}
