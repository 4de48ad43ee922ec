//! The text recognizer tower (PP-OCR's SVTR/CRNN recognizers): lines at height 48, BGR
//! `(p / 255 - 0.5) / 0.5`, each padded to one of the recognizer's widths, or to the next 8 px
//! (`preprocess::recognizer_input`, CLIPFN_OCR_SIZES); a batch runs once per width it holds, so
//! that a line's text and score never depend on its batch-mates, in runs of a few line counts per
//! width (model/shapes.rs). The output, [N, T, classes], is decoded by `ctc`.

use std::collections::BTreeMap;

use super::{Charset, Graph, OcrTower, lay_out_lines, open_graph, refuse, warmed};
use crate::{
    model::{Buckets, ModelData, ModelError, Runtime, Shapes, TextLines, Tower},
    preprocess::{LINE_HEIGHT, LineInput, MIN_RECOGNIZER_WIDTH, RECOGNIZER_WIDTHS},
    settings::{BatchPadding, ModelSettings, OcrSizes},
};

/// The most lines of the narrowest width one run takes; a run of wider lines takes fewer.
const LINES_PER_RUN: u32 = 32;

/// The most `width`-wide lines a run takes: what its output's memory allows (its [lines, width / 8,
/// classes] floats are 34 MB for 32 lines of 320 with PP-OCRv4's 6,625 classes).
fn most_lines(width: u32) -> usize {
    (LINES_PER_RUN * MIN_RECOGNIZER_WIDTH / width).max(1) as usize
}

/// The line counts a run of `width`-wide lines takes: powers of four up to [`most_lines`], so that
/// the ten widths declare 32 shapes.
fn line_counts(width: u32, fill: BatchPadding) -> Buckets {
    Buckets::powers(most_lines(width), 4, fill)
}

/// One line's reading.
#[derive(Debug, Clone, PartialEq)]
pub struct Recognized {
    pub text: String,
    /// The mean probability of the characters kept.
    pub score: f32,
}

pub struct TextRecognizer {
    graph: Graph,
    charset: Charset,
    /// Each declared width's line counts (none with `Exact` sizes).
    counts: BTreeMap<u32, Buckets>,
    pub info: OcrTower,
}

impl TextRecognizer {
    /// The recognizer, its characters from its `character` metadata, else from `characters`
    /// (`recognition/characters.txt`: where it came from and what it holds).
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        characters: Option<(String, String)>,
        (batch_size, sizes): (usize, OcrSizes),
    ) -> Result<Self, ModelError> {
        let fill = settings.fill(runtime.device());
        let widths = RECOGNIZER_WIDTHS.into_iter().filter(|_| sizes == OcrSizes::Declared);
        let counts: BTreeMap<u32, Buckets> = widths.map(|width| (width, line_counts(width, fill))).collect();
        let shapes = if counts.is_empty() {
            Shapes::any()
        } else {
            Shapes::new(counts.iter().flat_map(|(&width, lines)| {
                lines.sizes().iter().map(move |&n| vec![n as i64, 3, i64::from(LINE_HEIGHT), i64::from(width)])
            }))
        };
        let graph = open_graph(runtime, settings, data, ("recognizer", &file), "[N, 3, 48, W] -> [N, T, C]", shapes)?;
        let classes = match graph.outputs[0].1.as_deref() {
            Some([_, _, classes]) if *classes > 0 => *classes as usize,
            shape => return Err(refuse("recognizer", &file, format!("gives {shape:?}, not [N, T, classes]"))),
        };
        let metadata = graph
            .session
            .metadata()
            .ok()
            .and_then(|m| m.custom("character"))
            .map(|list| (format!("{file}'s `character` metadata"), list));
        let Some((source, list)) = metadata.or(characters) else {
            return Err(refuse(
                "recognizer",
                &file,
                "has no `character` metadata and no recognition/characters.txt beside it",
            ));
        };
        let charset =
            Charset::new(&list, classes).map_err(|e| refuse("recognizer", &file, format!("{source}: {e}")))?;
        let every = graph.warms_every_shape;
        let recognizer = TextRecognizer { graph, charset, counts, info: OcrTower { file, batch_size } };
        warmed(recognizer, "recognizer", every)
    }

    /// The characters it reads (the space RapidOCR appends not counted).
    pub fn characters(&self) -> usize {
        self.charset.count()
    }

    /// Reads `lines`, `width` wide, in a run of `rows` (the rows past the lines are padding).
    fn read(&mut self, lines: &[&LineInput], width: u32, rows: usize) -> Result<Vec<Recognized>, ModelError> {
        let mut batch = lay_out_lines(lines.iter().map(|line| &line.image), LINE_HEIGHT, width);
        batch.resize(rows * 3 * (LINE_HEIGHT * width) as usize, 0.0);
        let shape = [rows as i64, 3, i64::from(LINE_HEIGHT), i64::from(width)];
        let (shape, values) = self.graph.run(shape, &batch, 0)?;
        let classes = shape.last().copied().unwrap_or(0) as usize;
        if classes == 0 || values.len() % (classes * rows) != 0 {
            return Err(ModelError::Inference(format!("the recognizer gave {shape:?} for {rows} lines")));
        }
        let per_line = values.len() / rows;
        Ok(values
            .chunks_exact(per_line)
            .take(lines.len())
            .map(|line| {
                let (text, score) = self.charset.decode(line, classes);
                Recognized { text, score }
            })
            .collect())
    }
}

/// Lines in, their text out, each width run on its own.
impl Tower for TextRecognizer {
    type Io = TextLines;

    fn info(&self) -> &OcrTower {
        &self.info
    }

    fn run(&mut self, lines: &[&LineInput]) -> Result<Vec<Recognized>, ModelError> {
        let mut widths: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, line) in lines.iter().enumerate() {
            widths.entry(line.width).or_default().push(i);
        }
        let mut read: Vec<Option<Recognized>> = vec![None; lines.len()];
        for (width, indices) in widths {
            let plan = match self.counts.get(&width) {
                Some(counts) => counts.plan(indices.len()),
                // Exact sizes declare no shapes to keep to: runs as full as the output's memory allows.
                None => {
                    let (n, most) = (indices.len(), most_lines(width));
                    let run = |start: usize| most.min(n - start);
                    (0..n).step_by(most).map(|start| (run(start), run(start))).collect()
                }
            };
            let mut rest = &indices[..];
            for (len, rows) in plan {
                let (run, after) = rest.split_at(len);
                rest = after;
                let group: Vec<&LineInput> = run.iter().map(|&i| lines[i]).collect();
                for (&i, recognized) in run.iter().zip(self.read(&group, width, rows)?) {
                    read[i] = Some(recognized);
                }
            }
        }
        Ok(read.into_iter().map(|r| r.expect("every line is in one width's runs")).collect())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        let line = LineInput { image: image::RgbImage::new(8, LINE_HEIGHT), width: MIN_RECOGNIZER_WIDTH };
        self.run(&[&line]).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }

    fn warm_up(&mut self, every: bool) -> Result<(), ModelError> {
        if !every || self.counts.is_empty() {
            return self.check();
        }
        let runs: Vec<(u32, usize)> =
            self.counts.iter().flat_map(|(&width, counts)| counts.sizes().iter().map(move |&n| (width, n))).collect();
        for (width, rows) in runs {
            self.read(&[], width, rows)?;
        }
        Ok(())
    }
}
