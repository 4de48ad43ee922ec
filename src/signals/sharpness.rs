//! Sharpness as the album app measures it: the variance of the 3 x 3 Laplacian of the luma, at a
//! fixed size so that photos of any size compare: resized to 300 px on the long side (the other
//! side cut to whole pixels), enlarged too where the photo is smaller, as the app does. The app
//! decodes in full and resizes with OpenCV's area filter; clipfn takes the luma of its one decode,
//! which is at the DCT scale the CLIP square needs, and the box filter. The values differ a little
//! from the app's, so the threshold that answers as the app's 80 does is calibrated
//! (`CLIPFN_BLUR_THRESHOLD`, docs/design.md, "Sharpness and blur").

use fast_image_resize::FilterType;
use image::GrayImage;

/// The long side the luma is measured at.
const LONG_SIDE: u32 = 300;

/// Width and height of a `width` x `height` photo resized to [`LONG_SIDE`] on its long side, the
/// other side cut to whole pixels as the app's `int(w * s)` does.
pub fn measured_size(width: u32, height: u32) -> (u32, u32) {
    let long = u64::from(width.max(height).max(1));
    let size = |side: u32| (u64::from(side) * u64::from(LONG_SIDE) / long).max(1) as u32;
    (size(width), size(height))
}

/// The sharpness of `luma`, resized first unless it is at [`measured_size`] already (the luma
/// view the decode threads make is).
pub fn sharpness(luma: &GrayImage) -> f64 {
    let (width, height) = measured_size(luma.width(), luma.height());
    if luma.dimensions() == (width, height) {
        laplacian_variance(luma)
    } else {
        laplacian_variance(&super::shrink(luma, width, height, FilterType::Box))
    }
}

/// The sizes [`coarser`] measures at, as fractions of [`LONG_SIDE`]: 150 and 75 px on the long side.
pub const COARSER: [u32; 2] = [2, 4];

/// The sharpness of `luma` at half and a quarter of [`LONG_SIDE`] (150 and 75 px on the long side),
/// box-filtered from its [`measured_size`] view: the sizes the best shot compares photos of
/// different sizes at, where a smaller copy's resampling and codec artefacts, which raise the
/// variance at 300 px, are averaged away (docs/design.md, "The best shot and the cover").
pub fn coarser(luma: &GrayImage) -> [f64; 2] {
    let (width, height) = measured_size(luma.width(), luma.height());
    let view = if luma.dimensions() == (width, height) {
        None
    } else {
        Some(super::shrink(luma, width, height, FilterType::Box))
    };
    let view = view.as_ref().unwrap_or(luma);
    COARSER
        .map(|by| laplacian_variance(&super::shrink(view, (width / by).max(1), (height / by).max(1), FilterType::Box)))
}

/// `cv2.Laplacian(img, cv2.CV_64F).var()`: the kernel [[0, 1, 0], [1, -4, 1], [0, 1, 0]] with
/// OpenCV's default border (reflected about the edge pixel), and the population variance. In
/// integers, row by row: exact, and a fraction of a decode's time.
fn laplacian_variance(luma: &GrayImage) -> f64 {
    let (width, height) = (luma.width() as usize, luma.height() as usize);
    let pixels = luma.as_raw();
    // Reflected about the edge: -1 -> 1 and n -> n - 2 (a 1-pixel side reflects onto itself).
    let reflect = |i: isize, n: usize| {
        let last = n as isize - 1;
        (if i < 0 {
            -i
        } else if i > last {
            2 * last - i
        } else {
            i
        })
        .clamp(0, last) as usize
    };
    let row = |y: isize| {
        let y = reflect(y, height);
        &pixels[y * width..(y + 1) * width]
    };
    let (mut sum, mut squares) = (0i64, 0i64);
    for y in 0..height as isize {
        let (above, here, below) = (row(y - 1), row(y), row(y + 1));
        let mut add = |x: usize, left: u8, right: u8| {
            let value =
                i64::from(above[x]) + i64::from(below[x]) + i64::from(left) + i64::from(right) - 4 * i64::from(here[x]);
            sum += value;
            squares += value * value;
        };
        // The edge columns reflect; the columns between read their neighbours straight.
        add(0, here[reflect(-1, width)], here[reflect(1, width)]);
        for x in 1..width.saturating_sub(1) {
            add(x, here[x - 1], here[x + 1]);
        }
        if width > 1 {
            add(width - 1, here[width - 2], here[reflect(width as isize, width)]);
        }
    }
    let count = (width * height) as f64;
    let mean = sum as f64 / count;
    squares as f64 / count - mean * mean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_photo_has_none_and_edges_have_more() {
        assert_eq!(sharpness(&GrayImage::from_pixel(640, 480, image::Luma([128]))), 0.0);
        let stripes =
            |period: u32| GrayImage::from_fn(640, 480, move |x, _| image::Luma([(x / period % 2 * 255) as u8]));
        assert!(sharpness(&stripes(8)) > sharpness(&stripes(64)), "finer detail is sharper");
    }

    #[test]
    fn coarser_sizes_average_away_what_is_finer_than_them() {
        // Stripes a pixel wide are all edges at 300 px and flat grey at 150; stripes 16 px wide
        // keep their edges at both coarser sizes.
        let stripes =
            |period: u32| GrayImage::from_fn(300, 200, move |x, _| image::Luma([(x / period % 2 * 255) as u8]));
        let fine = stripes(1);
        assert!(sharpness(&fine) > 10_000.0, "{}", sharpness(&fine));
        let [half, quarter] = coarser(&fine);
        assert!(half < 1.0 && quarter < 1.0, "{half} {quarter}");
        let [half, quarter] = coarser(&stripes(16));
        assert!(half > 1_000.0 && quarter > 1_000.0, "{half} {quarter}");
        // A photo at another size is brought to the measured size first.
        assert_eq!(
            coarser(&stripes(16)),
            coarser(&GrayImage::from_fn(600, 400, |x, _| image::Luma([(x / 32 % 2 * 255) as u8])))
        );
    }

    #[test]
    fn follows_opencv_on_a_small_image() {
        // cv2.Laplacian(np.array([[0, 0, 0], [0, 9, 0], [0, 0, 0]], np.uint8), cv2.CV_64F) is
        // [[0, 18, 0], [18, -36, 18], [0, 18, 0]] (the border reflected about the edge pixel, so an
        // edge pixel sees the centre twice), and its variance 272.0.
        let dot = GrayImage::from_fn(3, 3, |x, y| image::Luma([if (x, y) == (1, 1) { 9 } else { 0 }]));
        assert!((laplacian_variance(&dot) - 272.0).abs() < 1e-9, "{}", laplacian_variance(&dot));
    }
}
