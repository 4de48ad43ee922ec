//! The image tower: the CLIP (or SigLIP) vision graph, what the service is told about it, and
//! how it lays out a batch.
//!
//! Photos wait in the worker's queue as resized squares of bytes (a quarter of their size as
//! floats). Only when their batch runs are they laid end to end into one buffer that is kept from
//! batch to batch, so that a full batch (38 MB of floats at 224 px and 64 photos) is not allocated
//! again for each run; on the way in they are normalised, for the NCHW layout, or left as bytes
//! for a model that normalises them itself (`normalizer`, `CLIPFN_NORMALIZE=model`).

use std::time::{Duration, Instant};

use image::RgbImage;
use ort::value::TensorRef;

use super::{
    Buckets, Graph, ModelError, ModelFile, Photos, Runtime, Shapes, Tower, TowerInfo, normalizer::Normalizer,
    outputs::unit_rows,
};
use crate::{
    preprocess::Transform,
    settings::{Device, ModelSettings, Normalize, Weights},
};

/// What the rest of the service needs to know about the image tower.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageModelInfo {
    pub id: String,
    /// The ONNX file that runs (relative to its folder when the model is a folder).
    pub file: String,
    pub precision: Weights,
    /// The provider in use.
    pub provider: Device,
    /// Why `auto` fell back to CPU, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
    pub input_name: String,
    pub output_name: String,
    /// Side of the square input image.
    pub image_size: u32,
    /// How photos are resized, cropped and normalised for this model.
    pub preprocessing: Transform,
    /// What the batch holds: normalised floats, or raw bytes normalised in the model.
    pub input_layout: Layout,
    /// Length of one embedding.
    pub dim: usize,
    pub batch_size: usize,
    /// The batch sizes run at start-up, so that no request pays for a first run at a new shape: on
    /// CUDA every batch bucket (kernel selection and memory planning take seconds there), on CPU 1
    /// and `batch_size` (model/shapes.rs).
    pub warm_up_batches: Vec<usize>,
}

impl TowerInfo for ImageModelInfo {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

impl ImageModelInfo {
    /// Values in one preprocessed photo.
    pub fn slot_len(&self) -> usize {
        3 * (self.image_size as usize).pow(2)
    }
}

/// Where the image tower's part of start-up went, for the "model loaded and warmed up" log line.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoadTimings {
    /// Building the session: parsing the graph, optimising it, placing and prepacking weights.
    pub session: Duration,
    /// The warm-up batches (batch 1 and the full batch size).
    pub warm_up: Duration,
}

pub struct ImageModel {
    graph: Graph,
    /// Present when the model normalises (`input_layout` is raw).
    normalizer: Option<Normalizer>,
    batch: PixelBatch,
    buckets: Buckets,
    pub info: ImageModelInfo,
    pub timings: LoadTimings,
}

impl ImageModel {
    /// Builds the session from `model`, refuses a fixed batch dimension, and warms it up at batch
    /// 1 and at the full batch size; the warm-up also reveals the embedding size.
    pub fn load(runtime: &mut Runtime, settings: &ModelSettings, model: ModelFile) -> Result<Self, ModelError> {
        let started = Instant::now();
        // The shapes are known once the graph is read: declared below.
        let mut graph = Graph::load(runtime, settings, &model.data, Shapes::any())?;
        // The session holds the weights now: fetched bytes must not stay beside them, nor sit
        // under the warm-up's peak.
        drop(model.data);
        let device = runtime.device();
        let timings = LoadTimings { session: started.elapsed(), ..LoadTimings::default() };
        let (input, shape) =
            graph.inputs.first().cloned().ok_or_else(|| ModelError::Load("the graph has no input".into()))?;
        let output_name = match &settings.output_name {
            Some(name) => name.clone(),
            None => super::outputs::embedding_output(&graph.outputs, "image_embeds")?,
        };
        let shape = shape.as_deref();
        require_dynamic_batch(&input, shape)?;
        let side = settings.image_size.or(square_side(shape));
        let preprocessing = match (model.preprocessing, side) {
            // The graph (or CLIPFN_IMAGE_SIZE) must take what the folder's config makes.
            (Some(transform), Some(side)) if side != transform.side() => {
                return Err(ModelError::Preprocessor {
                    file: "the folder's preprocessing",
                    reason: format!("it makes {0}x{0} input, but the model takes {side}x{side}", transform.side()),
                });
            }
            (Some(transform), _) => transform,
            (None, Some(side)) => Transform::clip(side),
            (None, None) => {
                return Err(ModelError::Load(format!(
                    "input shape {shape:?} is not [N, 3, S, S] with a fixed S; set CLIPFN_IMAGE_SIZE"
                )));
            }
        };
        let info = ImageModelInfo {
            id: model.id,
            file: model.file,
            precision: model.precision,
            provider: device,
            fallback_reason: runtime.fallback_reason().map(str::to_string),
            input_name: settings.input_name.clone().unwrap_or(input),
            output_name,
            image_size: preprocessing.side(),
            preprocessing,
            input_layout: match (settings.normalize, device) {
                (Normalize::Model, _) | (Normalize::Auto, Device::Cuda) => Layout::RawNhwc,
                (Normalize::Cpu, _) | (Normalize::Auto, Device::Cpu) => Layout::NormalizedNchw,
            },
            dim: 0,
            batch_size: settings.batch_size(device),
            warm_up_batches: Vec::new(),
        };
        let normalizer = match info.input_layout {
            Layout::RawNhwc => Some(Normalizer::new(&runtime.builder(settings)?, &info.preprocessing, device)?),
            Layout::NormalizedNchw => None,
        };
        let started = Instant::now();
        let batch = PixelBatch::new(&info);
        let buckets = Buckets::powers_of_two(info.batch_size, settings.fill(device));
        let side = i64::from(info.image_size);
        graph.shapes = Shapes::batches(&buckets, &[3, side, side]);
        let mut model = ImageModel { graph, normalizer, batch, buckets, info, timings };
        model.info.warm_up_batches = model.buckets.warm_up_sizes(device.is_cuda());
        for n in model.info.warm_up_batches.clone() {
            // The first run reveals the embedding's size.
            model.info.dim = model.warm_up_batch(n)?.first().map_or(0, Vec::len);
            if model.info.dim == 0 {
                return Err(ModelError::Load("the model returned empty embeddings".into()));
            }
        }
        model.timings.warm_up = started.elapsed();
        Ok(model)
    }

    /// Runs `n` black photos: the known-good input.
    fn warm_up_batch(&mut self, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
        self.run(&vec![&self.black(); n])
    }

    fn black(&self) -> RgbImage {
        RgbImage::new(self.info.image_size, self.info.image_size)
    }

    /// Runs the batch laid out in `self.batch`, of `n` photos.
    fn infer(&mut self, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
        let side = i64::from(self.info.image_size);
        let shape = [n as i64, 3, side, side];
        let (name, output) = (self.info.input_name.as_str(), self.info.output_name.as_str());
        let read = |outputs: &ort::session::SessionOutputs| unit_rows(outputs, output, n);
        match (&self.batch.pixels, self.normalizer.as_mut()) {
            (Pixels::NormalizedNchw(floats), None) => {
                let input = TensorRef::from_array_view((shape, &floats[..])).map_err(ModelError::inference)?;
                self.graph.run_inputs(&shape, ort::inputs![name => input], read)
            }
            (Pixels::RawNhwc(bytes), Some(normalizer)) => {
                let input = normalizer.run(bytes, n)?;
                self.graph.run_inputs(&shape, ort::inputs![name => input], read)
            }
            _ => Err(ModelError::Inference("photos were laid out for another layout".into())),
        }
    }
}

/// The image tower takes the resized squares the pipeline queues, and lays each batch out itself.
impl Tower for ImageModel {
    type Io = Photos;

    fn info(&self) -> &ImageModelInfo {
        &self.info
    }

    fn run(&mut self, squares: &[&RgbImage]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.batch.lay_out(squares, &self.info.preprocessing);
        self.infer(squares.len())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        self.warm_up_batch(1).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }

    fn batching(&self) -> Option<(&Buckets, RgbImage)> {
        Some((&self.buckets, self.black()))
    }
}

/// Which tensor layout the model takes (see `CLIPFN_NORMALIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// float32 `[3, S, S]`, normalised on the host.
    NormalizedNchw,
    /// uint8 `[S, S, 3]` straight from the resizer; the model normalises.
    RawNhwc,
}

/// A batch of photos laid end to end, as the model takes them.
#[derive(Debug)]
pub enum Pixels {
    NormalizedNchw(Vec<f32>),
    RawNhwc(Vec<u8>),
}

/// The batch buffer: room for a full batch in the model's layout, kept from batch to batch.
pub struct PixelBatch {
    pixels: Pixels,
}

impl PixelBatch {
    /// Room for a full batch of `model`'s input.
    pub fn new(model: &ImageModelInfo) -> Self {
        let capacity = model.batch_size * model.slot_len();
        let pixels = match model.input_layout {
            Layout::NormalizedNchw => Pixels::NormalizedNchw(Vec::with_capacity(capacity)),
            Layout::RawNhwc => Pixels::RawNhwc(Vec::with_capacity(capacity)),
        };
        PixelBatch { pixels }
    }

    /// Lays `squares` out end to end, in place of the last batch.
    pub fn lay_out(&mut self, squares: &[&RgbImage], transform: &Transform) -> &Pixels {
        match &mut self.pixels {
            Pixels::NormalizedNchw(values) => {
                values.clear();
                for square in squares {
                    let start = values.len();
                    values.resize(start + square.as_raw().len(), 0.0);
                    normalize_into(square, transform, &mut values[start..]);
                }
            }
            Pixels::RawNhwc(bytes) => {
                bytes.clear();
                squares.iter().for_each(|square| bytes.extend_from_slice(square.as_raw()));
            }
        }
        &self.pixels
    }
}

/// Per-channel `scale` and `offset` such that `value * scale + offset` rescales and normalises a
/// 0..255 pixel value in one multiply-add.
pub(super) fn scale_and_offset(transform: &Transform) -> ([f32; 3], [f32; 3]) {
    let (rescale, mean, std) = (transform.rescale, transform.mean, transform.std);
    (std::array::from_fn(|c| rescale / std[c]), std::array::from_fn(|c| -mean[c] / std[c]))
}

/// Writes normalised planes (NCHW) of a square RGB image into `slot`.
fn normalize_into(square: &RgbImage, transform: &Transform, slot: &mut [f32]) {
    let plane = (square.width() * square.height()) as usize;
    let (r, rest) = slot.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    // Folding rescale, -mean and /std into one multiply and one add per value. Not `mul_add`:
    // without the `fma` target feature that is a call to a software fmaf per value, which took
    // 3% of the server's CPU time with inference free (docs/design.md, "Where a photo's CPU time goes").
    let (scale, offset) = scale_and_offset(transform);
    for (i, px) in square.as_raw().chunks_exact(3).enumerate() {
        r[i] = f32::from(px[0]) * scale[0] + offset[0];
        g[i] = f32::from(px[1]) * scale[1] + offset[1];
        b[i] = f32::from(px[2]) * scale[2] + offset[2];
    }
}

/// Photos from several requests share a batch of any size up to CLIPFN_BATCH_SIZE, so the input's
/// first dimension must be dynamic (ONNX Runtime reports it as -1).
fn require_dynamic_batch(name: &str, shape: Option<&[i64]>) -> Result<(), ModelError> {
    match shape {
        Some([n, ..]) if *n >= 0 => Err(ModelError::Load(format!(
            "input '{name}' has a fixed batch dimension of {n}; clipfn needs a dynamic batch dimension \
             (export with dynamic axis 0, e.g. torch.onnx.export(..., dynamic_axes={{'{name}': {{0: 'batch'}}}}))"
        ))),
        _ => Ok(()),
    }
}

/// S of an `[N, 3, S, S]` input with a fixed S.
fn square_side(shape: Option<&[i64]>) -> Option<u32> {
    match shape {
        Some([_, 3, h, w]) if h == w && *h > 0 => Some(*h as u32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::{Decoded, Format},
        preprocess::{CLIP_MEAN, CLIP_STD, Filter, Resize, preprocess, resize_and_crop_scaled},
    };

    /// A photo decoded at full size.
    fn full_size(image: RgbImage) -> Decoded {
        Decoded {
            full_size: image.dimensions(),
            image,
            format: Format::Png,
            scale_denom: 1,
            metadata: Default::default(),
        }
    }

    /// The photos preprocessed and laid out as one normalised NCHW batch.
    fn normalized(photos: &[&Decoded], transform: &Transform) -> Vec<f32> {
        let squares: Vec<RgbImage> = photos.iter().map(|photo| preprocess(photo, transform).unwrap()).collect();
        let mut batch = PixelBatch { pixels: Pixels::NormalizedNchw(Vec::new()) };
        let Pixels::NormalizedNchw(values) = batch.lay_out(&squares.iter().collect::<Vec<_>>(), transform) else {
            unreachable!()
        };
        values.clone()
    }

    #[test]
    fn normalises_with_clip_statistics() {
        let white = full_size(RgbImage::from_pixel(300, 240, image::Rgb([255, 255, 255])));
        let slot = normalized(&[&white], &Transform::clip(224));
        for c in 0..3 {
            let expected = (1.0 - CLIP_MEAN[c]) / CLIP_STD[c];
            let plane = &slot[c * 224 * 224..(c + 1) * 224 * 224];
            assert!(plane.iter().all(|v| (v - expected).abs() < 1e-4), "channel {c}");
        }
    }

    #[test]
    fn a_batch_lays_its_photos_end_to_end() {
        let [black, white] = [0, 255].map(|value| full_size(RgbImage::from_pixel(224, 224, image::Rgb([value; 3]))));
        let values = normalized(&[&black, &white], &Transform::clip(224));
        let slot = 3 * 224 * 224;
        assert_eq!(values.len(), 2 * slot);
        assert!(values[..slot].iter().all(|&v| v < -1.4), "the black photo first");
        assert!(values[slot..].iter().all(|&v| v > 1.9), "then the white one");
    }

    #[test]
    fn raw_layout_is_the_resized_square() {
        let image = full_size(RgbImage::from_pixel(448, 448, image::Rgb([10, 20, 30])));
        let transform = Transform::clip(224);
        let mut batch = PixelBatch { pixels: Pixels::RawNhwc(Vec::new()) };
        let Pixels::RawNhwc(raw) = batch.lay_out(&[&preprocess(&image, &transform).unwrap()], &transform) else {
            panic!()
        };
        assert_eq!(raw.len(), 224 * 224 * 3);
        assert_eq!(&raw[..6], &[10, 20, 30, 10, 20, 30]);
    }

    #[test]
    fn follows_the_transform() {
        // A 300x200 photo whose left half is dark: squashing to 64 keeps both halves, while a
        // shortest-edge resize to 80 and a 64 crop keeps the middle, and the statistics apply.
        let image = full_size(RgbImage::from_fn(300, 200, |x, _| image::Rgb([if x < 150 { 0 } else { 255 }; 3])));
        let half = [0.5; 3];
        let squash = Transform {
            resize: Resize::Square(64),
            crop: None,
            filter: Filter::Bilinear,
            mean: half,
            std: half,
            ..Transform::clip(64)
        };
        let slot = normalized(&[&image], &squash);
        assert_eq!(slot.len(), 3 * 64 * 64);
        assert!((slot[0] + 1.0).abs() < 1e-4 && (slot[63] - 1.0).abs() < 1e-4, "{} {}", slot[0], slot[63]);
        let cropped = Transform { resize: Resize::ShortestEdge(80), crop: Some(64), ..squash };
        let square = resize_and_crop_scaled(&image.image, (300, 200), 1, &cropped).unwrap();
        assert_eq!(square.dimensions(), (64, 64));
        // Resized to 120x80, cropped at x 28..92: the edge at 60 sits at output x 32.
        assert_eq!((square.get_pixel(30, 10).0[0], square.get_pixel(34, 10).0[0]), (0, 255));
    }
}
