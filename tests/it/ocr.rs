//! Text in photos (issue 36), end to end over HTTP on loopback, with PP-OCRv4's real weights from
//! the `rapidocr-onnxruntime` 1.4.4 wheel (`CLIPFN_TEST_OCR`) on photos with words rendered onto
//! real wallpapers and scikit-image's scanned page (`CLIPFN_TEST_OCR_PHOTOS`; tools/setup-ocr.sh
//! fetches and makes them). RapidOCR's own pipeline on the same photos (tools/ocr_reference.py, in
//! `.cache/venv-rapidocr`) is the reference, and the rendered words the truth.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Server, ServerConfig, file_name, repo, setup_var, store_named};
use serde_json::{Value, json};

/// The photos tools/ocr_photos.py makes, in the order its truth lists them.
const PHOTOS: [&str; 8] =
    ["sign.jpg", "colours.png", "tilt.jpg", "upside.jpg", "big.jpg", "exif.jpg", "page.png", "notext.jpg"];

fn photos() -> Vec<PathBuf> {
    let folder = PathBuf::from(setup_var("CLIPFN_TEST_OCR_PHOTOS"));
    PHOTOS.iter().map(|name| folder.join(name)).collect()
}

fn serve(store: &Path, model: &str) -> Server {
    ServerConfig::local(store).env("CLIPFN_OCR_MODEL", model).start()
}

fn analyze(server: &Server, photos: &[PathBuf]) -> Value {
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": keys, "embedding": false }));
    assert_eq!(status, 200, "{body}");
    body
}

/// A line as both sides give it: its text, scores and box.
#[derive(Debug, Clone)]
struct Line {
    text: String,
    score: f64,
    box_score: f64,
    corners: Vec<[f64; 2]>,
}

fn lines(answer: &Value) -> Vec<Line> {
    let line = |l: &Value| Line {
        text: l["text"].as_str().unwrap().to_string(),
        score: l["score"].as_f64().unwrap(),
        box_score: l["box_score"].as_f64().unwrap_or(f64::NAN),
        corners: l["box"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()])
            .collect(),
    };
    answer.as_array().unwrap_or_else(|| panic!("no lines: {answer}")).iter().map(line).collect()
}

/// The intersection over union of two boxes' axis-aligned extents.
fn iou(a: &[[f64; 2]], b: &[[f64; 2]]) -> f64 {
    let extent = |q: &[[f64; 2]]| {
        let (xs, ys) = (q.iter().map(|p| p[0]), q.iter().map(|p| p[1]));
        [
            xs.clone().fold(f64::MAX, f64::min),
            ys.clone().fold(f64::MAX, f64::min),
            xs.fold(f64::MIN, f64::max),
            ys.fold(f64::MIN, f64::max),
        ]
    };
    let (a, b) = (extent(a), extent(b));
    let inter = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0) * (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let area = |r: [f64; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    inter / (area(a) + area(b) - inter)
}

/// Levenshtein distance over characters.
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diagonal + usize::from(ca != cb));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Character errors of `read` against `truth`, line for line in order (a line missing counts all
/// its characters), and the truth's characters.
fn character_errors(read: &[String], truth: &[String]) -> (usize, usize) {
    let errors = truth.iter().enumerate().map(|(i, t)| edits(read.get(i).map_or("", String::as_str), t)).sum::<usize>()
        + read.iter().skip(truth.len()).map(|r| r.chars().count()).sum::<usize>();
    (errors, truth.iter().map(|t| t.chars().count()).sum())
}

/// What one comparison with RapidOCR measured: its lines matched by clipfn's, read alike, and the
/// gaps; against the rendered truth, both sides' character errors.
#[derive(Debug, Default)]
struct Parity {
    matched: usize,
    total: usize,
    extra: usize,
    same_text: usize,
    errors: usize,
    characters: usize,
    score_gap: f64,
    box_gap: f64,
    ours_vs_truth: usize,
    theirs_vs_truth: usize,
    truth_chars: usize,
    truth_photos: usize,
}

/// clipfn with `CLIPFN_OCR_SIZES` = `sizes` and RapidOCR 1.4.4 (tools/ocr_reference.py with
/// `reference_args`) on the same photos, the detector sized alike (short side down to 736, never
/// up). Each of the reference's lines is matched to the unmatched line of clipfn's it overlaps most
/// (box IoU at least 0.5). The figures go to stdout (docs/ocr.md quotes them).
fn parity(sizes: &str, reference_args: &[&str]) -> Parity {
    let photos = photos();
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_OCR_MODEL", &setup_var("CLIPFN_TEST_OCR"))
        .env("CLIPFN_OCR_SIZES", sizes)
        .start();
    let ready = server.get("/readyz").1;
    assert_eq!(
        (&ready["ocr"]["characters"], &ready["ocr"]["resolution"], ready["ocr"]["classifier"].is_string()),
        (&json!(6623), &json!(736), true),
        "{ready}"
    );
    assert_eq!(ready["ocr"]["sizes"], sizes, "{ready}");
    // Exact sizes declare none: any view and width may run, and none is outside.
    let allowed = &ready["shapes"]["text_detector"]["allowed"];
    assert_eq!(allowed.is_null(), sizes == "exact", "{ready}");
    let body = analyze(&server, &photos);
    let output = std::process::Command::new(setup_var("CLIPFN_TEST_OCR_PYTHON"))
        .arg(repo().join("tools/ocr_reference.py"))
        .args(reference_args)
        .args(&photos)
        .output()
        .expect("running tools/ocr_reference.py");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let reference: Value = serde_json::from_slice(&output.stdout).unwrap();
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(photos[0].with_file_name("truth.json")).unwrap()).unwrap();

    let mut p = Parity::default();
    for (i, name) in PHOTOS.iter().enumerate() {
        let item = &body["data"][i];
        let ours = lines(&item["ocr"]);
        let theirs = lines(&reference[i]["lines"]);
        for (k, (a, b)) in ours
            .iter()
            .map(Some)
            .chain(std::iter::repeat(None))
            .zip(theirs.iter().map(Some).chain(std::iter::repeat(None)))
            .take(ours.len().max(theirs.len()))
            .enumerate()
        {
            let show = |l: Option<&Line>| {
                l.map_or("-".to_string(), |l| format!("{:?} {:.3}/{:.3}", l.text, l.score, l.box_score))
            };
            println!("{sizes} {name} {k}: clipfn {} | RapidOCR {}", show(a), show(b));
        }
        assert_eq!(
            (item["width"].as_u64(), item["height"].as_u64()),
            (reference[i]["width"].as_u64(), reference[i]["height"].as_u64()),
            "{name}: the upright size"
        );
        let mut unmatched: Vec<usize> = (0..ours.len()).collect();
        for line in &theirs {
            p.total += 1;
            p.characters += line.text.chars().count();
            let best = unmatched
                .iter()
                .copied()
                .max_by(|&a, &b| iou(&ours[a].corners, &line.corners).total_cmp(&iou(&ours[b].corners, &line.corners)));
            let Some(k) = best.filter(|&k| iou(&ours[k].corners, &line.corners) >= 0.5) else {
                p.errors += line.text.chars().count();
                println!("{name}: RapidOCR's {:?} has no line of clipfn's", line.text);
                continue;
            };
            unmatched.retain(|&u| u != k);
            let ours = &ours[k];
            p.matched += 1;
            p.same_text += usize::from(ours.text == line.text);
            p.errors += edits(&ours.text, &line.text);
            p.score_gap = p.score_gap.max((ours.score - line.score).abs());
            p.box_gap = p.box_gap.max((ours.box_score - line.box_score).abs());
        }
        p.extra += unmatched.len();
        if let Some(truth) = truth[name].as_array() {
            let truth: Vec<String> = truth.iter().map(|t| t.as_str().unwrap().to_string()).collect();
            let texts = |lines: &[Line]| lines.iter().map(|l| l.text.clone()).collect::<Vec<_>>();
            // Lines split where the truth has one are joined by a space before counting.
            let joined = |lines: &[Line]| -> Vec<String> {
                if lines.len() > truth.len() && truth.len() == 1 { vec![texts(lines).join(" ")] } else { texts(lines) }
            };
            let (e_ours, n) = character_errors(&joined(&ours), &truth);
            let (e_theirs, _) = character_errors(&joined(&theirs), &truth);
            p.ours_vs_truth += e_ours;
            p.theirs_vs_truth += e_theirs;
            p.truth_chars += n;
            p.truth_photos += 1;
        }
    }
    println!(
        "ocr parity ({sizes} sizes): {}/{} reference lines matched ({} more of clipfn's), {} with the same text, CER \
         {:.4} over {} characters, text scores within {:.4}, box scores within {:.4}; against the truth ({} \
         characters): clipfn {} character errors, RapidOCR {}",
        p.matched,
        p.total,
        p.extra,
        p.same_text,
        p.cer(),
        p.characters,
        p.score_gap,
        p.box_gap,
        p.truth_chars,
        p.ours_vs_truth,
        p.theirs_vs_truth
    );
    // The truth comparison is no comparison if no photo had a truth to hold to (0 <= 0), and an
    // error count is one only beside the characters it was counted over.
    let with_truth = PHOTOS.iter().filter(|name| truth[**name].is_array()).count();
    assert!(
        p.truth_photos == with_truth && p.truth_photos >= 5,
        "{} of {with_truth} photos held to the truth",
        p.truth_photos
    );
    assert!(p.total >= 17, "the photos hold at least 17 lines: {}", p.total);
    p
}

impl Parity {
    fn cer(&self) -> f64 {
        self.errors as f64 / self.characters as f64
    }

    /// What both sizes hold to: every line of the reference's found, at most one more of clipfn's,
    /// the same text on all but `differing` lines, a character error rate of at most 1%, text
    /// scores within `score_gap`, box scores within 0.02, and against the truth no worse than
    /// RapidOCR and at most one error in ten characters.
    fn holds(&self, differing: usize, score_gap: f64) {
        let p = self;
        assert!(
            p.matched == p.total && p.extra <= 1,
            "{}/{} lines matched, {} more of clipfn's",
            p.matched,
            p.total,
            p.extra
        );
        assert!(p.same_text + differing >= p.total, "{}/{} lines read alike", p.same_text, p.total);
        assert!(p.cer() <= 0.01, "character error rate {:.4} against the reference", p.cer());
        assert!(
            p.score_gap <= score_gap && p.box_gap <= 0.02,
            "scores apart by {:.4} (text), {:.4} (box)",
            p.score_gap,
            p.box_gap
        );
        assert!(
            p.ours_vs_truth <= p.theirs_vs_truth,
            "against the truth: clipfn {}, RapidOCR {}",
            p.ours_vs_truth,
            p.theirs_vs_truth
        );
        assert!(
            p.truth_chars >= 100 && p.ours_vs_truth * 10 <= p.truth_chars,
            "{} errors over {}",
            p.ours_vs_truth,
            p.truth_chars
        );
    }
}

/// Exact sizes, the CPU's default: each view runs as it is and each line at its own width to the
/// next 8 px, and clipfn reads every line as RapidOCR's own pipeline reads it alone
/// (`--own-widths`; 17 of 17, text scores within 0.015): scores within 0.02.
#[test]
fn ocr_reads_what_rapidocr_reads() {
    parity("exact", &["--own-widths"]).holds(0, 0.02);
}

/// Declared sizes, as on CUDA: the views and lines padded to clipfn's shapes on both sides. Padding
/// moves PP-OCRv4's readings (docs/ocr.md, "Shapes"), and a line whose width lies at a bucket's
/// edge in one pipeline and not in the other, from crops a pixel apart, reads differently: on 18
/// lines, one low-scored line differs by a letter and a score by 0.023.
#[test]
fn declared_sizes_read_what_rapidocr_reads_padded_alike() {
    parity("declared", &[]).holds(1, 0.03);
}

/// The upside-down photo's lines read the right way up only through the line classifier: without
/// `classification/model.onnx` the same folder reads them as something else. And a recognizer
/// whose characters come from `recognition/characters.txt` reads as the one with metadata does.
#[test]
fn the_classifier_turns_lines_and_a_character_file_stands_for_the_metadata() {
    let photos: Vec<PathBuf> = photos().into_iter().filter(|p| file_name(p) == "upside.jpg").collect();
    let store = store_named(&photos);
    let folder = PathBuf::from(setup_var("CLIPFN_TEST_OCR"));
    let read = |model: &Path| -> Vec<String> {
        let server = serve(store.path(), model.to_str().unwrap());
        lines(&analyze(&server, &photos)["data"][0]["ocr"]).into_iter().map(|l| l.text).collect()
    };
    let upright = read(&folder);
    assert_eq!(upright, ["Keep this side up", "Handle with care"]);
    let without = tempfile::tempdir().unwrap();
    for part in ["detection", "recognition"] {
        std::os::unix::fs::symlink(folder.join(part), without.path().join(part)).unwrap();
    }
    let unturned = read(without.path());
    assert_ne!(unturned, upright, "read upside down, the lines are not the text");
    assert_eq!(read(Path::new(&setup_var("CLIPFN_TEST_OCR_CHARFILE"))), upright, "recognition/characters.txt");
}

/// `"ocr": false` leaves the text out; `"ocr": true` where no OCR model is loaded is a 400 naming
/// the setting; the request's other signals never depend on OCR.
#[test]
fn ocr_is_asked_for_and_refused_plainly() {
    let photos: Vec<PathBuf> = photos().into_iter().filter(|p| file_name(p) == "sign.jpg").collect();
    let store = store_named(&photos);
    let server = serve(store.path(), &setup_var("CLIPFN_TEST_OCR"));
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": ["sign.jpg"], "ocr": false }));
    assert_eq!(status, 200, "{body}");
    assert!(body["data"][0].get("ocr").is_none() && body["data"][0]["embedding"].is_array(), "{body}");
    let plain = ServerConfig::local(store.path()).start();
    let (status, body) = plain.post_json("/v1/analyze", &json!({ "images": ["sign.jpg"], "ocr": true }));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("CLIPFN_OCR_MODEL"), "{body}");
    let (status, body) = plain.post_json("/v1/analyze", &json!({ "images": ["sign.jpg"] }));
    assert!(status == 200 && body["data"][0].get("ocr").is_none(), "{body}");
}

/// Photos that push OCR: 400 random words, whose lines are capped at CLIPFN_OCR_MAX_LINES and the
/// rest counted in `ocr_left_out`; a 16,000 px wide panorama, whose detector view is capped (4,096
/// px wide) and whose sign is still read; and a character file of the wrong length, which stops
/// start-up naming both numbers.
#[test]
fn strewn_words_panoramas_and_wrong_character_files() {
    let folder = PathBuf::from(setup_var("CLIPFN_TEST_OCR_PHOTOS"));
    let photos = [folder.join("strewn.png"), folder.join("panorama.jpg")];
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_OCR_MODEL", &setup_var("CLIPFN_TEST_OCR"))
        .env("CLIPFN_OCR_MAX_LINES", "3")
        .start();
    let body = analyze(&server, &photos);
    let (strewn, panorama) = (&body["data"][0], &body["data"][1]);
    let found = strewn["ocr"].as_array().unwrap_or_else(|| panic!("{strewn}")).len();
    let left_out = strewn["ocr_left_out"].as_u64().unwrap_or_else(|| panic!("nothing left out: {strewn}"));
    assert!(found <= 3 && left_out >= 100, "strewn words: {found} lines, {left_out} left out");
    let texts: Vec<String> = lines(&panorama["ocr"]).into_iter().map(|l| l.text).collect();
    assert!(panorama["width"] == 16_000 && texts.iter().any(|t| t.contains("Summit")), "{panorama}");

    let wrong = tempfile::tempdir().unwrap();
    let charfile = PathBuf::from(setup_var("CLIPFN_TEST_OCR_CHARFILE"));
    std::os::unix::fs::symlink(charfile.join("detection"), wrong.path().join("detection")).unwrap();
    std::fs::create_dir(wrong.path().join("recognition")).unwrap();
    std::os::unix::fs::symlink(charfile.join("recognition/model.onnx"), wrong.path().join("recognition/model.onnx"))
        .unwrap();
    let listed = std::fs::read_to_string(charfile.join("recognition/characters.txt")).unwrap();
    let short: Vec<&str> = listed.lines().skip(10).collect();
    std::fs::write(wrong.path().join("recognition/characters.txt"), short.join("\n")).unwrap();
    let stderr = common::failed_start(&[("CLIPFN_OCR_MODEL", wrong.path().to_str().unwrap())]);
    assert!(stderr.contains("characters.txt") && stderr.contains("6613") && stderr.contains("6625"), "{stderr}");
}

/// `clipfn backfill` with OCR models writes each photo's lines and `ocr_text` (the lines joined by
/// newlines) as `/v1/analyze` answers them, and docs/deploy.md's query finds the photos by a word.
#[test]
fn backfill_writes_the_lines_and_the_docs_query_finds_photos_by_a_word() {
    let photos: Vec<PathBuf> =
        photos().into_iter().filter(|p| ["sign.jpg", "colours.png", "notext.jpg"].contains(&file_name(p))).collect();
    let store = store_named(&photos);
    let out = tempfile::tempdir().unwrap();
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let model = setup_var("CLIPFN_TEST_OCR");
    let parquet = common::backfill_local(store.path(), &keys, ("CLIPFN_OCR_MODEL", &model), out.path());
    let server = serve(store.path(), &model);
    let body = analyze(&server, &photos);
    let read = |word: &str| common::read_backfill(&parquet, &[&format!("word='{word}'")]);
    let read_back = read("BREAD");
    let rows = read_back["rows"].as_array().unwrap();
    assert_eq!(rows.len(), keys.len(), "a row per photo: {read_back}");
    for row in rows {
        let i = keys.iter().position(|k| row["key"] == *k).unwrap();
        let api: Vec<String> = lines(&body["data"][i]["ocr"]).into_iter().map(|l| l.text).collect();
        let stored: Vec<&str> = row["ocr"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap()).collect();
        assert_eq!(stored, api, "{row}");
        assert_eq!(row["ocr_text"], api.join("\n"), "{row}");
    }
    assert_eq!(read_back["duckdb"]["words"], json!(["sign.jpg"]));
    assert_eq!(read("departures")["duckdb"]["words"], json!(["colours.png"]));
}
