//! Signals of a photo that need only its pixels, no model: the perceptual hash that finds its
//! duplicates and the sharpness that finds it blurred. Each is a pure function of the photo's luma
//! view, which the decode threads make from the one decode at the size the sharpness is measured
//! at (`preprocess::decode_views`, [`luma_size`]: 300 px on the long side; the hash shrinks it
//! further, to 32 x 32), and each is held to its reference in
//! tests/it/analyze.rs: ImageHash's `phash` of the full-size file, and the album app's OpenCV
//! Laplacian variance.

mod phash;
mod sharpness;

use image::GrayImage;

pub use self::{
    phash::phash,
    sharpness::{coarser, measured_size as luma_size, sharpness},
};

/// What a photo's pixels say without a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PixelSignals {
    /// The 64-bit DCT perceptual hash ([`phash`]).
    pub hash: u64,
    /// The variance of the Laplacian at a fixed size ([`sharpness`]).
    pub sharpness: f64,
    /// The same at half and a quarter of that size ([`coarser`]), for the best shot.
    pub coarser: [f64; 2],
}

impl PixelSignals {
    pub fn of(luma: &GrayImage) -> Self {
        PixelSignals { hash: phash(luma), sharpness: sharpness(luma), coarser: coarser(luma) }
    }
}

/// Shrinks `luma` to `width` x `height` with `filter`, antialiased as Pillow and OpenCV's area
/// filter shrink: every source pixel counts.
fn shrink(luma: &GrayImage, width: u32, height: u32, filter: fast_image_resize::FilterType) -> GrayImage {
    use fast_image_resize::{ResizeAlg, ResizeOptions, Resizer};
    let mut out = GrayImage::new(width.max(1), height.max(1));
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(filter));
    Resizer::new().resize(luma, &mut out, &options).expect("a gray image resizes into a gray image");
    out
}
