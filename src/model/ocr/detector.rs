//! The text detector tower (PP-OCR's DB): one view at a time, BGR `(p / 255 - 0.5) / 0.5`, its
//! output the probability of text at each pixel of the view.
//!
//! Views differ in size (each side a multiple of 32), so with `Declared` sizes (CLIPFN_OCR_SIZES)
//! the tower declares the sizes it runs (model/shapes.rs, [`view_sizes`]) and pads a view at the
//! top-left, with zeros (normalised mid-grey, what the first convolution pads with itself) up to
//! the smallest that holds it; the map is cropped back to the view (docs/ocr.md, "Shapes"). With
//! `Exact` sizes a view runs as it is.

use super::{Graph, OcrTower, ProbabilityMap, lay_out_lines, open_graph, warmed};
use crate::{
    model::{ModelData, ModelError, OcrViews, Runtime, Shapes, Tower},
    preprocess::{MAX_VIEW_SIDE, OcrView, view_size},
    settings::{ModelSettings, OcrSizes},
};

/// The aspects whose views at the resolution are declared exactly: 1:1, 5:4, 4:3, 3:2, 8:5, 16:9,
/// 2:1 and a phone's screenshot, 19.5:9.
const ASPECTS: [f64; 8] = [1.0, 1.25, 4.0 / 3.0, 1.5, 1.6, 16.0 / 9.0, 2.0, 19.5 / 9.0];
/// Smaller photos' views: (short, long) sides.
const SMALL: [(u32, u32); 4] = [(256, 256), (256, 512), (480, 480), (480, 960)];

pub struct OcrDetector {
    graph: Graph,
    /// The declared (width, height) sizes, smallest first (warmed up on CUDA in either mode).
    sizes: Vec<(u32, u32)>,
    /// Whether views are padded to `sizes` (`Declared`), or run as they are.
    pads: bool,
    pub info: OcrTower,
}

impl OcrDetector {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        (resolution, ocr_sizes): (u32, OcrSizes),
    ) -> Result<Self, ModelError> {
        let sizes = view_sizes(resolution);
        let pads = ocr_sizes == OcrSizes::Declared;
        let shapes = if pads {
            Shapes::new(sizes.iter().map(|&(w, h)| vec![1, 3, i64::from(h), i64::from(w)]))
        } else {
            Shapes::any()
        };
        let graph = open_graph(runtime, settings, data, ("detector", &file), "[N, 3, H, W] -> [N, 1, H, W]", shapes)?;
        let every = graph.warms_every_shape;
        warmed(OcrDetector { graph, sizes, pads, info: OcrTower { file, batch_size: 1 } }, "detector", every)
    }

    /// The declared size that holds a `width` x `height` view with the fewest pixels; the view's
    /// own where none does (a bug: counted as a shape outside the set) or where views run as they are.
    fn padded(&self, (width, height): (u32, u32)) -> (u32, u32) {
        let holds = |&(w, h): &(u32, u32)| self.pads && w >= width && h >= height;
        self.sizes.iter().copied().find(holds).unwrap_or((width, height))
    }

    fn detect(&mut self, view: &image::RgbImage) -> Result<ProbabilityMap, ModelError> {
        let (width, height) = view.dimensions();
        let (padded_width, padded_height) = self.padded((width, height));
        let pixels = lay_out_lines(std::iter::once(view), padded_height, padded_width);
        let (_, values) = self.graph.run([1, 3, i64::from(padded_height), i64::from(padded_width)], &pixels, 0)?;
        if values.len() != (padded_width * padded_height) as usize {
            return Err(ModelError::Inference(format!(
                "the text detector gave {} values for a {padded_width} x {padded_height} view",
                values.len()
            )));
        }
        let values = values
            .chunks_exact(padded_width as usize)
            .take(height as usize)
            .flat_map(|row| &row[..width as usize])
            .copied()
            .collect();
        Ok(ProbabilityMap { width, height, values })
    }
}

/// The (width, height) views the detector runs, smallest first: a photo at least `resolution` on
/// its short side has a view that high (or wide), as long as its aspect makes it; the common
/// aspects exactly, then steps of 4/3 up to the longest view, both ways up; a smaller photo's view
/// takes one of [`SMALL`], or the smallest of those that holds it.
pub fn view_sizes(resolution: u32) -> Vec<(u32, u32)> {
    let short = view_size((resolution, resolution), resolution).0;
    let mut longs: Vec<u32> =
        ASPECTS.iter().map(|aspect| view_size(((f64::from(short) * aspect) as u32, short), resolution).0).collect();
    while let Some(&last) = longs.last().filter(|&&last| last * 4 / 3 < MAX_VIEW_SIDE) {
        longs.push((last * 4 / 3).next_multiple_of(32));
    }
    longs.push(MAX_VIEW_SIDE);
    let both_ways = |(short, long): (u32, u32)| [(long, short), (short, long)];
    let mut sizes: Vec<(u32, u32)> =
        longs.into_iter().map(|long| (short, long)).chain(SMALL).flat_map(both_ways).collect();
    sizes.sort_by_key(|&(w, h)| (w * h, w, h));
    sizes.dedup();
    sizes
}

/// One view in, its probability map out.
impl Tower for OcrDetector {
    type Io = OcrViews;

    fn info(&self) -> &OcrTower {
        &self.info
    }

    fn run(&mut self, views: &[&OcrView]) -> Result<Vec<ProbabilityMap>, ModelError> {
        views.iter().map(|view| self.detect(&view.view)).collect()
    }

    fn check(&mut self) -> Result<(), ModelError> {
        self.detect(&image::RgbImage::new(64, 32)).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }

    fn warm_up(&mut self, every: bool) -> Result<(), ModelError> {
        if !every {
            return self.check();
        }
        for (width, height) in self.sizes.clone() {
            self.detect(&image::RgbImage::new(width, height))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_views_are_few_and_hold_every_photos() {
        let sizes = view_sizes(736);
        assert!(sizes.len() <= 32, "{}: {sizes:?}", sizes.len());
        for aspect in [(4000, 3000), (3000, 4000), (1600, 1000), (1920, 1080), (1170, 2532), (1000, 1000)] {
            let view = view_size(aspect, 736);
            assert!(sizes.contains(&view), "{aspect:?}'s view {view:?} is declared exactly");
        }
        // Every view of every photo has a declared size that holds it.
        for width in (32..=16_000).step_by(97) {
            for height in (32..=16_000).step_by(389) {
                let (w, h) = view_size((width, height), 736);
                assert!(sizes.iter().any(|&(sw, sh)| sw >= w && sh >= h), "{width} x {height}: {w} x {h}");
            }
        }
    }
}
