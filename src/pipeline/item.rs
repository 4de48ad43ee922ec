//! Why one photo has no embedding, and the stable code clients and backfill rows name it by.
//!
//! A code's message is fixed and names only the reference the client sent: the underlying error
//! can carry store URLs, endpoints, bucket prefixes or ONNX Runtime's source paths, so it goes to
//! the log (with the request's trace id) and never to the client.

use super::{Faces, Objects, Ocr};
use crate::{
    decode::{DecodeError, Metadata},
    preprocess::PreprocessError,
    signals::PixelSignals,
    source::SourceError,
    storage::StorageError,
    worker::BatchError,
};

/// Why one photo has no embedding.
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Preprocess(PreprocessError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("not finished within the request deadline")]
    DeadlineExceeded,
}

/// A decode that failed inside preprocessing is a decode error, coded as one.
impl From<PreprocessError> for ItemError {
    fn from(e: PreprocessError) -> Self {
        match e {
            PreprocessError::Decode(e) => ItemError::Decode(e),
            resize => ItemError::Preprocess(resize),
        }
    }
}

/// What the stages give for one photo.
#[derive(Debug)]
pub struct Signals {
    /// Of unit length, as the image tower gives it; none for a photo the request wanted none of
    /// (`Wants::embedding`).
    pub embedding: Option<Vec<f32>>,
    /// What its pixels say, when the request asked.
    pub pixels: Option<PixelSignals>,
    /// One score per head (the worker's `HeadsInfo::names`' order), when the request asked.
    pub scores: Option<Vec<f32>>,
    /// The photo's faces, best first, when the request asked; their own error when a face model
    /// tripped on the photo.
    pub faces: Option<Result<Faces, ItemError>>,
    /// The photo's text lines in reading order, when the request asked; their own error when an
    /// OCR model tripped on the photo. Personal, as the metadata is.
    pub ocr: Option<Result<Ocr, ItemError>>,
    /// The photo's objects, best first, when the request asked; their own error when the object
    /// detector tripped on the photo.
    pub objects: Option<Result<Objects, ItemError>>,
    /// The upright photo's width and height at its full size; none for a stored embedding.
    pub size: Option<(u32, u32)>,
    /// When and where the photo was taken, from its EXIF; none for a stored embedding. Personal:
    /// it goes to answers only, never to a log line or a span.
    pub metadata: Option<Metadata>,
}

impl Signals {
    /// The embedding, where the request wanted every photo's (`Wants::embedding`'s default).
    pub fn embedded(&self) -> &[f32] {
        self.embedding.as_deref().expect("every photo's embedding was wanted")
    }
}

pub type ItemResult = Result<Signals, ItemError>;

/// The per-photo error codes clients switch on (README, "Errors").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ItemCode {
    NotFound,
    Forbidden,
    TooLarge,
    FetchFailed,
    UnsupportedFormat,
    DecodeFailed,
    InferenceFailed,
    DeadlineExceeded,
}

impl ItemCode {
    /// Every code, in declaration order: the API documents them from this list.
    pub const ALL: [ItemCode; 8] = [
        ItemCode::NotFound,
        ItemCode::Forbidden,
        ItemCode::TooLarge,
        ItemCode::FetchFailed,
        ItemCode::UnsupportedFormat,
        ItemCode::DecodeFailed,
        ItemCode::InferenceFailed,
        ItemCode::DeadlineExceeded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ItemCode::NotFound => "not_found",
            ItemCode::Forbidden => "forbidden",
            ItemCode::TooLarge => "too_large",
            ItemCode::FetchFailed => "fetch_failed",
            ItemCode::UnsupportedFormat => "unsupported_format",
            ItemCode::DecodeFailed => "decode_failed",
            ItemCode::InferenceFailed => "inference_failed",
            ItemCode::DeadlineExceeded => "deadline_exceeded",
        }
    }

    /// The code whose [`as_str`](Self::as_str) is `code`.
    pub fn named(code: &str) -> Option<ItemCode> {
        ItemCode::ALL.into_iter().find(|item| item.as_str() == code)
    }

    /// Whether the code says all there is: no detail worth a log line.
    pub fn is_self_explanatory(self) -> bool {
        matches!(self, ItemCode::NotFound | ItemCode::DeadlineExceeded)
    }
}

impl ItemError {
    /// The stable code, with its fixed message naming the photo's reference as shown (`image`).
    pub fn code_and_message(&self, image: &str) -> (ItemCode, String) {
        match self {
            ItemError::Source(SourceError::Read(StorageError::NotFound(_))) => {
                (ItemCode::NotFound, format!("no object at '{image}'"))
            }
            ItemError::Source(SourceError::Read(StorageError::Forbidden(_))) => {
                (ItemCode::Forbidden, format!("'{image}' is outside the allowed sources, or the store refused access"))
            }
            // The one refusal a client can fix by itself: sign the URL again.
            ItemError::Source(SourceError::Expired(_)) => {
                (ItemCode::Forbidden, format!("the signature of '{image}' has expired"))
            }
            ItemError::Source(SourceError::Read(StorageError::TooLarge { .. }))
            | ItemError::Decode(DecodeError::TooManyPixels { .. }) => {
                (ItemCode::TooLarge, format!("'{image}' is over the byte or pixel limit"))
            }
            ItemError::Source(SourceError::Read(StorageError::Fetch(_) | StorageError::Config(_))) => {
                (ItemCode::FetchFailed, format!("'{image}' could not be read from its source"))
            }
            ItemError::Decode(DecodeError::Unsupported(_)) | ItemError::Source(SourceError::NotAnImage(_)) => {
                (ItemCode::UnsupportedFormat, format!("'{image}' is not a supported image format"))
            }
            ItemError::Decode(DecodeError::Failed(_) | DecodeError::Timeout(_) | DecodeError::Crashed(_))
            | ItemError::Source(SourceError::BadInline(_))
            | ItemError::Preprocess(_) => (
                ItemCode::DecodeFailed,
                format!("'{image}' could not be decoded: corrupt, truncated or too slow to decode"),
            ),
            ItemError::Batch(BatchError::Model(_) | BatchError::Stopped) => {
                (ItemCode::InferenceFailed, format!("the model failed on '{image}'"))
            }
            ItemError::DeadlineExceeded => {
                (ItemCode::DeadlineExceeded, format!("'{image}' was not finished within the request deadline"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ItemCode;

    #[test]
    fn all_lists_every_code_once() {
        for (i, code) in ItemCode::ALL.into_iter().enumerate() {
            // Exhaustive: a new code does not compile here until it has its place in ALL.
            let place = match code {
                ItemCode::NotFound => 0,
                ItemCode::Forbidden => 1,
                ItemCode::TooLarge => 2,
                ItemCode::FetchFailed => 3,
                ItemCode::UnsupportedFormat => 4,
                ItemCode::DecodeFailed => 5,
                ItemCode::InferenceFailed => 6,
                ItemCode::DeadlineExceeded => 7,
            };
            assert_eq!(place, i, "{code:?} is out of place in ItemCode::ALL");
        }
    }
}
