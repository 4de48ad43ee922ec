//! The docs name only paths that exist: every repository path mentioned in README.md,
//! docs/**/*.md, tools/README.md and infra/model/README.md, and in the comments of src/**/*.rs,
//! must be a file or folder of the repository. Needs no setup.
//!
//! A mention is a word that starts with one of [`ROOTS`] (`src/`, `tests/`, ...) after a character
//! that cannot be part of a path, so `https://host/src/x` and `../src/x` are not mentions. It
//! runs over path characters; trailing punctuation is dropped, and a line number after a colon
//! (`src/main.rs:12`) ends it. `{a,b}` expands to each choice, and a `*` in the last part must
//! match at least one entry of its folder (`events/*.json`). Paths the docs name on purpose that
//! are not in the repository are listed, with the reason, in [`NOT_IN_THE_REPOSITORY`].

use std::path::{Path, PathBuf};

/// The top folders of the repository whose paths the docs name.
const ROOTS: &[&str] =
    &["src/", "tests/", "tools/", "benches/", "examples/", "infra/", "docs/", "terraform/", "fuzz/", "events/"];

/// Paths named on purpose that the repository does not hold.
const NOT_IN_THE_REPOSITORY: &[(&str, &str)] = &[
    ("tests/images", "pillow-heif's test photos: a folder of that project, not of this one"),
    ("infra/cuda/cudaN.txt", "N stands for the CUDA major version (cuda12.txt, cuda13.txt)"),
    ("infra/model/model.onnx", "where a deployer puts the exported model; git-ignored"),
    ("terraform/terraform.tfvars", "the deployer's copy of terraform.tfvars.example"),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Characters a path may hold; `{` `,` `}` only for the brace form, `*` for a wildcard.
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '{' | '}' | ',' | '*')
}

/// Characters that, just before a root, make it part of a longer path or word.
fn continues_a_word(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '~' | '$' | '@')
}

/// The paths mentioned in `text`.
fn mentions(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut previous = None;
    for (at, c) in text.char_indices() {
        let starts = previous.is_none_or(|p| !continues_a_word(p));
        previous = Some(c);
        if !starts {
            continue;
        }
        let rest = &text[at..];
        if !ROOTS.iter().any(|root| rest.starts_with(root)) {
            continue;
        }
        let mut depth = 0usize;
        let mut end = 0;
        for (i, c) in rest.char_indices() {
            let inside = match c {
                '{' => {
                    depth += 1;
                    true
                }
                '}' if depth > 0 => {
                    depth -= 1;
                    true
                }
                ',' => depth > 0,
                _ => is_path_char(c) && c != '}',
            };
            if !inside {
                break;
            }
            end = i + c.len_utf8();
        }
        let mut path = &rest[..end];
        // Sentence punctuation, or a brace form left open.
        path = path.trim_end_matches(['.', ',', '-']);
        if path.contains('{') && depth > 0 {
            path = &path[..path.find('{').unwrap_or(path.len())];
        }
        found.push(path.to_string());
    }
    found
}

/// `a/{b,c}.rs` as `a/b.rs` and `a/c.rs` (nested braces expand too).
fn expand_braces(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else { return vec![path.to_string()] };
    let mut depth = 0;
    let mut close = None;
    let mut cuts = vec![open];
    for (i, c) in path[open..].char_indices().map(|(i, c)| (open + i, c)) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            ',' if depth == 1 => cuts.push(i),
            _ => {}
        }
    }
    let Some(close) = close else { return vec![path.to_string()] };
    cuts.push(close);
    let (head, tail) = (&path[..open], &path[close + 1..]);
    cuts.windows(2).flat_map(|w| expand_braces(&format!("{head}{}{tail}", &path[w[0] + 1..w[1]]))).collect()
}

/// `*` matches any run of characters, the rest itself.
fn wildcard(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (head.len()..=name.len()).any(|i| name.is_char_boundary(i) && wildcard(tail, &name[i..]))
        }
    }
}

/// Whether `path` (relative to the repository) names something in it.
fn exists(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    if !path.contains('*') {
        return repo().join(path).exists();
    }
    // `dir/**/*.rs`: the folder before the first wildcard exists.
    if path.contains("**") {
        let folder = &path[..path.find("**").unwrap()];
        return repo().join(folder).is_dir();
    }
    let (folder, pattern) = path.rsplit_once('/').unwrap_or(("", path));
    if folder.contains('*') {
        return repo().join(&folder[..folder.find('*').unwrap()]).is_dir();
    }
    std::fs::read_dir(repo().join(folder)).is_ok_and(|entries| {
        entries.flatten().any(|entry| entry.file_name().to_str().is_some_and(|name| wildcard(pattern, name)))
    })
}

/// Each mention in `text` that names nothing, as `FILE:LINE: PATH`.
fn missing(file: &Path, lines: impl Iterator<Item = (usize, String)>) -> Vec<String> {
    let relative = file.strip_prefix(repo()).unwrap_or(file).display().to_string();
    let mut out = Vec::new();
    for (number, line) in lines {
        for mention in mentions(&line) {
            for path in expand_braces(&mention) {
                let known = NOT_IN_THE_REPOSITORY.iter().any(|(name, _)| *name == path.trim_end_matches('/'));
                if !known && !exists(&path) {
                    out.push(format!("{relative}:{number}: {path}"));
                }
            }
        }
    }
    out
}

fn files_under(folder: &Path, extension: &str, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, extension, out);
        } else if path.extension().is_some_and(|e| e == extension) {
            out.push(path);
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The comment of a line of Rust: what follows the first `//` outside a string literal and not
/// part of a URL (`https://`); none when the line has no comment.
fn comment(line: &str) -> Option<&str> {
    let mut in_string = false;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '"' if previous != '\\' => in_string = !in_string,
            '/' if !in_string && previous != ':' && line[i..].starts_with("//") => return Some(&line[i + 2..]),
            _ => {}
        }
        previous = c;
    }
    None
}

fn report(what: &str, missing: Vec<String>) {
    assert!(missing.is_empty(), "{what} name paths that are not in the repository:\n{}", missing.join("\n"));
}

#[test]
fn the_docs_name_only_real_paths() {
    let mut docs = vec![repo().join("README.md"), repo().join("tools/README.md"), repo().join("infra/model/README.md")];
    files_under(&repo().join("docs"), "md", &mut docs);
    let missing = docs
        .iter()
        .flat_map(|doc| missing(doc, read(doc).lines().map(str::to_string).enumerate().map(|(i, l)| (i + 1, l))))
        .collect();
    report("the docs", missing);
}

#[test]
fn comments_in_src_name_only_real_paths() {
    let mut sources = Vec::new();
    files_under(&repo().join("src"), "rs", &mut sources);
    let missing = sources
        .iter()
        .flat_map(|source| {
            let text = read(source);
            let comments: Vec<(usize, String)> = text
                .lines()
                .enumerate()
                .filter_map(|(i, line)| comment(line).map(|c| (i + 1, c.to_string())))
                .collect();
            missing(source, comments.into_iter())
        })
        .collect();
    report("comments in src/", missing);
}

#[test]
fn mentions_are_read_as_written() {
    let found = mentions(
        "see src/main.rs:12, `src/api/` and (docs/design.md). Also src/x/{a,b}.rs and \
         https://example.com/src/no.rs, ../src/no.rs, my-src/no.rs; events/*.json.",
    );
    assert_eq!(found, ["src/main.rs", "src/api/", "docs/design.md", "src/x/{a,b}.rs", "events/*.json"]);
    assert_eq!(expand_braces("src/x/{a,b/{c,d}}.rs"), ["src/x/a.rs", "src/x/b/c.rs", "src/x/b/d.rs"]);
    assert!(exists("events/*.json") && exists("src/") && exists("src/main.rs") && exists("src/**/*.rs"));
    assert!(!exists("src/source/web.rs") && !exists("events/*.nothing"));
    assert_eq!(comment(r#"let url = "https://x//y"; // src/a.rs"#), Some(" src/a.rs"));
    assert_eq!(comment(r#"let url = "https://x/y";"#), None);
}
