//! Decode stage: photo bytes -> upright RGB pixels.
//!
//! The format is sniffed from magic bytes, never from the key's extension; the pixel count is
//! checked from the header before any pixel is decoded, so a tiny file cannot expand into gigabytes;
//! the orientation the file records (EXIF, or HEIF's `irot`/`imir`) is applied, since phones store
//! photos sideways and say so in a tag.
//!
//! One backend per family:
//! - `jpeg.rs`: JPEG through libjpeg-turbo, at the DCT scale the model input allows (feature
//!   `jpeg-turbo`, on by default; without it JPEG goes through `image` at full size).
//! - `heif.rs`: HEIC/HEIF (feature `heif`) and AVIF (feature `avif`) through libheif.
//! - `gif.rs`: GIF at the palette level, as Pillow reads it.
//! - everything else (PNG, WebP, BMP, TIFF) through the `image` crate.
//!
//! Colour follows CLIP's reference preprocessing, Pillow's `convert("RGB")`: alpha is dropped, not
//! composited onto a background (a transparent pixel contributes whatever colour is stored under
//! it); grayscale is replicated; CMYK JPEG converts with Pillow's formula; 16-bit samples are
//! scaled to 8 bits. Animated files (GIF, WebP) and MPO give their first image.
//!
//! The capture time and place come from the same bytes at the same step (`metadata.rs`), from the
//! EXIF block the orientation is read from, so the block is found once; and a JPEG's estimated
//! quality from its quantization table (`compression.rs`).

// Without `jpeg-turbo`, `image` reads JPEG's orientation itself.
#[cfg_attr(not(feature = "jpeg-turbo"), allow(dead_code))]
mod compression;
mod exif;
mod gif;
#[cfg(any(feature = "heif", feature = "avif"))]
mod heif;
#[cfg(feature = "jpeg-turbo")]
mod jpeg;
pub mod metadata;
mod sniff;

use std::{io::Cursor, time::Duration};

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, RgbImage, metadata::Orientation};

pub use exif::jpeg_exif;
pub use metadata::{Location, Metadata, TakenAt};
pub use sniff::{Format, sniff};

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not a supported image format{0}")]
    Unsupported(String),
    #[error("image is {width}x{height} = {pixels} pixels, over the {limit}-pixel limit")]
    TooManyPixels { width: u32, height: u32, pixels: u64, limit: u64 },
    #[error("could not decode image: {0}")]
    Failed(String),
    /// The decode ran past its time budget (set by the pipeline, which stops waiting for it).
    #[error("decoding took longer than the {} ms budget", .0.as_millis())]
    Timeout(Duration),
    /// The decoder panicked on this file (contained by the decode threads: only this photo fails;
    /// several pure-Rust decoders, `tiff` above all, panic on odd files).
    #[error("the decoder crashed on this file: {0}")]
    Crashed(String),
}

/// How to decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Most pixels (width x height, at full size) a photo may have; checked from the header.
    pub max_pixels: u64,
    /// The short side the caller will resize to. A JPEG then decodes at the smallest DCT scale
    /// (1/8, 1/4, 1/2) whose short side is still at least 90% of this (`jpeg::scale_denom`).
    /// `None` decodes at full size.
    pub target_short_side: Option<u32>,
    /// The long side a view needs (the face detector's canvas), held to the same 90%.
    pub target_long_side: Option<u32>,
}

impl DecodeOptions {
    /// Decoding just large enough for a `size` x `size` model input.
    pub fn for_input(size: u32, max_pixels: u64) -> Self {
        DecodeOptions { max_pixels, target_short_side: Some(size), target_long_side: None }
    }

    /// Decoding at full size (what the reference does; for comparisons and benchmarks).
    pub fn full_size(max_pixels: u64) -> Self {
        DecodeOptions { max_pixels, target_short_side: None, target_long_side: None }
    }
}

/// A decoded photo and how it was decoded.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// Upright RGB pixels.
    pub image: RgbImage,
    pub format: Format,
    /// Upright width and height of the photo at full scale. With `scale_denom` > 1 the image is
    /// this divided by `scale_denom`, rounded up: its last row and column may stand for less than
    /// `scale_denom` full-size pixels, which the resize must know to stay aligned (`preprocess`).
    pub full_size: (u32, u32),
    /// The photo was decoded at 1/`scale_denom` scale (1: full size, and every non-JPEG format).
    pub scale_denom: u32,
    /// When and where it was taken, as far as its EXIF says (nothing for GIF and BMP).
    pub metadata: Metadata,
}

/// Decodes `bytes` into upright RGB, saying which format it was and at which scale it was decoded.
pub fn decode(bytes: &[u8], options: &DecodeOptions) -> Result<Decoded, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Unsupported(" (empty object)".into()));
    }
    let format = sniff(bytes).ok_or_else(|| DecodeError::Unsupported(String::new()))?;
    if !format.is_supported() {
        return Err(DecodeError::Unsupported(format!(
            " ({format} support is not built in: build clipfn with the `{format}` cargo feature)"
        )));
    }
    let mut decoded = decode_as(bytes, format, options)?;
    if format == Format::Jpeg {
        decoded.metadata.jpeg_quality = compression::jpeg_quality(bytes);
    }
    Ok(decoded)
}

/// [`decode`] of a supported `format`.
fn decode_as(bytes: &[u8], format: Format, options: &DecodeOptions) -> Result<Decoded, DecodeError> {
    let plain = |(image, metadata): (RgbImage, Metadata)| Decoded {
        full_size: image.dimensions(),
        image,
        format,
        scale_denom: 1,
        metadata,
    };
    match format {
        #[cfg(feature = "jpeg-turbo")]
        Format::Jpeg => {
            let block = exif::jpeg_exif(bytes);
            let orientation = block.and_then(exif::block_orientation).unwrap_or(Orientation::NoTransforms);
            let jpeg = jpeg::decode(bytes, options)?;
            let image = exif::apply(jpeg.image, orientation);
            let (w, h) = jpeg.full_size;
            let full_size = if exif::swaps_axes(orientation) { (h, w) } else { (w, h) };
            let metadata = block.map(metadata::from_exif).unwrap_or_default();
            Ok(Decoded { image, format, full_size, scale_denom: jpeg.scale_denom, metadata })
        }
        #[cfg(any(feature = "heif", feature = "avif"))]
        Format::Heif | Format::Avif => Ok(plain(heif::decode(bytes, options, format)?)),
        #[cfg(not(any(feature = "heif", feature = "avif")))]
        Format::Heif | Format::Avif => unreachable!("is_supported() said no"),
        Format::Gif => Ok(plain((gif::decode(bytes, options)?, Metadata::default()))),
        _ => Ok(plain(with_image_crate(bytes, image_format(format), options)?)),
    }
}

/// Memory the decode of `bytes` holds at its peak, read from the header alone (nothing is
/// decoded): what the pipeline reserves from the decode budget (`CLIPFN_MAX_DECODE_BYTES`).
/// A header that cannot be read, or a photo over the pixel limit, counts as 0: the decode then
/// refuses it before it allocates.
pub fn working_memory(bytes: &[u8], options: &DecodeOptions) -> u64 {
    let Some(format) = sniff(bytes).filter(|format| format.is_supported()) else { return 0 };
    match format {
        #[cfg(feature = "jpeg-turbo")]
        Format::Jpeg => jpeg::working_memory(bytes, options),
        #[cfg(any(feature = "heif", feature = "avif"))]
        Format::Heif | Format::Avif => heif::working_memory(bytes, options),
        #[cfg(not(any(feature = "heif", feature = "avif")))]
        Format::Heif | Format::Avif => unreachable!("is_supported() said no"),
        _ => full_size_working_memory(bytes, image_format(format), options),
    }
}

/// A format decoded at full size by the `image` crate: its decoder's output, then the RGB copy.
fn full_size_working_memory(bytes: &[u8], format: ImageFormat, options: &DecodeOptions) -> u64 {
    let Ok(decoder) = ImageReader::with_format(Cursor::new(bytes), format).into_decoder() else { return 0 };
    let (width, height) = decoder.dimensions();
    if check_pixels(width, height, options.max_pixels).is_err() {
        return 0;
    }
    decoder.total_bytes().saturating_add(u64::from(width) * u64::from(height) * 3)
}

fn image_format(format: Format) -> ImageFormat {
    match format {
        Format::Jpeg => ImageFormat::Jpeg,
        Format::Png => ImageFormat::Png,
        Format::WebP => ImageFormat::WebP,
        Format::Bmp => ImageFormat::Bmp,
        Format::Tiff => ImageFormat::Tiff,
        Format::Gif => ImageFormat::Gif,
        Format::Heif | Format::Avif => unreachable!("libheif's, not the image crate's"),
    }
}

/// PNG, WebP, BMP, TIFF (and JPEG without `jpeg-turbo`) through the `image` crate, at full
/// size. Its decoders read the orientation (WebP `EXIF`, PNG `eXIf`, TIFF tag, JPEG APP1), and the
/// same block gives the metadata; a TIFF file is itself the TIFF structure EXIF is written in.
fn with_image_crate(
    bytes: &[u8],
    format: ImageFormat,
    options: &DecodeOptions,
) -> Result<(RgbImage, Metadata), DecodeError> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    // Enough for the largest allowed photo at 16 bits per RGBA channel, and no more.
    limits.max_alloc = Some(options.max_pixels.saturating_mul(8).saturating_add(64 << 20));
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(failed)?;
    let (width, height) = decoder.dimensions();
    check_pixels(width, height, options.max_pixels)?;
    // A damaged EXIF block must not cost the photo: it is then shown as stored.
    let block = decoder.exif_metadata().ok().flatten();
    let orientation = block
        .as_deref()
        .and_then(exif::block_orientation)
        .or_else(|| decoder.orientation().ok())
        .unwrap_or(Orientation::NoTransforms);
    let metadata = match (&block, format) {
        (Some(block), _) => metadata::from_exif(block),
        (None, ImageFormat::Tiff) => metadata::from_exif(bytes),
        (None, _) => Metadata::default(),
    };
    let mut image = DynamicImage::from_decoder(decoder).map_err(failed)?;
    image.apply_orientation(orientation);
    Ok((image.into_rgb8(), metadata))
}

/// Refuses empty images and images over the pixel budget, before their pixels are decoded.
fn check_pixels(width: u32, height: u32, limit: u64) -> Result<(), DecodeError> {
    let pixels = u64::from(width) * u64::from(height);
    if pixels == 0 {
        return Err(DecodeError::Failed(format!("image is {width}x{height}: no pixels")));
    }
    if pixels > limit {
        return Err(DecodeError::TooManyPixels { width, height, pixels, limit });
    }
    Ok(())
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

    const LIMIT: u64 = 1 << 24;
    /// The formats the `image` crate can also write, so the tests can make their own files.
    const ENCODABLE: [ImageFormat; 6] =
        [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::WebP, ImageFormat::Bmp, ImageFormat::Tiff, ImageFormat::Gif];

    fn encode(image: DynamicImage, format: ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        image.write_to(&mut out, format).unwrap();
        out.into_inner()
    }

    fn opts() -> DecodeOptions {
        DecodeOptions::for_input(224, LIMIT)
    }

    #[test]
    fn sniffs_content_not_names() {
        let html = b"<!DOCTYPE html><html><body>403 Forbidden</body></html>";
        assert!(matches!(decode(html, &opts()), Err(DecodeError::Unsupported(_))));
        assert!(matches!(decode(b"", &opts()), Err(DecodeError::Unsupported(_))));
    }

    #[test]
    fn pixel_limit_is_checked_before_decoding() {
        for format in ENCODABLE {
            let bytes = encode(DynamicImage::new_rgb8(300, 200), format);
            let limited = DecodeOptions::for_input(224, 59_999);
            assert!(
                matches!(decode(&bytes, &limited), Err(DecodeError::TooManyPixels { pixels: 60_000, .. })),
                "{format:?}"
            );
            let full = decode(&bytes, &DecodeOptions::full_size(60_000)).unwrap();
            assert_eq!(full.image.dimensions(), (300, 200), "{format:?}");
        }
    }

    #[test]
    fn truncated_files_fail_cleanly() {
        let photo =
            DynamicImage::ImageRgb8(RgbImage::from_fn(64, 64, |x, y| image::Rgb([x as u8 * 4, y as u8 * 4, 7])));
        for format in ENCODABLE {
            let bytes = encode(photo.clone(), format);
            for cut in [1, 3, 10, 30, bytes.len() / 3, bytes.len() / 2, bytes.len() - 2] {
                // Either decodes what is there or reports a failure: never panics.
                if let Ok(decoded) = decode(&bytes[..cut], &opts()) {
                    assert_eq!(decoded.image.dimensions(), (64, 64), "{format:?} cut at {cut}");
                }
            }
        }
    }

    #[test]
    #[cfg(feature = "jpeg-turbo")] // zune-jpeg fills a truncated tail in instead
    fn truncated_jpeg_is_refused_like_pillow_does() {
        let photo = DynamicImage::ImageRgb8(RgbImage::from_fn(256, 256, |x, y| image::Rgb([x as u8, y as u8, 7])));
        let jpeg = encode(photo, ImageFormat::Jpeg);
        assert!(decode(&jpeg, &opts()).is_ok());
        let cut = &jpeg[..jpeg.len() * 2 / 3];
        let result = decode(cut, &opts()).map(|d| d.image.dimensions());
        assert!(matches!(result, Err(DecodeError::Failed(_))), "{result:?}");
    }

    #[test]
    fn alpha_is_dropped_like_pillow() {
        let rgba = image::RgbaImage::from_pixel(4, 4, image::Rgba([200, 100, 50, 0]));
        let png = encode(DynamicImage::ImageRgba8(rgba), ImageFormat::Png);
        assert_eq!(decode(&png, &opts()).unwrap().image.get_pixel(0, 0).0, [200, 100, 50]);
    }

    #[test]
    fn jpeg_decodes_at_the_smallest_scale_covering_the_input() {
        let photo = DynamicImage::ImageRgb8(RgbImage::from_fn(2000, 1800, |x, y| {
            image::Rgb([(x / 8) as u8, (y / 8) as u8, 90])
        }));
        let jpeg = encode(photo, ImageFormat::Jpeg);
        let scaled = decode(&jpeg, &opts()).unwrap();
        assert_eq!(scaled.format, Format::Jpeg);
        assert_eq!(scaled.full_size, (2000, 1800));
        if cfg!(feature = "jpeg-turbo") {
            assert_eq!((scaled.scale_denom, scaled.image.dimensions()), (8, (250, 225)));
        }
        let full = decode(&jpeg, &DecodeOptions::full_size(LIMIT)).unwrap();
        assert_eq!((full.scale_denom, full.image.dimensions()), (1, (2000, 1800)));
    }

    #[test]
    fn full_size_formats_reserve_their_decoded_pixels_and_the_rgb_copy() {
        let png = encode(DynamicImage::new_rgba8(300, 200), ImageFormat::Png);
        assert_eq!(working_memory(&png, &opts()), 300 * 200 * (4 + 3));
        assert_eq!(working_memory(&png, &DecodeOptions::for_input(224, 59_999)), 0, "over the pixel limit");
        assert_eq!(working_memory(&png[..12], &opts()), 0, "no readable header");
        assert_eq!(working_memory(b"<html>403</html>", &opts()), 0, "not a photo");
    }

    #[test]
    fn zero_sized_images_fail() {
        assert!(matches!(check_pixels(0, 10, LIMIT), Err(DecodeError::Failed(_))));
    }

    #[test]
    fn disabled_formats_say_so() {
        // A minimal HEIC header: sniffed as HEIF whatever this build can decode.
        let mut heic = vec![0, 0, 0, 24];
        heic.extend_from_slice(b"ftypheic\0\0\0\0mif1heic");
        let result = decode(&heic, &opts());
        if cfg!(feature = "heif") {
            assert!(matches!(result, Err(DecodeError::Failed(_))), "{result:?}");
        } else {
            let Err(DecodeError::Unsupported(message)) = result else { panic!("{result:?}") };
            assert!(message.contains("not built in"), "{message}");
        }
    }
}
