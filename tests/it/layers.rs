//! The layering of src/, enforced by reading the source text (no compiler help).
//!
//! Every top-level module of src/ has a rank in [`RANKS`]. A file may use another top-level module
//! through `crate::NAME` only when NAME's rank is strictly lower than its own module's: imports
//! point down, so there are no cycles and no stage reaches back. `sys` and `observe` are the
//! leaves that anything may use. A new top-level module fails the check until it is given a rank.
//!
//! What is read: every `crate::NAME` outside comments and string and char literals, in `use`
//! lines (`use crate::{a, b::c, d::{e, f}}`, over as many lines as the group takes) and inline
//! (`crate::sys::panics::message(...)`) alike, unit tests (`#[cfg(test)]`) included. What is not:
//! `super::` paths (a top-level module's own files reach each other that way; climbing out of it
//! with `super::super` is not checked), modules declared inline in lib.rs, and names at the crate
//! root that are not modules: items lib.rs defines or re-exports (so a re-export in lib.rs would be
//! a way around a layer; lib.rs keeps to `mod` lines and what the binary, tests and bench use).
//! The crate roots main.rs and lib.rs sit above every layer and are not checked.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

/// The top-level modules of src/ and their ranks, lowest first.
const RANKS: &[(&str, u32)] = &[
    ("sys", 0),
    ("observe", 1),
    ("settings", 2),
    ("embedding", 2),
    ("album", 2),
    ("storage", 3),
    ("source", 4),
    ("decode", 4),
    ("tokenize", 4),
    ("signals", 4),
    ("preprocess", 5),
    ("model", 6),
    ("worker", 7),
    ("pipeline", 8),
    ("text", 8),
    ("service", 9),
    ("api", 10),
    ("hosts", 11),
];

fn rank(module: &str) -> Option<u32> {
    RANKS.iter().find(|(name, _)| *name == module).map(|(_, rank)| *rank)
}

/// The top-level module of a file, from its path under src/: the first folder for a file in one
/// (`pipeline/item.rs` -> `pipeline`), the file stem for a file directly in src/ (`embedding.rs`
/// -> `embedding`). None for the crate roots, main.rs and lib.rs.
fn top_module(relative: &Path) -> Option<String> {
    let mut components = relative.components();
    let first = components.next()?.as_os_str().to_str()?;
    if components.next().is_some() {
        return Some(first.to_string());
    }
    match first {
        "main.rs" | "lib.rs" => None,
        file => file.strip_suffix(".rs").map(str::to_string),
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The identifier starting at `at` and where it ends.
fn ident_at(code: &[char], at: usize) -> (String, usize) {
    let end = (at..code.len()).find(|&i| !is_ident_char(code[i])).unwrap_or(code.len());
    (code[at..end].iter().collect(), end)
}

/// How many `#`s and the opening quote of a raw string (`r"`, `r#"`, `br##"`, ...) that starts at
/// `at`, just after its `r`; None when what follows the `r` is no raw string.
fn raw_string_hashes(code: &[char], at: usize) -> Option<usize> {
    let hashes = code[at..].iter().take_while(|&&c| c == '#').count();
    (code.get(at + hashes) == Some(&'"')).then_some(hashes)
}

/// `source` with every comment and the inside of every string and char literal blanked out:
/// each of their characters becomes a space, except newlines, so lines and columns stay where
/// they were. What is left is code: a `crate::x` in it is a real path.
fn code_only(source: &str) -> Vec<char> {
    let chars: Vec<char> = source.chars().collect();
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let (c, next) = (chars[i], chars.get(i + 1).copied());
        if c == '/' && next == Some('/') {
            // A line comment, doc comments (`///`, `//!`) included: up to the end of the line.
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            // A block comment; they nest.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == '"' {
            // A string (or, after a `b` or `c` already copied, a byte or C string): up to the
            // closing quote that no backslash escapes.
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let escaped = chars[i] == '\\';
                out.push(blank(chars[i]));
                i += 1;
                if escaped && i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            if i < chars.len() {
                out.push('"');
                i += 1;
            }
        } else if c == '\'' {
            // A char literal ('x', '"', '\n', '\u{..}'), or else a lifetime or label ('a), which is
            // code: a char literal closes right after its one character or after an escape.
            let end = if next == Some('\\') {
                (i + 3..chars.len()).find(|&j| chars[j] == '\'')
            } else {
                (chars.get(i + 2) == Some(&'\'')).then_some(i + 2)
            };
            match end {
                Some(end) => {
                    out.push('\'');
                    out.extend(chars[i + 1..end].iter().map(|&c| blank(c)));
                    out.push('\'');
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else if is_ident_start(c) {
            // A whole identifier at once, so that the `r` of `for` never starts a raw string.
            let (word, end) = ident_at(&chars, i);
            out.extend(&chars[i..end]);
            i = end;
            if matches!(word.as_str(), "r" | "br" | "cr")
                && let Some(hashes) = raw_string_hashes(&chars, i)
            {
                // A raw string: no escapes, it ends at a quote followed by as many `#`s.
                let opening = hashes + 1;
                out.extend(&chars[i..i + opening]);
                i += opening;
                let closes = |j: usize| chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#'));
                while i < chars.len() && !closes(i) {
                    out.push(blank(chars[i]));
                    i += 1;
                }
                let closing = (chars.len() - i).min(opening);
                out.extend(&chars[i..i + closing]);
                i += closing;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn skip_whitespace(code: &[char], mut at: usize) -> usize {
    while at < code.len() && code[at].is_whitespace() {
        at += 1;
    }
    at
}

fn line_of(code: &[char], at: usize) -> usize {
    1 + code[..at].iter().filter(|&&c| c == '\n').count()
}

/// The first names of the items of the `use` group whose `{` is at `open`: `a`, `b` and `d` for
/// `{a, b::c, d::{e, f}}` (`e` and `f` are inside `d`), with where each stands. `self` is left
/// out; a glob (`*`) is given as `*`.
fn group_items(code: &[char], open: usize) -> Vec<(usize, String)> {
    let mut items = Vec::new();
    let (mut depth, mut at_item_start) = (0, true);
    let mut i = open;
    while i < code.len() {
        match code[i] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => at_item_start = true,
            c if c.is_whitespace() => {}
            '*' if depth == 1 && at_item_start => {
                items.push((i, "*".to_string()));
                at_item_start = false;
            }
            c if depth == 1 && at_item_start && is_ident_start(c) => {
                let (name, end) = ident_at(code, i);
                if name != "self" {
                    items.push((i, name));
                }
                at_item_start = false;
                i = end;
                continue;
            }
            _ if depth == 1 => at_item_start = false,
            _ => {}
        }
        i += 1;
    }
    items
}

/// Every top-level name that `source` reaches through `crate::`, with its line: `a` for
/// `crate::a::b`, each item's first name for `crate::{...}` (on the line where the item stands),
/// `*` for `crate::*`. Comments and literals do not count; `pub(crate)` is no path.
fn crate_references(source: &str) -> Vec<(usize, String)> {
    let code = code_only(source);
    let mut found = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if !is_ident_start(code[i]) {
            i += 1;
            continue;
        }
        let (word, end) = ident_at(&code, i);
        i = end;
        if word != "crate" {
            continue;
        }
        let colons = skip_whitespace(&code, end);
        if code.get(colons..colons + 2) != Some(&[':', ':']) {
            continue;
        }
        let at = skip_whitespace(&code, colons + 2);
        match code.get(at) {
            Some('{') => found.extend(group_items(&code, at)),
            Some('*') => found.push((at, "*".to_string())),
            Some(&c) if is_ident_start(c) => found.push((at, ident_at(&code, at).0)),
            _ => {}
        }
    }
    found.into_iter().map(|(at, name)| (line_of(&code, at), name)).collect()
}

/// Every breach of the layering in `files` (path under src/, source text), one line each: modules
/// with no rank, then imports that do not point strictly down.
fn offences(files: &[(PathBuf, String)]) -> Vec<String> {
    let modules: BTreeSet<String> = files.iter().filter_map(|(path, _)| top_module(path)).collect();
    let mut found: Vec<String> = modules
        .iter()
        .filter(|module| rank(module).is_none())
        .map(|module| format!("src/{module}: a top-level module with no rank; give it one in RANKS"))
        .collect();
    for (path, source) in files {
        let Some(own) = top_module(path) else {
            continue; // a crate root
        };
        let Some(own_rank) = rank(&own) else {
            continue; // a module with no rank, named above
        };
        for (line, name) in crate_references(source) {
            let at = format!("src/{}:{line}", path.display());
            if name == "*" {
                found.push(format!("{at}: {own} (rank {own_rank}) uses crate::*, which hides what it takes"));
                continue;
            }
            if name == own || !modules.contains(&name) {
                continue; // its own module, or an item of the crate root
            }
            match rank(&name) {
                Some(theirs) if theirs < own_rank => {}
                Some(theirs) => found.push(format!("{at}: {own} (rank {own_rank}) uses {name} (rank {theirs})")),
                None => found.push(format!("{at}: {own} (rank {own_rank}) uses {name}, which has no rank")),
            }
        }
    }
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every .rs file under `dir`, as (path under src/, text), sorted by path.
fn rust_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                files.push((path.strip_prefix(dir).unwrap().to_path_buf(), text));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_import_in_src_points_to_a_lower_layer() {
    let files = rust_files(&src());
    assert!(files.len() > 10, "src/ has only {} .rs files", files.len());
    let offences = offences(&files);
    assert!(
        offences.is_empty(),
        "{} breaches of the layering (a module uses only modules of a lower rank; see RANKS in tests/it/layers.rs):\n{}",
        offences.len(),
        offences.join("\n")
    );
}

#[test]
fn every_ranked_module_exists_under_src() {
    let missing: Vec<&str> = RANKS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !src().join(format!("{name}.rs")).is_file() && !src().join(name).join("mod.rs").is_file())
        .collect();
    assert!(missing.is_empty(), "RANKS names modules that src/ lacks (neither NAME.rs nor NAME/mod.rs): {missing:?}");
}

// ---- the parser on small inputs: these make sure the checks above can fail ---------------

#[test]
fn a_multi_line_nested_use_group_gives_each_item_first_name_on_its_line() {
    let source = "\
use std::sync::Arc;
use crate::{
    observe::metrics,
    settings::{Provider, Settings},
    sys::{self, panics::{message, Panic}}, storage as store,
};
use crate::{self as root, *};
";
    let found = crate_references(source);
    let expected = [(3, "observe"), (4, "settings"), (5, "sys"), (5, "storage"), (7, "*")];
    assert_eq!(found, expected.map(|(line, name)| (line, name.to_string())));
}

#[test]
fn an_inline_crate_path_counts_where_it_stands() {
    let source = "\
fn run(e: Box<dyn std::any::Any>) -> crate::model::Model {
    let text = crate::sys::panics::message(&e);
    crate ::
        pipeline::run(text)
}
";
    let found = crate_references(source);
    let expected = [(1, "model"), (2, "sys"), (4, "pipeline")];
    assert_eq!(found, expected.map(|(line, name)| (line, name.to_string())));
}

#[test]
fn comments_literals_and_visibility_are_not_references() {
    let source = r####"
// crate::hosts is where this is used; see also crate::api.
/// Reads [`crate::service::Service`].
/* crate::text /* nested crate::worker */ crate::embedding */
pub(crate) fn f<'a>(x: &'a str) -> &'a str {
    let url = "file://crate::model/x.jpg";
    let raw = r#"a "quoted" crate::source"#;
    let quote = '"'; let escaped = '\''; let slash = b'/';
    let after = crate::observe::metrics::count(); // crate::tokenize
    x
}
"####;
    assert_eq!(crate_references(source), [(9, "observe".to_string())]);
}

#[test]
fn offences_name_the_file_line_both_modules_and_their_ranks() {
    let files: Vec<(PathBuf, String)> = [
        ("lib.rs", "pub mod hosts;\nuse crate::hosts::serve;\n"),
        ("sys/mod.rs", "use crate::observe::metrics; // sys is the lowest: even a leaf is above it\n"),
        ("observe/mod.rs", "use crate::sys::memory;\n"),
        ("storage/mod.rs", "use crate::sys::budget;\nuse crate::{\n    observe,\n    pipeline::Item,\n};\n"),
        ("pipeline/mod.rs", "use crate::{storage, text::l2_normalized};\nuse crate::Error;\n"),
        ("pipeline/item.rs", "use crate::pipeline::Other;\nuse super::super::hosts;\n"),
        ("text/mod.rs", "fn f() { crate::pipeline::run() }\n"),
        ("gadgets.rs", "use crate::sys;\n"),
        ("hosts/serve.rs", "use crate::gadgets::Gadget;\n"),
    ]
    .into_iter()
    .map(|(path, source)| (PathBuf::from(path), source.to_string()))
    .collect();
    assert_eq!(
        offences(&files),
        [
            "src/gadgets: a top-level module with no rank; give it one in RANKS",
            "src/sys/mod.rs:1: sys (rank 0) uses observe (rank 1)",
            "src/storage/mod.rs:4: storage (rank 3) uses pipeline (rank 8)",
            "src/pipeline/mod.rs:1: pipeline (rank 8) uses text (rank 8)",
            "src/text/mod.rs:1: text (rank 8) uses pipeline (rank 8)",
            "src/hosts/serve.rs:1: hosts (rank 11) uses gadgets, which has no rank",
        ]
    );
}

#[test]
fn a_file_belongs_to_its_first_folder_or_its_own_stem() {
    assert_eq!(top_module(Path::new("pipeline/item.rs")).as_deref(), Some("pipeline"));
    assert_eq!(top_module(Path::new("hosts/backfill/sink.rs")).as_deref(), Some("hosts"));
    assert_eq!(top_module(Path::new("embedding.rs")).as_deref(), Some("embedding"));
    assert_eq!(top_module(Path::new("main.rs")), None);
    assert_eq!(top_module(Path::new("lib.rs")), None);
}
