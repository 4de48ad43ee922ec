//! The settings that take one of a few words: which execution provider, which weights, where
//! normalisation runs, how logs look. Each is read in any case, and a wrong word is an error that
//! names the variable and the choices.

use serde::{Deserialize, Deserializer, de::Error as _};

pub use crate::observe::telemetry::LogFormat;

/// Which ONNX Runtime execution provider runs the model (`CLIPFN_PROVIDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// CUDA when it can be used, else CPU; the log and /readyz say which.
    Auto,
    /// CUDA or a start-up error.
    Cuda,
    Cpu,
}

/// The provider a model runs on once start-up has settled `auto`: never `Auto` by its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Cuda,
    Cpu,
}

impl Device {
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Cuda => "cuda",
            Device::Cpu => "cpu",
        }
    }

    pub fn is_cuda(self) -> bool {
        self == Device::Cuda
    }
}

/// Which weights of a model folder run (`CLIPFN_PRECISION`): a choice of [`Weights`], or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// fp16 on CUDA, int8 on CPU, fp32 where the folder lacks that variant.
    Auto,
    Exactly(Weights),
}

/// The precision of the weights that run. Inputs and outputs are float32 whatever it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Weights {
    Fp32,
    Fp16,
    Int8,
}

impl Weights {
    pub fn as_str(self) -> &'static str {
        match self {
            Weights::Fp32 => "fp32",
            Weights::Fp16 => "fp16",
            Weights::Int8 => "int8",
        }
    }
}

/// Where CLIP's normalisation (scale, mean, std, NCHW) runs (`CLIPFN_NORMALIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalize {
    /// `model` on CUDA, `cpu` on CPU.
    Auto,
    /// On the host, into float32 NCHW: exactly CLIP's input contract.
    Cpu,
    /// As ONNX ops on the execution provider: uint8 NHWC goes in (a quarter of the bytes).
    Model,
}

/// Where a detector's towers run (`CLIPFN_FACE_PROVIDER`, `CLIPFN_OCR_PROVIDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Where the image tower runs.
    Auto,
    /// On the CPU, whatever the image tower runs on.
    Cpu,
}

/// How a run smaller than its batch bucket runs (`CLIPFN_BATCH_PADDING`; model/shapes.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchPadding {
    /// Padded on CUDA, exact on CPU.
    Auto,
    /// Padded up to its bucket, the padding's outputs dropped.
    Pad,
    /// Split into runs of bucket sizes.
    Split,
    /// Run at its own size: every size from 1 to the batch size is declared.
    Exact,
}

/// Which sizes the OCR detector's views and the recognizer's lines run at (`CLIPFN_OCR_SIZES`;
/// docs/ocr.md, "Shapes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OcrSizes {
    /// Declared where the OCR towers run on CUDA, exact on the CPU.
    Auto,
    /// Views padded to the declared sizes, lines to the recognizer's ten widths: a few shapes.
    Declared,
    /// Views as the photo makes them, lines padded to the next 8 px: RapidOCR's reading, any shape.
    Exact,
}

/// How cuDNN picks a convolution's algorithm for a shape it has not seen (`CLIPFN_CUDA_CONV_SEARCH`):
/// ONNX Runtime's `cudnn_conv_algo_search`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvSearch {
    /// Runs every algorithm and keeps the fastest (ONNX Runtime's default): the best kernels, and
    /// the costliest first run of each shape.
    Exhaustive,
    /// cuDNN's own ranking, without running them.
    Heuristic,
    /// Always the implicit-GEMM algorithm: no search at all.
    Default,
}

/// How the CUDA memory arena grows (`CLIPFN_CUDA_ARENA_EXTEND`): ONNX Runtime's `arena_extend_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArenaExtend {
    /// Each extension doubles (ONNX Runtime's default).
    NextPowerOfTwo,
    /// By what the run asks: less memory held, more extensions.
    SameAsRequested,
}

/// One of a fixed set of words, any case; an error names the variable and the choices.
fn one_of<'de, D: Deserializer<'de>, T: Copy>(d: D, variable: &str, choices: &[(&str, T)]) -> Result<T, D::Error> {
    let raw = String::deserialize(d)?;
    choices.iter().find(|(word, _)| word.eq_ignore_ascii_case(&raw)).map(|(_, value)| *value).ok_or_else(|| {
        let words: Vec<&str> = choices.iter().map(|(word, _)| *word).collect();
        D::Error::custom(format!("{variable} must be one of {}, not '{raw}'", words.join(", ")))
    })
}

pub(super) fn provider<'de, D: Deserializer<'de>>(d: D) -> Result<Provider, D::Error> {
    one_of(d, "CLIPFN_PROVIDER", &[("auto", Provider::Auto), ("cuda", Provider::Cuda), ("cpu", Provider::Cpu)])
}

pub(super) fn precision<'de, D: Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
    let choices = [
        ("auto", Precision::Auto),
        ("fp32", Precision::Exactly(Weights::Fp32)),
        ("fp16", Precision::Exactly(Weights::Fp16)),
        ("int8", Precision::Exactly(Weights::Int8)),
    ];
    one_of(d, "CLIPFN_PRECISION", &choices)
}

pub(super) fn normalize<'de, D: Deserializer<'de>>(d: D) -> Result<Normalize, D::Error> {
    one_of(d, "CLIPFN_NORMALIZE", &[("auto", Normalize::Auto), ("cpu", Normalize::Cpu), ("model", Normalize::Model)])
}

pub(super) fn face_provider<'de, D: Deserializer<'de>>(d: D) -> Result<Placement, D::Error> {
    one_of(d, "CLIPFN_FACE_PROVIDER", &[("auto", Placement::Auto), ("cpu", Placement::Cpu)])
}

pub(super) fn ocr_provider<'de, D: Deserializer<'de>>(d: D) -> Result<Placement, D::Error> {
    one_of(d, "CLIPFN_OCR_PROVIDER", &[("auto", Placement::Auto), ("cpu", Placement::Cpu)])
}

pub(super) fn object_provider<'de, D: Deserializer<'de>>(d: D) -> Result<Placement, D::Error> {
    one_of(d, "CLIPFN_OBJECT_PROVIDER", &[("auto", Placement::Auto), ("cpu", Placement::Cpu)])
}

pub(super) fn ocr_sizes<'de, D: Deserializer<'de>>(d: D) -> Result<OcrSizes, D::Error> {
    let choices = [("auto", OcrSizes::Auto), ("declared", OcrSizes::Declared), ("exact", OcrSizes::Exact)];
    one_of(d, "CLIPFN_OCR_SIZES", &choices)
}

pub(super) fn batch_padding<'de, D: Deserializer<'de>>(d: D) -> Result<BatchPadding, D::Error> {
    let choices = [
        ("auto", BatchPadding::Auto),
        ("pad", BatchPadding::Pad),
        ("split", BatchPadding::Split),
        ("exact", BatchPadding::Exact),
    ];
    one_of(d, "CLIPFN_BATCH_PADDING", &choices)
}

pub(super) fn conv_search<'de, D: Deserializer<'de>>(d: D) -> Result<ConvSearch, D::Error> {
    let choices = [
        ("exhaustive", ConvSearch::Exhaustive),
        ("heuristic", ConvSearch::Heuristic),
        ("default", ConvSearch::Default),
    ];
    one_of(d, "CLIPFN_CUDA_CONV_SEARCH", &choices)
}

pub(super) fn arena_extend<'de, D: Deserializer<'de>>(d: D) -> Result<ArenaExtend, D::Error> {
    let choices =
        [("next_power_of_two", ArenaExtend::NextPowerOfTwo), ("same_as_requested", ArenaExtend::SameAsRequested)];
    one_of(d, "CLIPFN_CUDA_ARENA_EXTEND", &choices)
}

pub(super) fn log_format<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LogFormat>, D::Error> {
    one_of(d, "CLIPFN_LOG_FORMAT", &[("json", LogFormat::Json), ("text", LogFormat::Text)]).map(Some)
}

pub(super) fn comma_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let raw = String::deserialize(d)?;
    Ok(raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
}
