//! A photo's stages, in the order it meets them: a detector's place, the fetch, the decode and its
//! views on a decode thread, then the worker (the embedding and the detectors).

use std::time::Instant;

use image::RgbImage;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{Instrument, field::Empty, info_span};

use super::{
    Input, ItemError, ItemResult, Pipeline, Signals, SquareFor, Wants,
    detectors::Detectors,
    timings::{Interval, Timings},
};
use crate::{
    decode::{self, Metadata},
    observe::metrics::Stage,
    preprocess::{KeptBytes, Views, decode_options, decode_views},
    signals::PixelSignals,
    source::Fetched,
    sys::budget::Budget,
};

impl Pipeline {
    /// [`Pipeline::embed_one`]'s stages, recording into `timings` and `size` as they go.
    pub(super) async fn stages(
        &self,
        index: usize,
        image: Input<'_>,
        wants: Wants,
        timings: &mut Timings,
        size: &mut Option<u64>,
    ) -> ItemResult {
        // A detector's place first (when a detector is asked for), then the fetched bytes'
        // budget, then memory, then a decode thread (in that order always, so that none waits on
        // another). The place comes before the fetch, so that a photo waiting for one holds no
        // bytes: a request of 100 photos with faces would otherwise fill CLIPFN_MAX_FETCHED_BYTES
        // with photos waiting for places, and every other request's fetches would queue behind
        // them. The memory reservation moves into the job with the bytes, and both are let go as
        // the job goes on (the bytes once decoded, or with faces once the detector has answered),
        // even if the photo stopped waiting for it; the place once the detectors have answered.
        let views = self.views(wants);
        let place = if views.for_a_detector() {
            Some(std::sync::Arc::clone(&self.detector_places).acquire_owned().await.expect("never closed"))
        } else {
            None
        };
        let fetched = self.fetch(index, image, timings).await?;
        *size = Some(fetched.bytes.len() as u64);
        let (decoded, queued) = self.decode(index, fetched, views, timings).await?;
        self.infer(index, decoded, queued, place, wants, timings).await
    }

    /// The views of its decode that a photo needs for what `wants` asks of it.
    fn views(&self, wants: Wants) -> Views {
        let objects = self.worker.objects_info();
        Views {
            square: self.square.clone(),
            square_for: if wants.scores { SquareFor::Every } else { wants.embedding },
            luma: wants.pixels,
            canvas: self.worker.faces_info().filter(|_| wants.faces).map(|(detector, _)| detector.canvas()),
            ocr: self.worker.ocr_info().filter(|_| wants.ocr).map(|reader| reader.resolution),
            objects: objects.filter(|_| wants.objects).map(|detector| detector.layout),
            pet_crops: wants.pets && objects.is_some_and(|detector| !detector.pets.is_empty()),
        }
    }

    /// The photo's bytes, from its store or from the request.
    async fn fetch(&self, index: usize, image: Input<'_>, timings: &mut Timings) -> Result<Fetched, ItemError> {
        // Spans name the photo by its index in the request, never by its key. Numbers go in as
        // i64: tracing-opentelemetry turns u64 fields into strings.
        let span = info_span!(
            "fetch",
            clipfn.photo.index = index as i64,
            clipfn.photo.bytes = Empty,
            otel.status_code = Empty
        );
        let start = Instant::now();
        let fetched = match image {
            Input::Reference(reference) => self.source.fetch(reference).instrument(span.clone()).await,
            Input::Carried(bytes) => self.source.carried(bytes.clone()),
        };
        timings.fetch = Interval::new(start, Instant::now());
        self.metrics.stage(Stage::Fetch, start.elapsed());
        let fetched = fetched.inspect_err(|_| failed(&span))?;
        span.record("clipfn.photo.bytes", fetched.bytes.len() as i64);
        Ok(fetched)
    }

    /// The views, and the signals measured on them, on a decode thread under the decode budget:
    /// what the pipeline keeps of a photo until its embedding comes is its square (if it gets
    /// one), a few numbers and, for faces, the detector's canvas and the photo's bytes, for OCR the
    /// text detector's view and the decoded pixels, for objects their view; and when it was
    /// handed on, where its decode ends and its queue begins.
    async fn decode(
        &self,
        index: usize,
        fetched: Fetched,
        views: Views,
        timings: &mut Timings,
    ) -> Result<(Decoded, Instant), ItemError> {
        let working_memory = || decode::working_memory(&fetched.bytes, &decode_options(&views, self.max_pixels));
        let memory = Budget::hold(self.decode_memory.as_ref(), working_memory).await;
        let span = info_span!("decode", clipfn.photo.index = index as i64, otel.status_code = Empty);
        let (in_job, max_pixels) = (span.clone(), self.max_pixels);
        let (decode_start, decoded) = self
            .decoders
            .run(move || {
                let (mut memory, _entered) = (memory, in_job.enter());
                // The bytes stay with the face canvas until the detector has answered (faces
                // smaller on it than their chip are cut from a finer decode of them); otherwise
                // they go once decoded.
                let fetched = KeptBytes::new(fetched);
                let kept = views.canvas.is_some().then(|| fetched.clone());
                let mut viewed = decode_views(fetched, &views, max_pixels).map_err(ItemError::from)?;
                if let Some(canvas) = viewed.canvas.as_mut() {
                    canvas.photo = kept;
                }
                let pixels = viewed.luma.as_ref().map(PixelSignals::of);
                // What waits for the detectors keeps its share of the decode's hold; the rest
                // goes back now (docs/design.md, "One budget for what a photo keeps").
                let detectors = Detectors::hold(&mut memory, viewed.canvas, viewed.ocr, viewed.objects);
                let (square, size, metadata) = (viewed.square, viewed.full_size, viewed.metadata);
                Ok::<_, ItemError>(Decoded { square, pixels, detectors, size, metadata })
            })
            .await;
        let queued = Instant::now();
        timings.decode = Interval::new(decode_start, queued);
        self.metrics.stage(Stage::Decode, queued - decode_start);
        decoded.map(|decoded| (decoded, queued)).inspect_err(|_| failed(&span))
    }

    /// The worker's part: the embedding (then the heads' scores on it) beside the detectors,
    /// whose place goes back once they have answered.
    async fn infer(
        &self,
        index: usize,
        decoded: Decoded,
        queued: Instant,
        place: Option<OwnedSemaphorePermit>,
        wants: Wants,
        timings: &mut Timings,
    ) -> ItemResult {
        let Decoded { square, pixels, detectors, size, metadata } = decoded;
        let span = info_span!("queue", clipfn.photo.index = index as i64, clipfn.batch.id = Empty);
        let detected = async {
            let detected = self.detect(detectors, wants).await;
            drop(place);
            detected
        };
        // A photo without a square needs no embedding: the image tower never sees it.
        let embedded = async {
            match square {
                Some(square) => Some(self.worker.embed(square, span).await),
                None => None,
            }
        };
        let (embedded, (faces, ocr, objects)) = futures::join!(embedded, detected);
        let (mut embedding, mut scores) = (None, None);
        if let Some(embedded) = embedded {
            let embedded = embedded?;
            timings.queue = Interval::new(queued, embedded.started);
            self.metrics.stage(Stage::Queue, embedded.started.saturating_duration_since(queued));
            // The heads run on the embedding once the image tower has given it.
            let finished = if wants.scores {
                let scored = self.worker.score(embedded.output.clone()).await?;
                scores = Some(scored.output);
                scored.finished
            } else {
                embedded.finished
            };
            timings.inference = Interval::new(embedded.started, finished);
            embedding = Some(embedded.output);
        }
        let (size, metadata) = (Some(size), Some(metadata));
        Ok(Signals { embedding, pixels, scores, faces, ocr, objects, size, metadata })
    }
}

/// What a photo's decode leaves for the worker.
struct Decoded {
    square: Option<RgbImage>,
    pixels: Option<PixelSignals>,
    detectors: Detectors,
    /// The upright photo's width and height at its full size.
    size: (u32, u32),
    metadata: Metadata,
}

/// Marks a stage span as the one where its photo failed.
fn failed(span: &tracing::Span) {
    span.record("otel.status_code", "ERROR");
}
