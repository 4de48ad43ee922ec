//! What a photo endpoint answers about: photo references to fetch, or, for `/v1/classify` and
//! `/v1/analyze`, embeddings the caller stored earlier (`"embeddings"`), so that re-labelling an
//! album costs no fetch and no image inference. Checked before any work; answered one item per
//! subject, in order.

use std::borrow::Cow;

use super::{
    AppState,
    error::ApiError,
    photos::{PhotoResult, photo_error, photo_results},
    request::{check_body_size, check_images},
    respond::Counts,
    types::SubjectsRequest,
};
use crate::{
    pipeline::{Timings, Wants},
    service::Service,
    settings::Settings,
    source,
};

pub(super) enum Subjects {
    Photos(Vec<String>),
    /// Of the image tower's dim, finite and not zero (`Subjects::check_dim`).
    Stored(Vec<Vec<f32>>),
}

impl Subjects {
    /// The request's `images` or `embeddings` (one of them), within CLIPFN_MAX_IMAGES; `size` is
    /// the body's, held to CLIPFN_MAX_BODY_BYTES unless photos are inline or the body `carries`
    /// vectors beside them (known people's exemplars). Stored embeddings take the larger limit
    /// too: their count and length bound them, as the settings' caps bound exemplars.
    pub(super) fn new(
        request: SubjectsRequest,
        size: usize,
        carries: bool,
        settings: &Settings,
    ) -> Result<Self, ApiError> {
        match (request.images, request.embeddings) {
            (Some(images), None) => {
                if !carries {
                    check_body_size(size, &images, settings)?;
                }
                Ok(Subjects::Photos(check_images(images, settings)?))
            }
            (None, Some(embeddings)) => {
                let count = embeddings.len();
                if count == 0 || count > settings.limits.max_images {
                    return Err(ApiError::BadRequest(format!(
                        "embeddings must hold 1 to {} vectors (CLIPFN_MAX_IMAGES), got {count}",
                        settings.limits.max_images
                    )));
                }
                Ok(Subjects::Stored(embeddings))
            }
            (Some(_), Some(_)) => Err(ApiError::BadRequest("give either images or embeddings, not both".into())),
            (None, None) => Err(ApiError::BadRequest(r#"body must hold "images" or "embeddings""#.into())),
        }
    }

    /// Stored embeddings must be the model's: `dim` long, finite and not all zero.
    pub(super) fn check_dim(&self, dim: usize) -> Result<(), ApiError> {
        let Subjects::Stored(embeddings) = self else { return Ok(()) };
        for (i, embedding) in embeddings.iter().enumerate() {
            let problem = if embedding.len() != dim {
                format!("has {} values, and this model's embeddings have {dim}", embedding.len())
            } else if !embedding.iter().all(|x| x.is_finite()) {
                "holds a value that is not a finite float32".to_string()
            } else if embedding.iter().all(|&x| x == 0.0) {
                "is all zeros, which has no direction".to_string()
            } else {
                continue;
            };
            return Err(ApiError::BadRequest(format!("embeddings[{i}] {problem}")));
        }
        Ok(())
    }

    /// Whether these are stored embeddings: their answers carry nothing measured on pixels.
    pub(super) fn are_stored(&self) -> bool {
        matches!(self, Subjects::Stored(_))
    }

    /// Every subject's signals (what `wants` asks for) or its error, and the stage timings.
    pub(super) async fn results(
        &self,
        state: &AppState,
        service: &Service,
        deadline: tokio::time::Instant,
        wants: Wants,
    ) -> Result<(Vec<PhotoResult>, Timings), ApiError> {
        match self {
            Subjects::Photos(images) => photo_results(state, service, images, deadline, wants).await,
            Subjects::Stored(embeddings) => {
                let (results, timings) = service.pipeline.stored(embeddings.clone(), deadline, wants).await;
                // No reference to name or hide: the message is the code's.
                let results = results.into_iter().enumerate().map(|(i, r)| r.map_err(|e| photo_error(i, "", &e)));
                Ok((results.collect(), timings))
            }
        }
    }

    /// One answer per subject, in order, from its index, its photo's reference as shown (none for
    /// a stored embedding) and its result.
    pub(super) fn answers<'a, T>(
        &'a self,
        results: Vec<PhotoResult>,
        answer: impl Fn(usize, Option<Cow<'a, str>>, PhotoResult) -> T,
    ) -> Vec<T> {
        results
            .into_iter()
            .enumerate()
            .map(|(index, result)| {
                let shown = match self {
                    Subjects::Photos(images) => Some(source::shown(&images[index])),
                    Subjects::Stored(_) => None,
                };
                answer(index, shown, result)
            })
            .collect()
    }

    /// What the request carried, for its log line.
    pub(super) fn counts(&self, results: &[PhotoResult]) -> Counts {
        let errors = results.iter().filter(|r| r.is_err()).count();
        match self {
            Subjects::Photos(images) => Counts { images: images.len(), errors, ..Counts::default() },
            Subjects::Stored(embeddings) => Counts { embeddings: embeddings.len(), errors, ..Counts::default() },
        }
    }
}
