//! Embeddings the caller stored earlier, in place of photos: no fetch, no decode, no image tower;
//! the heads' scores where the request wants them.

use std::time::Instant;

use super::{Interval, ItemError, ItemResult, Pipeline, Signals, Timings, Wants};
use crate::embedding::l2_normalized;

impl Pipeline {
    /// Labels and scores for embeddings the caller stored earlier, in place of photos: no fetch,
    /// no decode, no image tower. Each is L2-normalised as the image tower's are; the heads run on
    /// it when `wants.scores`, under `deadline` as photos are.
    pub async fn stored(
        &self,
        embeddings: Vec<Vec<f32>>,
        deadline: tokio::time::Instant,
        wants: Wants,
    ) -> (Vec<ItemResult>, Timings) {
        let started = Instant::now();
        let scored = embeddings.into_iter().map(|embedding| async move {
            let embedding = l2_normalized(embedding);
            let scores = if wants.scores {
                let scored = tokio::time::timeout_at(deadline, self.worker.score(embedding.clone()));
                Some(scored.await.map_err(|_| ItemError::DeadlineExceeded)??.output)
            } else {
                None
            };
            let embedding = Some(embedding);
            let (pixels, faces, ocr, objects, size, metadata) = (None, None, None, None, None, None);
            Ok(Signals { embedding, pixels, scores, faces, ocr, objects, size, metadata })
        });
        let results = futures::future::join_all(scored).await;
        let timings = Timings { inference: Interval::new(started, Instant::now()), ..Timings::default() };
        (results, timings)
    }
}
