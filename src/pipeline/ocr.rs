//! A photo's text, after its decode: its view on the text detector; the boxes, their reading order
//! and each line cut from the decoded pixels on a decode thread; every line on the classifier
//! (when there is one) and the recognizer, lines of many photos batching together. OCR text is
//! personal (receipts, IDs): it goes to answers and Parquet only, never to a log line or a span.

use std::sync::Arc;

use super::{ItemError, Pipeline};
use crate::{
    model::{TextBox, UPSIDE_DOWN, reading_order, text_boxes},
    preprocess::{LineInput, OcrView, classifier_input, line_crop, recognizer_input},
    sys::budget::Held,
};

/// A photo's text lines in reading order, and how many more `CLIPFN_OCR_MAX_LINES` left out.
#[derive(Debug, Clone, Default)]
pub struct Ocr {
    pub lines: Vec<OcrLine>,
    pub left_out: usize,
}

/// One line of text, its box in pixels of the upright photo at its full size.
#[derive(Debug, Clone)]
pub struct OcrLine {
    pub text: String,
    /// The recognizer's: the mean probability of its characters.
    pub score: f32,
    /// The detector's: the mean text probability inside the box.
    pub box_score: f32,
    /// Top-left, top-right, bottom-right, bottom-left, as `[x, y]`.
    pub corners: [[f32; 2]; 4],
}

/// A line cut on a decode thread: its box, its recognizer input and, with a classifier, its
/// classifier input.
type Cut = (TextBox, LineInput, Option<image::RgbImage>);

impl Pipeline {
    /// The lines on `view` whose box scores at least `min_scores.0` and whose text at least
    /// `min_scores.1`, in reading order; of the boxes found, the `max_lines` best (by the box's
    /// score) are read.
    pub(super) async fn read_text(
        &self,
        view: OcrView,
        mut memory: Held,
        (box_min_score, min_score): (f32, f32),
        max_lines: usize,
    ) -> Result<Ocr, ItemError> {
        // The decoded pixels stay until the detector has answered: the lines are cut from them,
        // finer than the detector's view wherever the photo is larger.
        let (pixels, scale, full_size) = (Arc::clone(&view.pixels), view.scale, view.full_size);
        let map = self.worker.find_text(view).await?.output;
        let reader = self.ocr().expect("a view only for OCR models");
        let (classify, sizes) = (reader.classifier.is_some(), reader.sizes);
        let (_, cut) = self
            .decoders
            .run(move || {
                let mut boxes = text_boxes(&map, full_size, box_min_score);
                let left_out = boxes.len().saturating_sub(max_lines);
                if left_out > 0 {
                    boxes.sort_by(|a, b| b.score.total_cmp(&a.score));
                    boxes.truncate(max_lines);
                }
                reading_order(&mut boxes);
                let lines: Vec<Cut> = boxes
                    .into_iter()
                    .map(|text_box| {
                        let line = line_crop(&pixels, scale, &text_box.corners);
                        (text_box, recognizer_input(&line, sizes), classify.then(|| classifier_input(&line)))
                    })
                    .collect();
                // The lines wait for the recognizer holding their own pixels; the decode goes.
                let line_bytes = lines.iter().map(|(_, input, _): &Cut| input.image.as_raw().len() as u64).sum();
                memory.keep(line_bytes);
                Ok::<_, ItemError>((lines, left_out, memory))
            })
            .await;
        let (lines, left_out, _memory) = cut?;
        let (mut boxes, mut inputs, mut orientations) = (Vec::new(), Vec::new(), Vec::new());
        for (text_box, input, orientation) in lines {
            boxes.push(text_box);
            inputs.push(input);
            orientations.extend(orientation);
        }
        let upside_down =
            futures::future::join_all(orientations.into_iter().map(|line| self.worker.orient(line))).await;
        for (input, orientation) in inputs.iter_mut().zip(upside_down) {
            // The linear resize maps a turned line onto the turned resize, so the line is turned
            // at the recognizer's size.
            if orientation.transpose()?.is_some_and(|served| served.output >= UPSIDE_DOWN) {
                image::imageops::rotate180_in_place(&mut input.image);
            }
        }
        let read = futures::future::join_all(inputs.into_iter().map(|line| self.worker.read(line))).await;
        let mut found = Vec::with_capacity(boxes.len());
        for (text_box, read) in boxes.into_iter().zip(read) {
            let recognized = read?.output;
            if recognized.score >= min_score {
                found.push(OcrLine {
                    text: recognized.text,
                    score: recognized.score,
                    box_score: text_box.score,
                    corners: text_box.corners,
                });
            }
        }
        Ok(Ocr { lines: found, left_out })
    }
}
