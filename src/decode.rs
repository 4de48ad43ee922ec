//! Decode stage: photo bytes -> upright RGB pixels.
//!
//! The format is sniffed from magic bytes, never from the key's extension; the pixel count is
//! checked from the header before any pixel is decoded, so a tiny file cannot expand into gigabytes;
//! the EXIF orientation is applied, since phones store photos sideways and say so in a tag.

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageReader, RgbImage};

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not a supported image format{0}")]
    Unsupported(String),
    #[error("image is {width}x{height} = {pixels} pixels, over the {limit}-pixel limit")]
    TooManyPixels { width: u32, height: u32, pixels: u64, limit: u64 },
    #[error("could not decode image: {0}")]
    Failed(String),
}

/// Decodes `bytes` into RGB. Alpha is dropped without compositing, exactly as Pillow's
/// `convert("RGB")` in CLIP's reference preprocessing does.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<RgbImage, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Unsupported(" (empty object)".into()));
    }
    let reader =
        ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| DecodeError::Failed(e.to_string()))?;
    let Some(format) = reader.format() else {
        return Err(DecodeError::Unsupported(String::new()));
    };
    if !format.reading_enabled() {
        return Err(DecodeError::Unsupported(format!(" ({format:?} support is not built in)")));
    }
    let mut decoder = reader.into_decoder().map_err(failed)?;
    let (width, height) = decoder.dimensions();
    let pixels = u64::from(width) * u64::from(height);
    if pixels > max_pixels {
        return Err(DecodeError::TooManyPixels { width, height, pixels, limit: max_pixels });
    }
    let orientation = decoder.orientation().map_err(failed)?;
    let mut image = DynamicImage::from_decoder(decoder).map_err(failed)?;
    image.apply_orientation(orientation);
    Ok(image.into_rgb8())
}

fn failed(e: image::ImageError) -> DecodeError {
    match e {
        image::ImageError::Unsupported(u) => DecodeError::Unsupported(format!(" ({u})")),
        other => DecodeError::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(image: DynamicImage, format: image::ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        image.write_to(&mut out, format).unwrap();
        out.into_inner()
    }

    #[test]
    fn sniffs_content_not_names() {
        let html = b"<!DOCTYPE html><html><body>403 Forbidden</body></html>";
        assert!(matches!(decode(html, 1 << 20), Err(DecodeError::Unsupported(_))));
        assert!(matches!(decode(b"", 1 << 20), Err(DecodeError::Unsupported(_))));
    }

    #[test]
    fn pixel_limit_is_checked_before_decoding() {
        let png = encode(DynamicImage::new_luma8(300, 200), image::ImageFormat::Png);
        assert!(matches!(decode(&png, 59_999), Err(DecodeError::TooManyPixels { pixels: 60_000, .. })));
        assert_eq!(decode(&png, 60_000).unwrap().dimensions(), (300, 200));
    }

    #[test]
    fn truncated_files_fail_cleanly() {
        let jpeg = encode(DynamicImage::new_rgb8(64, 64), image::ImageFormat::Jpeg);
        let cut = &jpeg[..jpeg.len() / 3];
        // Either decodes what is there or reports a failure: never panics.
        let _ = decode(cut, 1 << 20);
    }

    #[test]
    fn alpha_is_dropped_like_pillow() {
        let rgba = image::RgbaImage::from_pixel(4, 4, image::Rgba([200, 100, 50, 0]));
        let png = encode(DynamicImage::ImageRgba8(rgba), image::ImageFormat::Png);
        assert_eq!(decode(&png, 1 << 20).unwrap().get_pixel(0, 0).0, [200, 100, 50]);
    }
}
