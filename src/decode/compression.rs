//! How hard a JPEG was last compressed: the quality its luminance quantization table was scaled
//! from, estimated as ImageMagick's `%Q` and libjpeg's `jpeg_set_quality` define it. libjpeg (and
//! every encoder derived from it: Pillow, libjpeg-turbo, most phones' and apps' re-encoders) scales
//! the standard table (Annex K) by `S = 5000 / Q` below quality 50 and `S = 200 - 2Q` from 50, each
//! value `(standard * S + 50) / 100` clamped to 1..255; the estimate is the quality whose table is
//! nearest. A camera's own tables are not scaled standard ones: they still give a number, near
//! its quality.
//! The best shot reads it to tell a re-encoded copy from its original (docs/design.md, "The best
//! shot and the cover").

use super::exif::jpeg_segments;

/// The standard luminance table (ITU-T T.81 Annex K, table K.1), in zig-zag order as DQT holds it.
const STANDARD_LUMINANCE: [u16; 64] = [
    16, 11, 12, 14, 12, 10, 16, 14, 13, 14, 18, 17, 16, 19, 24, 40, 26, 24, 22, 22, 24, 49, 35, 37, 29, 40, 58, 51, 61,
    60, 57, 51, 56, 55, 64, 72, 92, 78, 64, 68, 87, 69, 55, 56, 80, 109, 81, 87, 95, 98, 103, 104, 103, 62, 77, 113,
    121, 112, 100, 120, 92, 101, 103, 99,
];

/// The estimated quality (1 to 100) of a JPEG's first table (table 0: luminance), if it has one:
/// the quality whose libjpeg table is nearest to it (the least sum of absolute differences; the
/// higher quality of equals).
pub fn jpeg_quality(jpeg: &[u8]) -> Option<u8> {
    let table = jpeg_segments(jpeg).filter(|(marker, _)| *marker == 0xDB).find_map(|(_, body)| first_table(body))?;
    let off = |quality: u32| -> u32 {
        let scale = if quality < 50 { 5000 / quality } else { 200 - 2 * quality };
        STANDARD_LUMINANCE
            .iter()
            .zip(&table)
            .map(|(&standard, &q)| ((u32::from(standard) * scale + 50) / 100).clamp(1, 255).abs_diff(u32::from(q)))
            .sum()
    };
    (1..=100u32).rev().min_by_key(|&quality| off(quality)).map(|quality| quality as u8)
}

/// Table 0 of a DQT segment's body, which may hold several tables (8- or 16-bit values each).
fn first_table(mut body: &[u8]) -> Option<[u16; 64]> {
    while let Some((&info, rest)) = body.split_first() {
        let (precision, id) = (info >> 4, info & 0x0F);
        let size = if precision == 0 { 64 } else { 128 };
        let values = rest.get(..size)?;
        if id == 0 {
            let mut table = [0u16; 64];
            for (i, q) in table.iter_mut().enumerate() {
                *q = if precision == 0 {
                    u16::from(values[i])
                } else {
                    u16::from_be_bytes([values[2 * i], values[2 * i + 1]])
                };
            }
            return Some(table);
        }
        body = &rest[size..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG encoded by `image` (libjpeg's scaling of the standard tables) at `quality`.
    fn encoded(quality: u8) -> Vec<u8> {
        let pixels =
            image::RgbImage::from_fn(64, 48, |x, y| image::Rgb([(x * 4) as u8, (y * 5) as u8, ((x ^ y) * 3) as u8]));
        let mut bytes = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, quality).encode_image(&pixels).unwrap();
        bytes
    }

    #[test]
    fn the_quality_a_jpeg_was_saved_at_is_read_back() {
        for quality in [15, 30, 50, 60, 75, 90, 95, 100] {
            let read = jpeg_quality(&encoded(quality)).expect("a table");
            assert!(read.abs_diff(quality) <= 1, "saved at {quality}, read {read}");
        }
        assert_eq!(jpeg_quality(b"\xFF\xD8\xFF\xD9"), None, "no table");
        assert_eq!(jpeg_quality(b"\x89PNG"), None);
        let truncated = encoded(80);
        for cut in 0..200.min(truncated.len()) {
            let _ = jpeg_quality(&truncated[..cut]);
        }
    }
}
