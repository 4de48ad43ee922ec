//! The clean-up CLIP's reference tokenizer applies before BPE (`simple_tokenizer.py`):
//! `ftfy.fix_text`, `html.unescape` twice, strip, runs of whitespace to one space, lower case.
//!
//! Of ftfy we do what applies to well-formed Unicode, in ftfy's order and repeated until nothing
//! changes, as ftfy does: entity decoding (its strict kind, per line, off once a line holds `<`),
//! C1 controls as Windows-1252, Latin ligatures, half/full-width forms, curly quotes, terminal
//! escapes, control characters, NFC. Its mojibake repair (text that went through the wrong
//! encoding, e.g. `Ã©` for `é`) and its upper-case entity guesses (`&EACUTE;`) are left out.

use std::{borrow::Cow, sync::LazyLock};

use icu_normalizer::ComposingNormalizerBorrowed;
use regex::{Captures, Regex};

use super::html;

static WHITESPACE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+").expect("valid regex"));
/// ftfy's `HTML_ENTITY_RE`: only references that end in `;`.
static STRICT_ENTITY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"&#?[0-9A-Za-z]{1,24};").expect("valid regex"));
/// ftfy's `ANSI_RE`.
static TERMINAL_ESCAPE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\x1b\[[0-9;]*[a-zA-Z]").expect("valid regex"));

/// `whitespace_clean(basic_clean(text)).lower()`.
pub fn clean(text: &str) -> String {
    let fixed = fix_text(text);
    let unescaped = html::unescape(&html::unescape(&fixed)).into_owned();
    WHITESPACE.replace_all(unescaped.trim(), " ").trim().to_lowercase()
}

/// ftfy.fix_text: line by line; once a line holds `<` (the text looks like HTML), entities are
/// left alone in it and in every later line.
fn fix_text(text: &str) -> String {
    let mut unescape = true;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        unescape &= !line.contains('<');
        let mut line = Cow::Borrowed(line);
        loop {
            let fixed = fix_once(&line, unescape);
            if fixed == line {
                break;
            }
            line = Cow::Owned(fixed);
        }
        out.push_str(&line);
    }
    out
}

fn fix_once(text: &str, unescape: bool) -> String {
    let text = if unescape { STRICT_ENTITY.replace_all(text, strict_entity) } else { Cow::Borrowed(text) };
    let mut mapped = String::with_capacity(text.len());
    text.chars().for_each(|c| push_fixed(c, &mut mapped));
    let mapped = TERMINAL_ESCAPE.replace_all(&mapped, "");
    let kept: String = mapped.chars().filter(|c| !is_unwanted_control(*c)).collect();
    ComposingNormalizerBorrowed::new_nfc().normalize(&kept).into_owned()
}

/// A reference ftfy decodes: a known name, or a number whose decoding swallows the `;`.
fn strict_entity(caps: &Captures) -> String {
    let reference = &caps[0];
    let decoded = html::unescape(reference);
    let whole = if reference.starts_with("&#") {
        !decoded.contains(';')
    } else {
        // A known name decodes whole; a name only known by a prefix leaves the rest and its `;`.
        !decoded.ends_with(';') || decoded == ";"
    };
    if whole { decoded.into_owned() } else { reference.to_string() }
}

/// One character through ftfy's per-character fixers: C1 controls, ligatures, width, quotes.
fn push_fixed(c: char, out: &mut String) {
    let fixed = match c {
        '\u{80}'..='\u{9F}' => return out.push_str(&html::unescape(&format!("&#{};", u32::from(c)))),
        '\u{FF01}'..='\u{FFEF}' => {
            let mut buffer = [0u8; 4];
            return out.push_str(&ComposingNormalizerBorrowed::new_nfkc().normalize(c.encode_utf8(&mut buffer)));
        }
        'Ĳ' => "IJ",
        'ĳ' => "ij",
        'ŉ' => "ʼn",
        'Ǳ' => "DZ",
        'ǲ' => "Dz",
        'ǳ' => "dz",
        'Ǆ' => "DŽ",
        'ǅ' => "Dž",
        'ǆ' => "dž",
        'Ǉ' => "LJ",
        'ǈ' => "Lj",
        'ǉ' => "lj",
        'Ǌ' => "NJ",
        'ǋ' => "Nj",
        'ǌ' => "nj",
        'ﬀ' => "ff",
        'ﬁ' => "fi",
        'ﬂ' => "fl",
        'ﬃ' => "ffi",
        'ﬄ' => "ffl",
        'ﬅ' => "ſt",
        'ﬆ' => "st",
        '\u{3000}' => " ",
        '\u{02BC}' | '\u{2018}'..='\u{201B}' => "'",
        '\u{201C}'..='\u{201F}' => "\"",
        c => return out.push(c),
    };
    out.push_str(fixed);
}

/// ftfy's `remove_control_chars` set.
fn is_unwanted_control(c: char) -> bool {
    matches!(c, '\u{00}'..='\u{08}' | '\u{0B}' | '\u{0E}'..='\u{1F}' | '\u{7F}' | '\u{206A}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFC}')
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn cleans_as_the_reference() {
        let cases = [
            ("  A  Photo\tof\n\nTHE   Beach ", "a photo of the beach"),
            ("&amp;amp;amp;amp; &lt;3", "& <3"),
            ("<b>&amp;amp;amp;</b>", "<b>&amp;</b>"),
            ("ＬＯＵＤ　ＮＯＩＳＥＳ！ ｶﾀｶﾅ", "loud noises! カタカナ"),
            ("“here’s” a ﬁne \u{1b}[36mday\u{1b}[0m\u{200b}", "\"here's\" a fine day\u{200b}"),
            ("cafe\u{301} \u{85}", "café …"),
        ];
        for (text, want) in cases {
            assert_eq!(clean(text), want, "{text:?}");
        }
    }
}
