//! EXIF orientation: phones store the sensor's pixels as they came and say in a tag which way is up.
//!
//! Which formats carry it, and who reads it:
//! - JPEG: the APP1 `Exif` segment, found here (the scaled JPEG decoder does not parse metadata);
//!   a broken or missing tag means upright (it must not cost the photo).
//! - WebP (`EXIF` chunk) and PNG (`eXIf` chunk before the image data): the block `image`'s
//!   decoders extract, read here; TIFF (tag 274): `image`'s `ImageDecoder::orientation`.
//! - HEIC and AVIF: the `irot`/`imir` boxes, applied by libheif itself. Their EXIF orientation tag
//!   is ignored, as the HEIF spec says and as pillow-heif and Pillow's AVIF plugin do (their EXIF
//!   item still gives the capture time and place: `metadata.rs`).

use image::{DynamicImage, RgbImage, metadata::Orientation};

/// The orientation tag of an EXIF block (a TIFF structure). Some writers keep JPEG's `Exif\0\0`
/// prefix in WebP `EXIF` and PNG `eXIf` chunks too (Pillow's own test files do); Pillow accepts
/// that, so this does as well.
pub fn block_orientation(block: &[u8]) -> Option<Orientation> {
    Orientation::from_exif_chunk(block.strip_prefix(b"Exif\0\0").unwrap_or(block))
}

/// The first APP1 `Exif\0\0` segment's body, if any (the capture time and place are read from it
/// too: `metadata.rs`).
pub fn jpeg_exif(jpeg: &[u8]) -> Option<&[u8]> {
    jpeg_segments(jpeg).find(|(marker, body)| *marker == 0xE1 && body.starts_with(b"Exif\0\0")).map(|(_, body)| body)
}

/// The marker and body of each segment of a JPEG before its first scan (a bounded walk of the
/// marker chain, at most 64 segments; it stops at anything that is not a marker).
pub(super) fn jpeg_segments(jpeg: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut at = 2; // after SOI
    let mut left = 64;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        left -= 1;
        // Markers may be preceded by any number of 0xFF fill bytes.
        while *jpeg.get(at)? == 0xFF && *jpeg.get(at + 1)? == 0xFF {
            at += 1;
        }
        if *jpeg.get(at)? != 0xFF {
            return None;
        }
        let marker = *jpeg.get(at + 1)?;
        if marker == 0xDA || marker == 0xD9 {
            return None; // start of scan or end of image
        }
        let len = usize::from(u16::from_be_bytes([*jpeg.get(at + 2)?, *jpeg.get(at + 3)?]));
        if len < 2 {
            return None;
        }
        let body = jpeg.get(at + 4..(at + 2 + len).min(jpeg.len()))?;
        at += 2 + len;
        Some((marker, body))
    })
}

/// Whether `orientation` turns the image by a quarter, swapping width and height.
pub fn swaps_axes(orientation: Orientation) -> bool {
    matches!(
        orientation,
        Orientation::Rotate90 | Orientation::Rotate270 | Orientation::Rotate90FlipH | Orientation::Rotate270FlipH
    )
}

/// Applies `orientation` to an RGB image (a no-op, without copying, for `NoTransforms`).
pub fn apply(image: RgbImage, orientation: Orientation) -> RgbImage {
    if orientation == Orientation::NoTransforms {
        return image;
    }
    let mut dynamic = DynamicImage::ImageRgb8(image);
    dynamic.apply_orientation(orientation);
    dynamic.into_rgb8()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The orientation in a JPEG's first APP1 `Exif` segment before the first scan, as the decode
    /// reads it: `NoTransforms` when there is none or it is unreadable.
    fn jpeg_orientation(jpeg: &[u8]) -> Orientation {
        jpeg_exif(jpeg).and_then(block_orientation).unwrap_or(Orientation::NoTransforms)
    }

    /// A minimal big- or little-endian TIFF block with one IFD0 entry: Orientation = `value`.
    fn exif_block(value: u16, little: bool) -> Vec<u8> {
        let u16b = |v: u16| if little { v.to_le_bytes() } else { v.to_be_bytes() };
        let u32b = |v: u32| if little { v.to_le_bytes() } else { v.to_be_bytes() };
        let mut t = if little { b"II".to_vec() } else { b"MM".to_vec() };
        t.extend(u16b(42));
        t.extend(u32b(8));
        t.extend(u16b(1)); // one entry
        t.extend(u16b(0x0112));
        t.extend(u16b(3)); // SHORT
        t.extend(u32b(1));
        t.extend(u16b(value));
        t.extend([0, 0]);
        t.extend(u32b(0)); // no next IFD
        t
    }

    fn jpeg_with(segments: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut j = vec![0xFF, 0xD8];
        for (marker, body) in segments {
            j.extend([0xFF, *marker]);
            j.extend(((body.len() + 2) as u16).to_be_bytes());
            j.extend(body);
        }
        j.extend([0xFF, 0xDA, 0, 2, 0xFF, 0xD9]);
        j
    }

    #[test]
    fn finds_the_tag_after_other_segments() {
        for value in 1..=8u16 {
            for little in [false, true] {
                let mut app1 = b"Exif\0\0".to_vec();
                app1.extend(exif_block(value, little));
                let jpeg = jpeg_with(&[(0xE0, b"JFIF\0\x01\x01".to_vec()), (0xE1, app1)]);
                assert_eq!(jpeg_orientation(&jpeg).to_exif(), value as u8);
            }
        }
    }

    #[test]
    fn broken_or_missing_exif_means_upright() {
        let xmp = jpeg_with(&[(0xE1, b"http://ns.adobe.com/xap/1.0/\0<x/>".to_vec())]);
        assert_eq!(jpeg_orientation(&xmp), Orientation::NoTransforms);
        let mut app1 = b"Exif\0\0".to_vec();
        app1.extend(&exif_block(6, false)[..12]); // cut inside the IFD
        assert_eq!(jpeg_orientation(&jpeg_with(&[(0xE1, app1)])), Orientation::NoTransforms);
        let mut bad = b"Exif\0\0".to_vec();
        bad.extend(exif_block(9, true));
        assert_eq!(jpeg_orientation(&jpeg_with(&[(0xE1, bad)])), Orientation::NoTransforms);
        for cut in 0..20 {
            let _ = jpeg_orientation(&[0xFF, 0xD8, 0xFF, 0xE1, 0xFF, 0xFF, b'E', b'x'][..cut.min(8)]);
        }
        assert_eq!(jpeg_orientation(&[0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x01]), Orientation::NoTransforms);
    }

    #[test]
    fn rotations_turn_the_image() {
        // 2x1: red, green. Orientation 6 (rotate 90 clockwise) makes it 1x2 with red on top.
        let image =
            RgbImage::from_fn(2, 1, |x, _| if x == 0 { image::Rgb([255, 0, 0]) } else { image::Rgb([0, 255, 0]) });
        let turned = apply(image.clone(), Orientation::Rotate90);
        assert_eq!(turned.dimensions(), (1, 2));
        assert_eq!(turned.get_pixel(0, 0).0, [255, 0, 0]);
        assert_eq!(apply(image.clone(), Orientation::NoTransforms), image);
    }
}
