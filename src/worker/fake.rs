//! Stand-in towers for unit tests, here and in `api`: they can lose their device mid-flight, which
//! cannot happen on this machine for real. Both towers take a switch for their device's state.
//!
//! Unlike the real towers' (`model::outputs`), their embeddings are not of unit length but easy to
//! check. A photo's embedding is `[mean of its normalised values, 1]`. A photo whose values are all above
//! 1.9 (white: 1.93, 2.08 and 2.15 by channel) fails the run it is in, as in the poison model of
//! tools/make_models.py; one whose values are all below -1.4 (black: -1.79, -1.75 and -1.48 by
//! channel) makes the run panic. A text's embedding is `[number of its ids, 0]`.
//!
//! The other towers (the face and text detectors and recognizers) have one stand-in,
//! [`FakeTower`], for tests of the serving order: it answers each input with a fixed output.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
    time::Duration,
};

use image::RgbImage;

use crate::{
    model::{
        Canvases, Detections, DetectorFormat, DetectorInfo, FaceCrops, IdType, ImageModelInfo, Info, Input, Layout,
        ModelError, ObjectFormat, ObjectInfo, ObjectViews, OcrTower, OcrViews, Output, Photos, PixelBatch, Pixels,
        ProbabilityMap, Recognized, RecognizerFormat, RecognizerInfo, Shapes, TextLines, TextModelInfo, Texts, Tower,
        TowerIo,
    },
    preprocess::{ObjectLayout, Transform},
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

/// A stand-in for a face, OCR or object tower: each input gets `answer`'s output, after `hold`.
pub struct FakeTower<Io: TowerIo> {
    info: Io::Info,
    answer: fn() -> Io::Output,
    /// How long each run holds its worker without using the CPU, as a GPU run would.
    hold: Duration,
    device: Arc<AtomicU8>,
    shapes: Shapes,
}

impl<Io: TowerIo> FakeTower<Io> {
    fn new(info: Io::Info, answer: fn() -> Io::Output) -> Self {
        let device = Arc::new(AtomicU8::new(DEVICE_OK));
        FakeTower { info, answer, hold: Duration::ZERO, device, shapes: Shapes::new([]) }
    }
}

impl<Io: TowerIo> Tower for FakeTower<Io> {
    type Io = Io;

    fn info(&self) -> &Info<Self> {
        &self.info
    }

    fn run(&mut self, inputs: &[&Input<Self>]) -> Result<Vec<Output<Self>>, ModelError> {
        run_on(&self.device)?;
        std::thread::sleep(self.hold);
        Ok(inputs.iter().map(|_| (self.answer)()).collect())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        check_on(&self.device)
    }

    fn shapes(&self) -> &Shapes {
        &self.shapes
    }
}

/// A face detector taking one canvas a batch, as the real one does; it finds no face.
pub fn fake_face_detector() -> FakeTower<Canvases> {
    let info = DetectorInfo {
        provider: Device::Cpu,
        file: "fake-detector.onnx".into(),
        format: DetectorFormat::Yunet,
        side: 640,
        side_from: "the fake",
        min_score: 0.7,
        min_score_from: "the fake",
        score_floor: 0.7,
        max_faces: 50,
    };
    FakeTower::new(info, || Detections { faces: Vec::new() })
}

/// A face recognizer taking `batch_size` faces a batch.
pub fn fake_face_recognizer(batch_size: usize) -> FakeTower<FaceCrops> {
    let info = RecognizerInfo {
        id: "fake-recognizer".into(),
        file: "fake-recognizer.onnx".into(),
        format: RecognizerFormat::Arcface,
        dim: 2,
        batch_size,
    };
    FakeTower::new(info, || vec![1.0, 0.0])
}

/// A text detector taking one view a batch, as the real one does; it finds no text.
pub fn fake_text_detector() -> FakeTower<OcrViews> {
    let info = OcrTower { file: "fake-text-detector.onnx".into(), batch_size: 1 };
    FakeTower::new(info, || ProbabilityMap { width: 1, height: 1, values: vec![0.0] })
}

/// A text recognizer taking `batch_size` lines a batch; it reads every line as "fake".
pub fn fake_text_recognizer(batch_size: usize) -> FakeTower<TextLines> {
    let info = OcrTower { file: "fake-text-recognizer.onnx".into(), batch_size };
    FakeTower::new(info, || Recognized { text: "fake".into(), score: 1.0 })
}

/// An object detector on "CUDA" whose every run holds its worker for `hold` without using the CPU,
/// as a long GPU run would; it finds nothing. The switch for its device's state comes with it.
pub fn slow_object_detector(hold: Duration) -> (FakeTower<ObjectViews>, Arc<AtomicU8>) {
    let info = ObjectInfo {
        file: "fake-objects.onnx".into(),
        format: ObjectFormat::Yolo,
        layout: ObjectLayout::Letterboxed(32),
        labels: Arc::from([]),
        classes: 0,
        labels_from: "the fake".into(),
        provider: Device::Cuda,
        min_score: 0.5,
        max_objects: 10,
        pets: Vec::new(),
        pet_labels: Vec::new(),
        pet_min_size: 1,
        batch_size: 1,
    };
    let tower = FakeTower { hold, ..FakeTower::new(info, Vec::new) };
    let device = Arc::clone(&tower.device);
    (tower, device)
}
