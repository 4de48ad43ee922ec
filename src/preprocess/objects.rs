//! The object detector's view, made on the decode threads: the photo as the detector's format
//! wants it, as float RGB 0-255 in rows (height, width, channel):
//!
//! - stretched to a square, its aspect let go, as Human feeds its CenterNet
//!   (`tf.image.resizeBilinear`, corners not aligned, no half-pixel centres: no antialiasing);
//! - letterboxed, centred on grey 114, as ultralytics feeds a YOLO (the face canvas's letterbox).
//!
//! The view keeps where the photo lies on it ([`Placed`]), to map boxes back to the photo's pixels.

use std::sync::Arc;

use image::RgbImage;

use super::{CanvasLayout, Letterbox, PreprocessError, Transform, faces, resize_and_crop_scaled};

/// How a detector wants the photo on its square input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "fit", content = "side")]
pub enum ObjectLayout {
    /// Both sides become this: Human's CenterNet (512).
    Stretched(u32),
    /// The long side becomes this, centred on grey: ultralytics' YOLO export (640).
    Letterboxed(u32),
}

impl ObjectLayout {
    pub fn side(self) -> u32 {
        match self {
            ObjectLayout::Stretched(side) | ObjectLayout::Letterboxed(side) => side,
        }
    }
}

/// A photo on the object detector's square input.
#[derive(Debug, Clone)]
pub struct ObjectView {
    /// `side` x `side` x 3 values, 0 to 255, in rows.
    pub pixels: Vec<f32>,
    pub placed: Placed,
    /// The decoded photo, upright, kept until the detector has answered where pets are cut from
    /// it (at the DCT scale that covers the view: finer than the view wherever the photo is larger).
    pub photo: Option<Arc<RgbImage>>,
}

impl ObjectView {
    /// The bytes it keeps while it waits for the detector.
    pub fn kept_bytes(&self) -> u64 {
        let photo = self.photo.as_ref().map_or(0, |photo| photo.as_raw().len());
        (self.pixels.len() * size_of::<f32>() + photo) as u64
    }
}

/// Where the photo lies on a view, to map the view's pixels back to the upright full-size photo's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    /// View pixels per photo pixel, across and down.
    pub scale: [f32; 2],
    /// Where the photo's top-left corner lies on the view.
    pub offset: [f32; 2],
    /// The upright full-size photo's width and height.
    pub full_size: (u32, u32),
}

impl Placed {
    /// A view position `[x, y]` in pixels of the upright full-size photo, kept inside it.
    pub fn to_photo(&self, [x, y]: [f32; 2]) -> [f32; 2] {
        let (width, height) = (self.full_size.0 as f32, self.full_size.1 as f32);
        [
            ((x - self.offset[0]) / self.scale[0]).clamp(0.0, width),
            ((y - self.offset[1]) / self.scale[1]).clamp(0.0, height),
        ]
    }
}

/// `image` (the decode of an upright `full_size` photo, at whatever DCT scale) as `layout` places it.
pub fn object_view(
    image: &RgbImage,
    full_size: (u32, u32),
    layout: ObjectLayout,
) -> Result<ObjectView, PreprocessError> {
    let (width, height) = (full_size.0 as f32, full_size.1 as f32);
    match layout {
        ObjectLayout::Stretched(side) => Ok(ObjectView {
            pixels: resize_bilinear(image, side),
            placed: Placed { scale: [side as f32 / width, side as f32 / height], offset: [0.0; 2], full_size },
            photo: None,
        }),
        ObjectLayout::Letterboxed(side) => {
            let canvas = faces::canvas(image, full_size, CanvasLayout { side, letterbox: Letterbox::Centred })?;
            Ok(ObjectView {
                pixels: canvas.image.as_raw().iter().map(|&v| f32::from(v)).collect(),
                placed: Placed { scale: [canvas.scale; 2], offset: canvas.offset, full_size },
                photo: None,
            })
        }
    }
}

/// A pet's crop as the image tower's square: the square around `bbox` (in pixels of the upright
/// `full_size` photo) whose side is the box's long side, moved inside the photo where it would leave
/// it, cut from `photo` (the decode of that photo, at whatever DCT scale) and resized as a photo is.
pub fn pet_crop(
    photo: &RgbImage,
    full_size: (u32, u32),
    bbox: [f32; 4],
    transform: &Transform,
) -> Result<RgbImage, PreprocessError> {
    let scale = photo.width() as f32 / full_size.0 as f32;
    let side =
        ((bbox[2] - bbox[0]).max(bbox[3] - bbox[1]) * scale).clamp(1.0, photo.width().min(photo.height()) as f32);
    let centre = [(bbox[0] + bbox[2]) / 2.0 * scale, (bbox[1] + bbox[3]) / 2.0 * scale];
    let at = |centre: f32, len: u32| (centre - side / 2.0).clamp(0.0, len as f32 - side) as u32;
    let (x, y, side) = (at(centre[0], photo.width()), at(centre[1], photo.height()), side as u32);
    let crop = image::imageops::crop_imm(photo, x, y, side, side).to_image();
    resize_and_crop_scaled(&crop, crop.dimensions(), 1, transform)
}

/// tfjs's `resizeBilinear` to `side` x `side` (its CPU kernel's arithmetic, in f64 as JavaScript's
/// numbers): output pixel `r` reads the source at `r * in / out`, between its floor and ceiling
/// (clamped to the last pixel), across first, then down.
fn resize_bilinear(image: &RgbImage, side: u32) -> Vec<f32> {
    let (in_width, in_height) = image.dimensions();
    let source = |out: u32, len: u32| {
        let at = f64::from(out) * f64::from(len) / f64::from(side);
        let floor = at.floor();
        (floor as u32, (at.ceil() as u32).min(len - 1), at - floor)
    };
    let columns: Vec<_> = (0..side).map(|c| source(c, in_width)).collect();
    let raw = image.as_raw();
    let at =
        |x: u32, y: u32, channel: usize| f64::from(raw[(y as usize * in_width as usize + x as usize) * 3 + channel]);
    let mut pixels = Vec::with_capacity((side * side * 3) as usize);
    for r in 0..side {
        let (top, bottom, row_frac) = source(r, in_height);
        for &(left, right, col_frac) in &columns {
            for channel in 0..3 {
                let upper = at(left, top, channel) + (at(right, top, channel) - at(left, top, channel)) * col_frac;
                let lower =
                    at(left, bottom, channel) + (at(right, bottom, channel) - at(left, bottom, channel)) * col_frac;
                pixels.push((upper + (lower - upper) * row_frac) as f32);
            }
        }
    }
    pixels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretched_view_maps_back_to_the_photo_on_both_axes() {
        let photo = RgbImage::from_fn(300, 100, |x, _| image::Rgb([(x % 256) as u8; 3]));
        let view = object_view(&photo, (300, 100), ObjectLayout::Stretched(512)).unwrap();
        assert_eq!(view.pixels.len(), 512 * 512 * 3);
        assert_eq!(view.placed.to_photo([512.0, 512.0]), [300.0, 100.0]);
        // Output column 256 reads source column 150 exactly: no blending, no antialiasing.
        assert_eq!(view.pixels[(10 * 512 + 256) * 3], 150.0);
    }

    #[test]
    fn a_pet_crop_is_the_square_around_its_box_inside_the_photo() {
        // Left half red, right half blue; a tall box at the right edge: its square is moved inside,
        // and is all blue.
        let photo = RgbImage::from_fn(400, 200, |x, _| image::Rgb(if x < 200 { [255, 0, 0] } else { [0, 0, 255] }));
        let crop = pet_crop(&photo, (800, 400), [700.0, 0.0, 800.0, 300.0], &Transform::clip(224)).unwrap();
        assert_eq!(crop.dimensions(), (224, 224));
        assert_eq!(crop.get_pixel(0, 0).0, [0, 0, 255]);
        assert_eq!(crop.get_pixel(223, 223).0, [0, 0, 255]);
    }

    #[test]
    fn a_letterboxed_view_is_centred_on_grey() {
        let photo = RgbImage::from_pixel(200, 100, image::Rgb([255, 0, 0]));
        let view = object_view(&photo, (200, 100), ObjectLayout::Letterboxed(640)).unwrap();
        assert_eq!(&view.pixels[..3], &[114.0; 3], "the top row is padding");
        assert_eq!(&view.pixels[(320 * 640 + 320) * 3..][..3], &[255.0, 0.0, 0.0]);
        assert_eq!(view.placed.to_photo([0.0, 160.0]), [0.0, 0.0]);
    }
}
