//! The 64-bit DCT perceptual hash, defined as ImageHash's `phash` (the album app's duplicate step):
//! the luma shrunk to 32 x 32 with Pillow's antialiased Lanczos filter, the 2-D DCT-II, its
//! top-left 8 x 8 block (the lowest frequencies), and one bit per coefficient: 1 where it is above
//! the block's median. Bits go row-major, the first one most significant, so the hash printed as 16
//! hex digits is `str(imagehash.phash(img))`. Near-duplicates (resized, recompressed, brightened,
//! slightly cropped) land a few bits apart; distinct photos about 32.

use std::f64::consts::PI;

use fast_image_resize::FilterType;
use image::GrayImage;

/// The side the luma is shrunk to, and the side of the low-frequency block that is kept.
const SIDE: usize = 32;
const BLOCK: usize = 8;

pub fn phash(luma: &GrayImage) -> u64 {
    let small = super::shrink(luma, SIDE as u32, SIDE as u32, FilterType::Lanczos3);
    let pixels: Vec<f64> = small.as_raw().iter().map(|&p| f64::from(p)).collect();
    let block = low_frequencies(&pixels);
    let median = median(&block);
    block.iter().fold(0u64, |hash, &c| (hash << 1) | u64::from(c > median))
}

/// The top-left `BLOCK` x `BLOCK` coefficients of the 2-D DCT-II of a `SIDE` x `SIDE` image,
/// row-major. Each coefficient is scipy's unnormalised one over 4: the scale does not change a
/// comparison with the median.
fn low_frequencies(pixels: &[f64]) -> [f64; BLOCK * BLOCK] {
    let cosines: Vec<f64> = (0..BLOCK * SIDE)
        .map(|i| {
            let (k, n) = (i / SIDE, i % SIDE);
            (PI * k as f64 * (2 * n + 1) as f64 / (2 * SIDE) as f64).cos()
        })
        .collect();
    let basis = |k: usize| &cosines[k * SIDE..(k + 1) * SIDE];
    // Along each row first (its lowest BLOCK frequencies), then down each of those columns.
    let rows: Vec<[f64; BLOCK]> = pixels
        .chunks_exact(SIDE)
        .map(|row| std::array::from_fn(|k| row.iter().zip(basis(k)).map(|(p, c)| p * c).sum()))
        .collect();
    std::array::from_fn(|i| {
        let (ky, kx) = (i / BLOCK, i % BLOCK);
        rows.iter().zip(basis(ky)).map(|(row, c)| row[kx] * c).sum()
    })
}

/// numpy's median: the mean of the two middle values of an even count.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    (sorted[mid - 1] + sorted[mid]) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brightness rising left to right: a pure first horizontal frequency.
    fn ramp(width: u32, height: u32) -> GrayImage {
        GrayImage::from_fn(width, height, |x, _| image::Luma([(x * 255 / (width - 1)) as u8]))
    }

    #[test]
    fn bits_are_row_major_from_the_most_significant() {
        // A left-to-right ramp has a large negative first horizontal coefficient, so the DC term (bit
        // 63) is set and the one beside it (bit 62) is not.
        let hash = phash(&ramp(320, 240));
        assert_eq!(hash >> 62, 0b10, "{hash:016x}");
    }

    /// Soft blobs at places no symmetry lines up (a symmetric picture has DCT coefficients of
    /// exactly 0 at the median, whose bits rounding decides).
    fn blobs(width: u32, height: u32) -> GrayImage {
        let centres = [(0.23, 0.31, 0.11), (0.71, 0.62, 0.17), (0.42, 0.83, 0.07), (0.88, 0.18, 0.09)];
        GrayImage::from_fn(width, height, |x, y| {
            let (u, v) = (f64::from(x) / f64::from(width), f64::from(y) / f64::from(height));
            let light: f64 =
                centres.iter().map(|(cx, cy, r)| (-((u - cx).powi(2) + (v - cy).powi(2)) / (r * r)).exp()).sum();
            image::Luma([(30.0 + 200.0 * light.min(1.0)) as u8])
        })
    }

    #[test]
    fn a_rescaled_copy_hashes_alike_and_another_picture_does_not() {
        let photo = blobs(400, 300);
        let half = super::super::shrink(&photo, 200, 150, FilterType::Lanczos3);
        assert!((phash(&photo) ^ phash(&half)).count_ones() <= 2, "{:016x} {:016x}", phash(&photo), phash(&half));
        assert!((phash(&photo) ^ phash(&ramp(400, 300))).count_ones() > 10);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
