//! HTML character references decoded exactly as Python's `html.unescape`, which CLIP's reference
//! tokenizer applies twice. The entity table is htmlize's (the WHATWG list Python's also comes
//! from); the rules for numbers, legacy names without `;` and the longest-prefix match are
//! Python's, which differ from the browser algorithm htmlize implements.

use std::{borrow::Cow, sync::LazyLock};

use regex::{Captures, Regex};

/// `html._charref` from CPython.
static CHARREF: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\x0C <&#;]{1,32};?)").expect("valid regex"));

pub fn unescape(text: &str) -> Cow<'_, str> {
    if !text.contains('&') {
        return Cow::Borrowed(text);
    }
    CHARREF.replace_all(text, |caps: &Captures| reference(&caps[1]))
}

/// One reference without its `&`: `#123;`, `#x1F600`, `amp;`, `notit;`...
fn reference(name: &str) -> String {
    if let Some(number) = name.strip_prefix('#') {
        let digits = number.trim_end_matches(';');
        let value = match digits.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => digits.parse(),
        };
        // Digits that overflow u32 are past U+10FFFF as well.
        return numeric(value.unwrap_or(u32::MAX));
    }
    if let Some(value) = entity(name) {
        return value.to_string();
    }
    // The longest known name the reference starts with (legacy names need no `;`).
    for end in (2..name.len()).rev() {
        if let Some(prefix) = name.get(..end)
            && let Some(value) = entity(prefix)
        {
            return format!("{value}{}", &name[end..]);
        }
    }
    format!("&{name}")
}

fn entity(name: &str) -> Option<&'static str> {
    let key = format!("&{name}");
    htmlize::ENTITIES.get(key.as_bytes()).and_then(|bytes| std::str::from_utf8(bytes).ok())
}

fn numeric(n: u32) -> String {
    match n {
        0 => "\u{FFFD}".into(),
        0x0D => "\r".into(),
        // Windows-1252 for the C1 range, as browsers and Python do (htmlize has that table).
        0x80..=0x9F => htmlize::unescape(format!("&#{n};")).into_owned(),
        0xD800..=0xDFFF | 0x11_0000.. => "\u{FFFD}".into(),
        0x01..=0x08 | 0x0B | 0x0E..=0x1F | 0x7F | 0xFDD0..=0xFDEF => String::new(),
        n if n & 0xFFFE == 0xFFFE => String::new(),
        n => char::from_u32(n).map(String::from).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn follows_python() {
        let cases = [
            ("&amp;lt;b&gt;", "&lt;b>"),
            ("&ampx &notit; &copy2026", "&x ¬it; ©2026"),
            ("&#39;&#x1F600;&#X41", "'😀A"),
            ("&#0;&#1;&#128;&#x110000;&#xD800;", "\u{FFFD}€\u{FFFD}\u{FFFD}"),
            ("&nosuch; & &#; &;", "&nosuch; & &#; &;"),
            ("&NotEqualTilde;", "\u{2242}\u{338}"),
        ];
        for (escaped, plain) in cases {
            assert_eq!(unescape(escaped), plain, "{escaped}");
        }
    }
}
