//! The text recognizer tower (PP-OCR's SVTR/CRNN recognizers): lines at height 48, BGR
//! `(p / 255 - 0.5) / 0.5`, each padded to its fixed width (`preprocess::recognizer_input`); a
//! batch runs once per width it holds, so that a line's text and score never depend on its
//! batch-mates. The output, [N, T, classes], is decoded by `ctc`.

use std::collections::BTreeMap;

use super::{Charset, Graph, OcrTower, lay_out_lines, refuse, warmed};
use crate::{
    model::{ModelData, ModelError, Runtime, TextLines, Tower},
    preprocess::{LINE_HEIGHT, LineInput, MIN_RECOGNIZER_WIDTH},
    settings::ModelSettings,
};

/// The most lines of the narrowest width one run takes; a run of wider lines takes fewer.
const LINES_PER_RUN: u32 = 32;

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
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let graph = Graph::open(runtime, settings, data, ("recognizer", &file), "[N, 3, 48, W] -> [N, T, C]")?;
        let classes = match graph.output_shape.as_deref() {
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
        warmed(TextRecognizer { graph, charset, info: OcrTower { file, batch_size } }, "recognizer")
    }

    /// The characters it reads (the space RapidOCR appends not counted).
    pub fn characters(&self) -> usize {
        self.charset.count()
    }

    fn read(&mut self, lines: &[&LineInput], width: u32) -> Result<Vec<Recognized>, ModelError> {
        let batch = lay_out_lines(lines.iter().map(|line| &line.image), LINE_HEIGHT, width);
        let shape = [lines.len() as i64, 3, i64::from(LINE_HEIGHT), i64::from(width)];
        let (shape, values) = self.graph.run(shape, &batch)?;
        let classes = shape.last().copied().unwrap_or(0) as usize;
        if classes == 0 || values.len() % (classes * lines.len()) != 0 {
            return Err(ModelError::Inference(format!("the recognizer gave {shape:?} for {} lines", lines.len())));
        }
        let per_line = values.len() / lines.len();
        Ok(values
            .chunks_exact(per_line)
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
            // The output is [lines, width / 8, classes] floats (34 MB for 32 lines of 320 with
            // PP-OCRv4's 6,625 classes): a run takes fewer lines the wider they are.
            let per_run = (LINES_PER_RUN * MIN_RECOGNIZER_WIDTH / width).max(1) as usize;
            for indices in indices.chunks(per_run) {
                let group: Vec<&LineInput> = indices.iter().map(|&i| lines[i]).collect();
                for (&i, recognized) in indices.iter().zip(self.read(&group, width)?) {
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
}
