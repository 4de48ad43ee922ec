//! GIF through the `gif` crate directly, at the palette level, to give what Pillow gives.
//!
//! Pillow opens a GIF's first frame as a palette image on a canvas the size of the logical screen
//! (filled with the frame's transparent index, or index 0) and `convert("RGB")` looks every index
//! up in the palette, the transparent one included. `image`'s GIF decoder instead makes transparent
//! pixels (0, 0, 0, 0), which would turn every sticker's background black. A GIF without any
//! palette is read as grayscale indices, as Pillow does.

use std::io::Cursor;

use gif::{ColorOutput, DecodeOptions as GifOptions, MemoryLimit};
use image::RgbImage;

use super::{DecodeError, DecodeOptions, check_pixels};

pub fn decode(bytes: &[u8], options: &DecodeOptions) -> Result<RgbImage, DecodeError> {
    let mut gif_options = GifOptions::new();
    gif_options.set_color_output(ColorOutput::Indexed);
    // One byte per pixel of one frame: the pixel budget bounds what a frame may allocate.
    let budget = std::num::NonZeroU64::new(options.max_pixels.max(1)).expect("max(1) is non-zero");
    gif_options.set_memory_limit(MemoryLimit::Bytes(budget));
    let mut decoder = gif_options.read_info(Cursor::new(bytes)).map_err(failed)?;
    let (width, height) = (u32::from(decoder.width()), u32::from(decoder.height()));
    check_pixels(width, height, options.max_pixels)?;
    let global = decoder.global_palette().map(<[u8]>::to_vec);
    let frame = decoder
        .next_frame_info()
        .map_err(failed)?
        .ok_or_else(|| DecodeError::Failed("GIF has no image".into()))?
        .clone();
    check_pixels(u32::from(frame.width), u32::from(frame.height), options.max_pixels)?;
    let mut indices = vec![0u8; decoder.buffer_size()];
    decoder.read_into_buffer(&mut indices).map_err(failed)?;

    // The first frame on its canvas; parts of a frame outside the logical screen are cut off.
    let fill = frame.transparent.unwrap_or(0);
    let mut canvas = vec![fill; width as usize * height as usize];
    let (left, top, fw) = (usize::from(frame.left), usize::from(frame.top), usize::from(frame.width));
    if fw > 0 && left < width as usize {
        let visible = fw.min(width as usize - left);
        for (y, row) in indices.chunks_exact(fw).enumerate().take((height as usize).saturating_sub(top)) {
            let start = (top + y) * width as usize + left;
            canvas[start..start + visible].copy_from_slice(&row[..visible]);
        }
    }
    let palette = frame.palette.or(global);
    let pixels = canvas
        .iter()
        .flat_map(|&i| match &palette {
            // Pillow pads short palettes with black.
            Some(p) => p.get(3 * usize::from(i)..3 * usize::from(i) + 3).map_or([0; 3], |c| [c[0], c[1], c[2]]),
            None => [i; 3],
        })
        .collect();
    Ok(RgbImage::from_raw(width, height, pixels).expect("canvas is width x height"))
}

fn failed(e: gif::DecodingError) -> DecodeError {
    DecodeError::Failed(format!("GIF: {e}"))
}
