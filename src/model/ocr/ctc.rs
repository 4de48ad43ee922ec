//! The recognizer's characters and its CTC greedy decoding, as PaddleOCR's `CTCLabelDecode`.
//!
//! The model's classes are the blank (0), then its characters in order, then (in RapidOCR's and
//! PaddleOCR's `use_space_char`) a space. The characters come from the model's `character`
//! metadata (one a line, as PaddleOCR's exports carry them), else from `recognition/characters.txt`
//! beside it, for models that carry none (PP-OCRv5's Korean recognizer and its dictionary).

/// The classes the recognizer's output columns stand for.
#[derive(Debug, Clone)]
pub struct Charset {
    /// Column `i + 1`'s character; the space last when the model has a column for it.
    characters: Vec<String>,
    /// The characters the list held.
    listed: usize,
}

/// Why a character list does not fit the recognizer.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error(
    "the recognizer gives {classes} classes, but its {characters} characters need {} (the blank) or {} (the blank and a space)",
    characters + 1,
    characters + 2
)]
pub struct CharsetMismatch {
    pub classes: usize,
    pub characters: usize,
}

impl Charset {
    /// The characters of `list` (one a line; a trailing newline adds none) for a recognizer whose
    /// output has `classes` columns: the characters plus the blank, or plus the blank and a space.
    pub fn new(list: &str, classes: usize) -> Result<Self, CharsetMismatch> {
        let mut characters: Vec<String> =
            list.strip_suffix('\n').unwrap_or(list).split('\n').map(|c| c.trim_end_matches('\r').to_string()).collect();
        let count = characters.len();
        if classes == count + 2 {
            characters.push(" ".into());
        } else if classes != count + 1 {
            return Err(CharsetMismatch { classes, characters: count });
        }
        Ok(Charset { characters, listed: count })
    }

    /// The characters the list holds (the space RapidOCR appends not counted).
    pub fn count(&self) -> usize {
        self.listed
    }

    /// Greedy CTC decoding of one line's `steps` x `classes` probabilities: each step's best
    /// class, repeats collapsed, blanks dropped. The score is the mean probability of the kept
    /// characters, 0 when none is kept.
    pub fn decode(&self, probabilities: &[f32], classes: usize) -> (String, f32) {
        let (mut text, mut sum, mut kept, mut previous) = (String::new(), 0.0f64, 0u32, usize::MAX);
        for step in probabilities.chunks_exact(classes) {
            let (best, probability) =
                step.iter().enumerate().fold((0, f32::MIN), |(bi, bp), (i, &p)| if p > bp { (i, p) } else { (bi, bp) });
            if best != 0 && best != previous {
                text.push_str(&self.characters[best - 1]);
                sum += f64::from(probability);
                kept += 1;
            }
            previous = best;
        }
        (text, if kept == 0 { 0.0 } else { (sum / f64::from(kept)) as f32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step a row: `class` at `p`, the rest sharing what is left.
    fn steps(rows: &[(usize, f32)], classes: usize) -> Vec<f32> {
        rows.iter()
            .flat_map(|&(class, p)| {
                (0..classes).map(move |i| if i == class { p } else { (1.0 - p) / (classes - 1) as f32 })
            })
            .collect()
    }

    #[test]
    fn repeats_collapse_blanks_split_and_drop() {
        // Classes: blank, a, b, space.
        let charset = Charset::new("a\nb\n", 4).unwrap();
        let rows = [(1, 0.9), (1, 0.7), (0, 0.99), (1, 0.8), (3, 0.6), (2, 0.5), (2, 0.9)];
        let (text, score) = charset.decode(&steps(&rows, 4), 4);
        assert_eq!(text, "aa b");
        // The first of each run counts: 0.9, 0.8, 0.6, 0.5.
        assert!((score - 0.7).abs() < 1e-6, "{score}");
    }

    #[test]
    fn nothing_kept_scores_zero() {
        let charset = Charset::new("a\nb", 3).unwrap();
        assert_eq!(charset.decode(&steps(&[(0, 0.9), (0, 0.8)], 3), 3), (String::new(), 0.0));
        assert_eq!(charset.count(), 2, "no column for a space: none appended");
    }

    #[test]
    fn a_list_of_the_wrong_length_is_refused_naming_both_numbers() {
        let error = Charset::new("a\nb\nc", 7).unwrap_err();
        assert_eq!(error, CharsetMismatch { classes: 7, characters: 3 });
        assert_eq!(
            error.to_string(),
            "the recognizer gives 7 classes, but its 3 characters need 4 (the blank) or 5 (the blank and a space)"
        );
    }
}
