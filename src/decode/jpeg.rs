//! JPEG through libjpeg-turbo's TurboJPEG 3 API (bundled libjpeg-turbo 3.1, built by turbojpeg-sys
//! with cmake and nasm), decoded at a DCT scale.
//!
//! Most photos are 12-50 MP and the model looks at 224x224. libjpeg-turbo can run the inverse DCT
//! at 1/2, 1/4 or 1/8 size, which skips most of the decode work; the scale picked is the smallest
//! whose short side still covers 90% of the model input, so the resize that follows shrinks, or
//! enlarges by at most 1.11x ([`scale_denom`]).
//! Baseline, progressive, arithmetic, grayscale, CMYK and YCCK files all decode here; an MPO (a
//! JPEG with more JPEGs appended) decodes as its first image, which is the primary one.

use std::ffi::CStr;

use image::RgbImage;
use turbojpeg_sys as tj;

use super::{DecodeError, DecodeOptions, check_pixels};

/// A progressive JPEG can hold thousands of tiny scans, each a pass over the whole image: a few KB
/// that take minutes. libjpeg-turbo's own fuzzers stop at 500 scans; real encoders write about 10.
const MAX_SCANS: i32 = 500;

/// Memory libjpeg-turbo may take for a progressive image's coefficient buffer, in MB. A 100 MP
/// progressive 4:4:4 photo needs about 600 MB; the pixel limit keeps real photos far below.
const MAX_MEMORY_MB: i32 = 1024;

/// The decoded (scaled, not yet oriented) RGB image and the DCT scale denominator used.
pub struct Jpeg {
    pub image: RgbImage,
    pub full_size: (u32, u32),
    pub scale_denom: u32,
}

pub fn decode(bytes: &[u8], options: &DecodeOptions) -> Result<Jpeg, DecodeError> {
    let (handle, width, height) = open(bytes, options)?;
    if handle.get(tj::TJPARAM_TJPARAM_PRECISION) != 8 {
        return Err(DecodeError::Unsupported(" (12- and 16-bit JPEG are not photo formats clipfn decodes)".into()));
    }
    let denom = handle.scale_denom(width, height, options);
    if denom > 1 {
        // SAFETY: plain setter on a valid handle; 1/denom is one of libjpeg-turbo's factors.
        if unsafe { tj::tj3SetScalingFactor(handle.0, tj::tjscalingfactor { num: 1, denom: denom as i32 }) } != 0 {
            return Err(DecodeError::Failed(handle.error()));
        }
    }
    let (out_w, out_h) = (width.div_ceil(denom), height.div_ceil(denom));
    let cmyk = handle.cmyk();
    let (format, channels) = if cmyk { (tj::TJPF_TJPF_CMYK, 4) } else { (tj::TJPF_TJPF_RGB, 3) };
    let mut pixels = vec![0u8; out_w as usize * out_h as usize * channels];
    // SAFETY: `pixels` holds out_h rows of out_w * channels bytes, exactly what libjpeg-turbo
    // writes for this header, scaling factor and pixel format (pitch 0 = tightly packed).
    let status =
        unsafe { tj::tj3Decompress8(handle.0, bytes.as_ptr(), bytes.len() as _, pixels.as_mut_ptr(), 0, format) };
    if status != 0 {
        let message = handle.error();
        // Warnings (extraneous bytes, a bad restart marker...) leave a usable image, as Pillow
        // accepts it. A file that ends early is refused, as Pillow does: the tail is gray filler.
        if !handle.warned() || message.contains("Premature end of JPEG file") {
            return Err(DecodeError::Failed(format!("{message} (truncated or corrupt JPEG)")));
        }
    }
    let pixels = if cmyk { cmyk_to_rgb(&pixels) } else { pixels };
    let image = RgbImage::from_raw(out_w, out_h, pixels).expect("buffer sized for the image");
    Ok(Jpeg { image, full_size: (width, height), scale_denom: denom })
}

/// Bytes the decode of `bytes` will hold, from its header: the scaled output and, for a
/// progressive JPEG, the whole image's DCT coefficients, which libjpeg-turbo keeps until the last
/// scan whatever the scale (64 coefficients of 2 bytes per 8x8 block of each component: 6 bytes
/// a pixel at 4:4:4, 3 at 4:2:0). 0 where the header cannot be read or the photo is over the
/// pixel limit: the decode then refuses it before it allocates.
pub fn working_memory(bytes: &[u8], options: &DecodeOptions) -> u64 {
    let Ok((handle, width, height)) = open(bytes, options) else { return 0 };
    let denom = handle.scale_denom(width, height, options);
    let channels = if handle.cmyk() { 4 } else { 3 };
    let output = u64::from(width.div_ceil(denom)) * u64::from(height.div_ceil(denom)) * channels;
    if handle.get(tj::TJPARAM_TJPARAM_PROGRESSIVE) == 0 {
        return output;
    }
    // All components' blocks, in quarters of a full-size component's: the chroma of 4:2:0 has a
    // quarter of the luma's blocks, that of 4:2:2 half.
    let quarters = match handle.get(tj::TJPARAM_TJPARAM_SUBSAMP) {
        _ if handle.cmyk() => 16,
        tj::TJSAMP_TJSAMP_GRAY => 4,
        tj::TJSAMP_TJSAMP_422 | tj::TJSAMP_TJSAMP_440 => 8,
        tj::TJSAMP_TJSAMP_420 | tj::TJSAMP_TJSAMP_411 | tj::TJSAMP_TJSAMP_441 => 6,
        _ => 12,
    };
    let blocks = u64::from(width.div_ceil(8)) * u64::from(height.div_ceil(8));
    output + blocks * 128 * quarters / 4
}

/// A decompressor that has read `bytes`' header, and the image's full size, within the pixel limit.
fn open(bytes: &[u8], options: &DecodeOptions) -> Result<(Handle, u32, u32), DecodeError> {
    let mut handle = Handle::new()?;
    handle.set(tj::TJPARAM_TJPARAM_SCANLIMIT, MAX_SCANS)?;
    handle.set(tj::TJPARAM_TJPARAM_MAXMEMORY, MAX_MEMORY_MB)?;
    // SAFETY: the handle is valid; libjpeg-turbo reads at most `len` bytes from `bytes`.
    // Warnings (extraneous bytes before a marker, a bad ICC chunk...) leave a usable header.
    if unsafe { tj::tj3DecompressHeader(handle.0, bytes.as_ptr(), bytes.len() as _) } != 0 && !handle.warned() {
        return Err(DecodeError::Failed(handle.error()));
    }
    let width = handle.get(tj::TJPARAM_TJPARAM_JPEGWIDTH);
    let height = handle.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT);
    let (width, height) = match (u32::try_from(width), u32::try_from(height)) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 => (w, h),
        _ => return Err(DecodeError::Failed(format!("JPEG header gives no size ({width}x{height})"))),
    };
    check_pixels(width, height, options.max_pixels)?;
    Ok((handle, width, height))
}

/// The largest DCT scale denominator (8, 4, 2 or 1) whose output short side still covers 90% of
/// `target`; libjpeg-turbo's scaled size is the full size divided by it, rounded up.
///
/// Why 90%: a photo just under a step (a short side of 853, the album app's 1280x853 uploads) would
/// otherwise decode at twice the size (1/2, not 1/4) for a 5% upscale's worth of detail. Against
/// CLIP's reference (full decode) on copies of the camera photos at 806-860 and 430 px, the coarser
/// step kept the cosine at 0.998 mean, 0.993 worst (0.9999 before), inside the decode gate of 0.995
/// and 0.985, and took 17-30% off decode + preprocess (`cargo bench --bench per_core`). At 80% the
/// worst photo fell to 0.989.
/// A view that needs a long side (the face detector's canvas) holds that side to the same 90%.
pub fn scale_denom(width: u32, height: u32, target: Option<u32>, long_target: Option<u32>) -> u32 {
    let Some(target) = target else { return 1 };
    let least = |target: u32| (target * 9).div_ceil(10);
    let (short, long) = (width.min(height), width.max(height));
    let covers = |d: u32| {
        short.div_ceil(d) >= least(target)
            && long_target.is_none_or(|long_target| long.div_ceil(d) >= least(long_target))
    };
    [8, 4, 2].into_iter().find(|d| covers(*d)).unwrap_or(1)
}

/// CMYK JPEGs are stored inverted (Adobe's convention, which Pillow assumes for every CMYK JPEG:
/// rawmode `CMYK;I`); Pillow's `convert("RGB")` then computes `255 - k` scaled by `255 - c`. On the
/// raw samples that is `k - k * (255 - c) / 255` with Pillow's rounding, which this reproduces.
fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    fn muldiv255(a: u32, b: u32) -> u32 {
        let t = a * b + 128;
        ((t >> 8) + t) >> 8
    }
    let mut rgb = Vec::with_capacity(cmyk.len() / 4 * 3);
    for px in cmyk.chunks_exact(4) {
        let k = u32::from(px[3]);
        for &c in &px[..3] {
            rgb.push((k - muldiv255(255 - u32::from(c), k)) as u8);
        }
    }
    rgb
}

/// A TurboJPEG decompressor, destroyed on drop.
struct Handle(tj::tjhandle);

impl Handle {
    fn new() -> Result<Self, DecodeError> {
        // SAFETY: plain constructor; a null result is handled.
        let ptr = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as i32) };
        if ptr.is_null() {
            return Err(DecodeError::Failed("libjpeg-turbo could not start a decompressor".into()));
        }
        Ok(Handle(ptr))
    }

    /// The DCT scale to decode this header's image at (lossless JPEG has no DCT to scale).
    fn scale_denom(&self, width: u32, height: u32, options: &DecodeOptions) -> u32 {
        let lossless = self.get(tj::TJPARAM_TJPARAM_LOSSLESS) != 0;
        if lossless { 1 } else { scale_denom(width, height, options.target_short_side, options.target_long_side) }
    }

    fn cmyk(&self) -> bool {
        matches!(self.get(tj::TJPARAM_TJPARAM_COLORSPACE) as u32, tj::TJCS_TJCS_CMYK | tj::TJCS_TJCS_YCCK)
    }

    fn get(&self, param: tj::TJPARAM) -> i32 {
        // SAFETY: valid handle, known parameter.
        unsafe { tj::tj3Get(self.0, param as i32) }
    }

    fn set(&mut self, param: tj::TJPARAM, value: i32) -> Result<(), DecodeError> {
        // SAFETY: valid handle, known parameter.
        if unsafe { tj::tj3Set(self.0, param as i32, value) } != 0 {
            return Err(DecodeError::Failed(self.error()));
        }
        Ok(())
    }

    fn error(&self) -> String {
        // SAFETY: libjpeg-turbo returns a NUL-terminated string owned by the handle.
        unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.0)) }.to_string_lossy().into_owned()
    }

    /// Whether the last call's failure was only a warning (the output is complete).
    fn warned(&self) -> bool {
        // SAFETY: valid handle.
        unsafe { tj::tj3GetErrorCode(self.0) == tj::TJERR_TJERR_WARNING as i32 }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once.
        unsafe { tj::tj3Destroy(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_smallest_scale_that_covers_the_input() {
        assert_eq!(scale_denom(4000, 3000, Some(224), None), 8); // 500x375
        assert_eq!(scale_denom(3000, 4000, Some(224), None), 8);
        assert_eq!(scale_denom(1792, 1792, Some(224), None), 8); // exactly 224
        assert_eq!(scale_denom(1784, 2000, Some(224), None), 8); // 223 at 1/8: a 1.004x upscale
        assert_eq!(scale_denom(1280, 853, Some(224), None), 4); // 214 at 1/4, not 427 at 1/2
        assert_eq!(scale_denom(1609, 2000, Some(224), None), 8); // ceil(201.1) = 202 rows: 90% of 224
        assert_eq!(scale_denom(1608, 2000, Some(224), None), 4); // 201 at 1/8: under 90%
        assert_eq!(scale_denom(1000, 800, Some(224), None), 2); // 400 at 1/2, 200 at 1/4 (under 90%)
        assert_eq!(scale_denom(400, 300, Some(224), None), 1);
        assert_eq!(scale_denom(4000, 3000, None, None), 1);
        // The face canvas's 640 on the long side: 1000 at 1/4 covers it, 500 at 1/8 does not.
        assert_eq!(scale_denom(4000, 3000, Some(224), Some(640)), 4);
        assert_eq!(scale_denom(1280, 853, Some(224), Some(640)), 2);
    }

    #[test]
    fn cmyk_converts_like_pillow() {
        // Stored (inverted) samples: 255 = no ink. No ink anywhere is white; full K is black.
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 255]), vec![255, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 0]), vec![0, 0, 0]);
        // Full cyan (stored 0), no black: red channel 0, green and blue full.
        assert_eq!(cmyk_to_rgb(&[0, 255, 255, 255]), vec![0, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[128, 64, 200, 100]), vec![50, 25, 78]);
    }
}
