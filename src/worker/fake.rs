//! Stand-in towers for unit tests, here and in `api`: they can lose their device mid-flight, which
//! cannot happen on this machine for real. Both towers take a switch for their device's state.
//!
//! Unlike the real towers' (`model::outputs`), their embeddings are not of unit length but easy to
//! check. A photo's embedding is `[mean of its normalised values, 1]`. A photo whose values are all above
//! 1.9 (white: 1.93, 2.08 and 2.15 by channel) fails the run it is in, as in the poison model of
//! tools/make_models.py; one whose values are all below -1.4 (black: -1.79, -1.75 and -1.48 by
//! channel) makes the run panic. A text's embedding is `[number of its ids, 0]`.

use std::sync::{
    Arc,
    atomic::{AtomicU8, Ordering},
};

use image::RgbImage;

use crate::{
    model::{
        IdType, ImageModelInfo, Layout, ModelError, Photos, PixelBatch, Pixels, Shapes, TextModelInfo, Texts, Tower,
    },
    preprocess::Transform,
    settings::{Device, Weights},
    tokenize::{Padding, Tokens},
};

pub const DEVICE_OK: u8 = 0;
/// Every run and the warm-up input fail.
pub const DEVICE_LOST: u8 = 1;
/// Every run fails and the warm-up input panics.
pub const DEVICE_CRASHING: u8 = 2;

/// For `Worker::start` with no text tower.
pub const NO_TEXT: Option<FakeText> = None;

fn lost() -> ModelError {
    ModelError::Inference("CUDA error: device lost".into())
}

/// Whether a run gets as far as the model on `device`: only while it is fine.
fn run_on(device: &AtomicU8) -> Result<(), ModelError> {
    if device.load(Ordering::SeqCst) == DEVICE_OK { Ok(()) } else { Err(lost()) }
}

/// The warm-up input on `device`.
fn check_on(device: &AtomicU8) -> Result<(), ModelError> {
    match device.load(Ordering::SeqCst) {
        DEVICE_OK => Ok(()),
        DEVICE_LOST => Err(lost()),
        _ => panic!("the driver crashed"),
    }
}

/// The fakes run their batches whole: they declare no shapes.
pub struct FakeModel {
    info: ImageModelInfo,
    batch: PixelBatch,
    device: Arc<AtomicU8>,
    shapes: Shapes,
}

impl FakeModel {
    /// The model and the switch for its device's state.
    pub fn new(batch_size: usize, image_size: u32) -> (Self, Arc<AtomicU8>) {
        let info = ImageModelInfo {
            id: "fake".into(),
            file: "fake.onnx".into(),
            precision: Weights::Fp32,
            provider: Device::Cpu,
            fallback_reason: None,
            input_name: "pixel_values".into(),
            output_name: "image_embeds".into(),
            image_size,
            preprocessing: Transform::clip(image_size),
            input_layout: Layout::NormalizedNchw,
            dim: 2,
            batch_size,
            warm_up_batches: vec![1, batch_size],
        };
        let batch = PixelBatch::new(&info);
        let device = Arc::new(AtomicU8::new(DEVICE_OK));
        (FakeModel { info, batch, device: Arc::clone(&device), shapes: Shapes::new([]) }, device)
    }
}

impl Tower for FakeModel {
    type Io = Photos;

    fn info(&self) -> &ImageModelInfo {
        &self.info
    }

    fn run(&mut self, squares: &[&RgbImage]) -> Result<Vec<Vec<f32>>, ModelError> {
        run_on(&self.device)?;
        let slot_len = self.info.slot_len();
        let Pixels::NormalizedNchw(values) = self.batch.lay_out(squares, &self.info.preprocessing) else {
            unreachable!("the fake takes normalised input")
        };
        assert_eq!(values.len(), squares.len() * slot_len);
        let photos: Vec<&[f32]> = values.chunks(slot_len).collect();
        if photos.iter().any(|p| p.iter().all(|&v| v < -1.4)) {
            panic!("a black photo");
        }
        if photos.iter().any(|p| p.iter().all(|&v| v > 1.9)) {
            return Err(ModelError::Inference("Reshape: the input cannot be reshaped".into()));
        }
        Ok(photos.iter().map(|p| vec![p.iter().sum::<f32>() / p.len() as f32, 1.0]).collect())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        check_on(&self.device)
    }

    fn shapes(&self) -> &Shapes {
        &self.shapes
    }
}

pub struct FakeText {
    info: TextModelInfo,
    device: Arc<AtomicU8>,
    shapes: Shapes,
}

impl FakeText {
    /// The text tower and the switch for its device's state.
    pub fn new(batch_size: usize) -> (Self, Arc<AtomicU8>) {
        let info = TextModelInfo {
            id: "fake-text".into(),
            provider: Device::Cpu,
            input_name: "input_ids".into(),
            mask_name: None,
            ids_type: IdType::Int64,
            output_name: "text_embeds".into(),
            context: None,
            padding: Padding { pad_id: 0, length: None, from: "the fake's batches, padded to their longest".into() },
            tokenizer: "clip-bpe",
            dim: 2,
            batch_size,
        };
        let device = Arc::new(AtomicU8::new(DEVICE_OK));
        (FakeText { info, device: Arc::clone(&device), shapes: Shapes::new([]) }, device)
    }
}

impl Tower for FakeText {
    type Io = Texts;

    fn info(&self) -> &TextModelInfo {
        &self.info
    }

    fn run(&mut self, texts: &[&Tokens]) -> Result<Vec<Vec<f32>>, ModelError> {
        run_on(&self.device)?;
        Ok(texts.iter().map(|tokens| vec![tokens.ids.len() as f32, 0.0]).collect())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        check_on(&self.device)
    }

    fn shapes(&self) -> &Shapes {
        &self.shapes
    }
}
