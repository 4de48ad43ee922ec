//! HEIC/HEIF and AVIF through libheif (libheif-rs 3 with `embedded-libheif`: libheif 1.23 built
//! from source with cmake and linked statically; HEVC decoded by the system's libde265, AV1 by the
//! system's libdav1d, both found by pkg-config at build time).
//!
//! libheif applies the `irot`/`imir`/`clap` transformations while decoding, so what comes out is
//! upright; the EXIF orientation tag inside is not applied on top (see `exif.rs`). The primary
//! image is decoded (an image sequence or burst gives its cover image, a depth map or thumbnail is
//! never picked). Alpha is dropped by asking for interleaved 8-bit RGB, as Pillow's
//! `convert("RGB")` does with pillow-heif's RGBA; 10- and 12-bit images come out as 8-bit.

use std::sync::OnceLock;

use image::RgbImage;
use libheif_rs::{
    ColorSpace, HeifContext, HeifError, HeifErrorCode, HeifErrorSubCode, LibHeif, RgbChroma, SecurityLimits,
};

use super::{DecodeError, DecodeOptions, Format, Metadata, check_pixels, metadata};

/// libheif's global state (decoder registry), initialised once and kept for the process's life.
fn libheif() -> &'static LibHeif {
    static LIB: OnceLock<LibHeif> = OnceLock::new();
    LIB.get_or_init(LibHeif::new)
}

pub fn decode(bytes: &[u8], options: &DecodeOptions, format: Format) -> Result<(RgbImage, Metadata), DecodeError> {
    let lib = libheif();
    let mut context = HeifContext::read_from_bytes(bytes).map_err(|e| error(e, format))?;
    let mut limits = SecurityLimits::new();
    limits.set_max_image_size_pixels(options.max_pixels);
    context.set_security_limits(&limits).map_err(|e| error(e, format))?;
    // Photos are decoded side by side (CLIPFN_DECODE_THREADS); a tiled HEIC must not take every core.
    context.set_max_decoding_threads(2);
    let handle = context.primary_image_handle().map_err(|e| error(e, format))?;
    // The size after rotation and cropping, from the header boxes: nothing is decoded yet.
    check_pixels(handle.width(), handle.height(), options.max_pixels)?;
    let metadata = exif_item(&handle).map(|block| metadata::from_exif(&block)).unwrap_or_default();
    let decoded = lib.decode(&handle, ColorSpace::Rgb(RgbChroma::Rgb), None).map_err(|e| error(e, format))?;
    let planes = decoded.planes();
    let plane = planes
        .interleaved
        .ok_or_else(|| DecodeError::Failed(format!("libheif gave no interleaved RGB plane for this {format}")))?;
    let (width, height) = (plane.width, plane.height);
    let row = width as usize * 3;
    if width == 0 || height == 0 || plane.stride < row {
        return Err(DecodeError::Failed(format!("libheif gave a {width}x{height} image, stride {}", plane.stride)));
    }
    let mut pixels = Vec::with_capacity(row * height as usize);
    for line in plane.data.chunks(plane.stride).take(height as usize) {
        pixels.extend_from_slice(line.get(..row).ok_or_else(|| DecodeError::Failed("short libheif row".into()))?);
    }
    let image =
        RgbImage::from_raw(width, height, pixels).ok_or_else(|| DecodeError::Failed("short libheif image".into()))?;
    Ok((image, metadata))
}

/// The primary image's first `Exif` item, as a TIFF structure. HEIF stores it after a 4-byte
/// big-endian offset to the TIFF header (ISO/IEC 23008-12, annex A), which may skip an
/// `Exif\0\0` prefix; none where there is no item or the offset points outside it.
fn exif_item(handle: &libheif_rs::ImageHandle) -> Option<Vec<u8>> {
    let mut ids = [0; 1];
    if handle.metadata_block_ids(&mut ids, b"Exif") == 0 {
        return None;
    }
    let item = handle.metadata(ids[0]).ok()?;
    let skip = usize::try_from(u32::from_be_bytes(item.get(..4)?.try_into().ok()?)).ok()?;
    let tiff = item.get(4usize.checked_add(skip)?..)?;
    Some(tiff.to_vec())
}

/// Bytes the decode holds at its peak, from the container's boxes (nothing is decoded): libheif's
/// YCbCr planes (up to 2 bytes a sample for 10- and 12-bit images), its interleaved RGB, and the
/// copy this module makes of it. 0 where the container cannot be read or the image is over the
/// pixel limit: the decode then refuses it.
pub fn working_memory(bytes: &[u8], options: &DecodeOptions) -> u64 {
    let Ok(context) = HeifContext::read_from_bytes(bytes) else { return 0 };
    let Ok(handle) = context.primary_image_handle() else { return 0 };
    let (width, height) = (handle.width(), handle.height());
    if check_pixels(width, height, options.max_pixels).is_err() {
        return 0;
    }
    u64::from(width) * u64::from(height) * (6 + 3 + 3)
}

fn error(e: HeifError, format: Format) -> DecodeError {
    match (e.code, e.sub_code) {
        (
            HeifErrorCode::UnsupportedFeature | HeifErrorCode::UnsupportedFileType,
            HeifErrorSubCode::UnsupportedCodec,
        ) => DecodeError::Unsupported(format!(
            " ({format}: this build of libheif has no decoder for the file's codec; {})",
            e.message.trim()
        )),
        _ => DecodeError::Failed(format!("{format}: {}", e.message.trim())),
    }
}
