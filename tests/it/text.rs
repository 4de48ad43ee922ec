//! The text tower end to end: the tokenizer against OpenAI's reference, text embeddings against
//! Python ONNX Runtime, /v1/embeddings through the official OpenAI client, /v1/classify against a
//! NumPy recomputation, and the 4xx rules. Real binary, real ONNX Runtime, generated models.

use crate::common;

use std::{path::Path, process::Command};

use clipfn::tokenize::{JsonTokenizer, Tokenizer};
use common::{ServerConfig, camera_photos, cosine, file_name, repo, scrape, series, setup_var, store_keyed};
use serde_json::{Value, json};

/// Runs tools/text_reference.py COMMAND with `input` as JSON on stdin.
fn reference(command: &str, args: &[&str], input: &Value) -> Value {
    let args: Vec<&str> = [command].into_iter().chain(args.iter().copied()).collect();
    common::python_json("text_reference.py", &args, &[], Some(input))
}

/// Strings of every kind the tokenizer must agree on, the same every run: English, Korean,
/// Japanese, Chinese, emoji, punctuation, HTML entities, accents, odd whitespace, special words,
/// over-long and empty texts, mixed at random from a fixed seed.
fn corpus() -> Vec<String> {
    const PIECES: &[&[&str]] = &[
        &[
            "A photo of a",
            "beach at sunset",
            "THE Dog",
            "it's",
            "don't",
            "We're",
            "I've",
            "I'm",
            "you'll",
            "he'd",
            "New York City",
            "rock'n'roll",
            "O'Brien",
            "x-ray",
            "e-mail",
            "snake_case",
            "CamelCase",
            "2026",
            "3.14",
            "1,000,000",
            "v2.0",
            "iPhone 15 Pro",
            "Mt. Fuji",
            "U.S.A.",
            "dog's",
            "CATS'",
            "a",
            "I",
        ],
        &["바다", "해변에서 본 일몰", "고양이 사진", "맛있는 음식", "서울의 밤", "산책하는 강아지", "한국어", "ㅋㅋㅋ"],
        &[
            "海辺の夕日",
            "猫の写真",
            "東京タワー",
            "ラーメン",
            "ひらがな",
            "富士山！",
            "（テスト）",
            "ｶﾀｶﾅ",
            "おいしい。",
            "北京烤鸭",
            "写真",
        ],
        &["😀", "🏖️", "👨‍👩‍👧", "🇰🇷", "❤️", "🐱🐶", "👍🏽", "✨", "☀", "🗻"],
        &[
            "!!!",
            "...",
            "?!",
            "—",
            "–",
            "«quoted»",
            "¿qué?",
            "¡hola!",
            "#hashtag",
            "@user",
            "(parens)",
            "[x]",
            "{}",
            "$5",
            "100%",
            "a/b",
            "“curly”",
            "‘single’",
            "&",
            "<",
            ">",
            "~",
            "^_^",
            ":-)",
            "*",
            "\\",
            "|",
            "`",
        ],
        &[
            "&amp;",
            "&lt;b&gt;",
            "&#39;",
            "&quot;",
            "&nbsp;",
            "&eacute;",
            "&hellip;",
            "&#x1F600;",
            "&amp;amp;",
            "&amp;amp;amp;",
            "&copy",
            "&notit;",
            "&ampx",
            "<b>&amp;amp;</b>",
            "&NotEqualTilde;",
            "&#0;",
        ],
        &[
            "café",
            "naïve",
            "Crème brûlée",
            "São Paulo",
            "Zürich",
            "cafe\u{301}",
            "ΟΔΟΣ",
            "İstanbul",
            "STRASSE",
            "straße",
            "ﬁne",
            "ﬂower",
            "ＡＢＣ１２３",
            "①",
            "٣",
            "Ångström",
            "Ελληνικά",
            "русский",
        ],
        &["\t", "\n", "  ", "\u{a0}", "\u{3000}", "\r\n", "\u{200b}", "\u{feff}"],
        &["<|startoftext|>", "<|endoftext|>", "<start_of_text>", "<end_of_text>"],
    ];
    const SEPARATORS: &[&str] = &[" ", " ", " ", "", ", ", "\n", "  ", "-"];
    let mut strings: Vec<String> = [
        "",
        " ",
        "\n\t ",
        "a",
        "A",
        "!",
        "&",
        "&amp;",
        "&#128; = euro",
        "<|endoftext|>",
        "😀",
        "supercalifragilisticexpialidocious",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    strings.extend(PIECES.iter().flat_map(|kind| kind.iter().map(|s| s.to_string())));
    let mut rng = fastrand::Rng::with_seed(9);
    while strings.len() < 2200 {
        let mut text = String::new();
        for _ in 0..rng.usize(1..12) {
            let kind = PIECES[rng.usize(..PIECES.len())];
            text.push_str(kind[rng.usize(..kind.len())]);
            text.push_str(SEPARATORS[rng.usize(..SEPARATORS.len())]);
        }
        strings.push(text);
    }
    // Over-long: past 77 tokens, in words and in one long run.
    for n in [30, 60, 200] {
        strings.push("a photo of the beach at sunset ".repeat(n));
        strings.push("해변".repeat(n));
        strings.push("!".repeat(n * 3));
    }
    strings
}

/// Asserts that `tokenizer` gives the ids of `text_reference.py tokens ARGS` on every string.
fn assert_ids_match(tokenizer: &Tokenizer, corpus: &[String], args: &[&str]) {
    let reference = reference("tokens", args, &json!(corpus));
    let mut differ = Vec::new();
    for (text, want) in corpus.iter().zip(reference.as_array().unwrap()) {
        let want: Vec<i64> = want.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let ours = tokenizer.tokenize(text).unwrap().ids;
        if ours != want {
            differ.push(format!("{text:?}: ours {ours:?}, reference {want:?}"));
        }
    }
    let shown = differ[..differ.len().min(10)].join("\n");
    assert!(differ.is_empty(), "{} of {} strings differ:\n{shown}", differ.len(), corpus.len());
    eprintln!("{}: all {} strings equal the reference", tokenizer.kind(), corpus.len());
}

#[test]
fn tokenizer_matches_the_reference() {
    let corpus = corpus();
    assert!(corpus.len() >= 2000);
    assert_ids_match(&Tokenizer::clip(), &corpus, &[]);
}

fn text_server(store: &Path) -> ServerConfig {
    ServerConfig::local(store).env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_TEXT_MODEL"))
}

fn embeddings(body: &Value) -> Vec<Vec<f32>> {
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, item)| {
            assert_eq!(item["index"], i, "items out of order: {body}");
            item["embedding"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect()
        })
        .collect()
}

#[test]
fn text_embeddings_match_onnx_runtime() {
    // Every 40th string of the corpus, and the over-long ones within CLIPFN_MAX_TEXT_CHARS: about
    // 60 texts, several batches of 8.
    let corpus = corpus();
    let texts: Vec<&String> =
        corpus.iter().step_by(40).chain(corpus.iter().rev().take(9)).filter(|t| t.chars().count() <= 2000).collect();
    let store = tempfile::tempdir().unwrap();
    let server = text_server(store.path()).start();
    let (status, body) = server.post_json("/v1/embed", &json!({ "texts": texts }));
    assert_eq!(status, 200, "{body}");
    assert_eq!((&body["model"], &body["dim"]), (&json!("clip-text-test"), &json!(512)));
    let ours = embeddings(&body);
    let model = setup_var("CLIPFN_TEST_TEXT_MODEL");
    let theirs = reference("embed", &["--model", &model], &json!(texts));
    let mut lowest = 1.0f32;
    for (i, (a, b)) in ours.iter().zip(theirs.as_array().unwrap()).enumerate() {
        assert_eq!(body["data"][i]["text"], json!(texts[i]));
        let b: Vec<f32> = b.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let norm = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "{:?} not unit length: {norm}", texts[i]);
        let similarity = cosine(a, &b);
        assert!(similarity >= 0.9999, "{:?}: cosine {similarity} against the reference", texts[i]);
        lowest = lowest.min(similarity);
    }
    eprintln!("text embeddings: {} texts, lowest cosine to Python ONNX Runtime {lowest}", texts.len());
    // The test model tells texts apart: a one-token change moves the embedding clearly.
    let (_, pair) = server.post_json("/v1/embed", &json!({"texts": ["a photo of a cat.", "a photo of a dog."]}));
    let pair = embeddings(&pair);
    assert!(cosine(&pair[0], &pair[1]) < 0.99);

    let (status, ready) = server.get("/readyz");
    assert_eq!(status, 200);
    assert_eq!(ready["model"]["id"], "clip-test");
    assert_eq!(ready["text_model"]["id"], "clip-text-test", "{ready}");
    assert_eq!(ready["text_model"]["mask_name"], "attention_mask", "{ready}");
}

#[test]
fn openai_client_reads_v1_embeddings() {
    let store = tempfile::tempdir().unwrap();
    let server = text_server(store.path()).start();
    let output = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(repo().join("tests/clients/openai_embeddings.py"))
        .arg(&server.base)
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("running tests/clients/openai_embeddings.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((&summary["dim"], &summary["model"]), (&json!(512), &json!("clip-text-test")), "{summary}");
}

#[test]
fn classify_scores_match_numpy_from_embed_outputs() {
    let photos = camera_photos(3);
    let (store, mut keys) = store_keyed(&photos, |_, photo| file_name(photo).to_string());
    keys.insert(1, "missing.jpg".into());
    let (set_labels, templates) =
        (["beach", "food", "city", "dog", "mountain", "document"], ["a photo of a {}.", "a blurry photo of the {}."]);
    let labels_file = store.path().join("labels.json");
    let sets =
        json!({"sets": {"places": {"labels": set_labels, "templates": templates}, "other": {"labels": ["x", "y"]}}});
    std::fs::write(&labels_file, sets.to_string()).unwrap();
    let server = text_server(store.path()).env("CLIPFN_LABELS", labels_file.to_str().unwrap()).start();
    assert_eq!(server.get("/readyz").1["label_sets"], json!(["other", "places"]));

    let (status, images) = server.post_json("/v1/embed", &json!({ "images": keys }));
    assert_eq!(status, 200, "{images}");
    let image_embeddings: Vec<Value> =
        images["data"].as_array().unwrap().iter().filter_map(|d| d.get("embedding").cloned()).collect();
    let check = |body: &Value, labels: &[&str], templates: &[&str], top_k: usize| {
        let prompts: Vec<String> =
            labels.iter().flat_map(|l| templates.iter().map(move |t| t.replace("{}", l))).collect();
        let (status, embedded) = server.post_json("/v1/embed", &json!({ "texts": prompts }));
        assert_eq!(status, 200, "{embedded}");
        let prompt_embeddings: Vec<Value> =
            embedded["data"].as_array().unwrap().iter().map(|d| d["embedding"].clone()).collect();
        let per_label: Vec<Value> = prompt_embeddings.chunks(templates.len()).map(|c| json!(c)).collect();
        let want =
            reference("classify", &[], &json!({"images": image_embeddings, "prompts": per_label, "top_k": top_k}));
        let data = body["data"].as_array().unwrap();
        assert_eq!(data.len(), keys.len());
        assert_eq!(data[1]["error"]["code"], "not_found", "one bad photo gets its own error: {body}");
        let scored: Vec<&Value> = data.iter().filter(|d| d.get("labels").is_some()).collect();
        for (photo, want) in scored.iter().zip(want.as_array().unwrap()) {
            let got = photo["labels"].as_array().unwrap();
            assert_eq!(got.len(), top_k);
            for (g, w) in got.iter().zip(want.as_array().unwrap()) {
                assert_eq!(g["label"], labels[w["label"].as_u64().unwrap() as usize], "{photo}");
                let (g, w) = (g["score"].as_f64().unwrap(), w["score"].as_f64().unwrap());
                assert!((g - w).abs() < 1e-4, "score {g} against NumPy's {w}: {photo}");
            }
        }
    };

    let (status, by_set) =
        server.post_json("/v1/classify", &json!({"images": keys, "label_set": "places", "top_k": 3}));
    assert_eq!(status, 200, "{by_set}");
    check(&by_set, &set_labels, &templates, 3);

    let ad_hoc = ["sunset", "pizza", "street", "cat", "snow"];
    let misses =
        |server: &common::Server| series(&scrape(server), "clipfn_text_cache_lookups_total", &[("outcome", "miss")]);
    let hits =
        |server: &common::Server| series(&scrape(server), "clipfn_text_cache_lookups_total", &[("outcome", "hit")]);
    let (status, first) = server.post_json("/v1/classify", &json!({"images": keys, "labels": ad_hoc}));
    assert_eq!(status, 200, "{first}");
    check(&first, &ad_hoc, &["a photo of a {}."], 5);
    let (misses_before, hits_before) = (misses(&server), hits(&server));
    let (_, again) = server.post_json("/v1/classify", &json!({"images": keys, "labels": ad_hoc, "top_k": 2}));
    assert_eq!(
        (misses(&server), hits(&server)),
        (misses_before, hits_before + 5.0),
        "labels asked again come from the cache"
    );
    assert_eq!(again["data"][0]["labels"][0], first["data"][0]["labels"][0]);
}

#[test]
fn bad_text_requests_get_400_naming_the_problem() {
    let store = tempfile::tempdir().unwrap();
    let labels_file = store.path().join("labels.json");
    std::fs::write(&labels_file, r#"{"sets": {"food": {"labels": ["pizza", "sushi"]}}}"#).unwrap();
    let server = text_server(store.path())
        .env("CLIPFN_LABELS", labels_file.to_str().unwrap())
        .env("CLIPFN_MAX_TEXTS", "3")
        .env("CLIPFN_MAX_TEXT_CHARS", "100")
        .start();
    let cases = [
        ("/v1/embed", json!({"texts": ["ok", 7]}), "texts[1] must be a string"),
        ("/v1/embed", json!({"texts": []}), "texts must hold 1 to 3"),
        ("/v1/embed", json!({"texts": ["a", "b", "c", "d"]}), "got 4"),
        ("/v1/embed", json!({"texts": ["x".repeat(101)]}), "CLIPFN_MAX_TEXT_CHARS"),
        ("/v1/embed", json!({"texts": "one"}), "texts must be a list of strings"),
        ("/v1/embed", json!({"texts": ["a"], "images": ["b.jpg"]}), "not both"),
        ("/v1/embeddings", json!({"input": [[1, 2, 3]]}), "input[0] must be a string"),
        ("/v1/embeddings", json!({"input": "a", "encoding_format": "int8"}), "encoding_format"),
        ("/v1/embeddings", json!({"input": "a", "dimensions": 256}), "dimensions"),
        (
            "/v1/classify",
            json!({"images": ["a.jpg"], "label_set": "places"}),
            "unknown label_set 'places'; known sets: food",
        ),
        ("/v1/classify", json!({"images": ["a.jpg"], "labels": ["cat", ""]}), "labels[1] is empty"),
        ("/v1/classify", json!({"images": ["a.jpg"], "labels": ["cat", "dog", "cat"]}), "labels[2] repeats 'cat'"),
        (
            "/v1/classify",
            json!({"images": ["a.jpg"], "labels": ["cat"], "top_k": 0}),
            "top_k must be from 1 to 2147483647",
        ),
        ("/v1/classify", json!({"images": ["a.jpg"], "labels": ["cat"], "label_set": "food"}), "not both"),
        ("/v1/classify", json!({"images": ["a.jpg"]}), "labels"),
        ("/v1/classify", json!({"images": [], "labels": ["cat"]}), "images must hold"),
    ];
    for (path, body, wanted) in cases {
        let (status, response) = server.post_json(path, &body);
        assert_eq!(status, 400, "{path} {body}: {response}");
        assert_eq!(response["error"]["code"], "bad_request");
        let message = response["error"]["message"].as_str().unwrap();
        assert!(message.contains(wanted), "{path} {body}: '{message}' does not say '{wanted}'");
    }
    // Over 77 tokens (100 digits: one token each) is cut as CLIP does, not refused.
    let (status, body) = server.post_json("/v1/embeddings", &json!({"input": "1234567890".repeat(10), "model": "x"}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], 77, "{body}");
    assert_eq!(body["data"][0]["embedding"].as_array().unwrap().len(), 512);
}

#[test]
fn without_a_text_model_text_endpoints_say_404_and_photos_work() {
    let photo = &camera_photos(1)[0];
    let store = tempfile::tempdir().unwrap();
    std::fs::copy(photo, store.path().join("p.jpg")).unwrap();
    let server = ServerConfig::local(store.path()).start();
    let requests = [
        ("/v1/embed", json!({"texts": ["beach"]})),
        ("/v1/embeddings", json!({"input": "beach", "model": "clip"})),
        ("/v1/classify", json!({"images": ["p.jpg"], "labels": ["beach"]})),
        ("/v1/classify", json!({"images": ["p.jpg"], "label_set": "places"})),
    ];
    for (path, body) in requests {
        let (status, response) = server.post_json(path, &body);
        assert_eq!(
            (status, &response["error"]["code"]),
            (404, &json!("text_model_not_configured")),
            "{path}: {response}"
        );
    }
    let (status, ready) = server.get("/readyz");
    assert_eq!((status, &ready["text_model"]), (200, &Value::Null));
    let (status, body) = server.embed(&["p.jpg"]);
    assert_eq!(status, 200, "{body}");
    assert!(body["data"][0]["embedding"].is_array());
}

// The multilingual text tower (a Hugging Face tokenizer.json, a BERT-shaped graph with mean
// pooling and projection baked in), against the Python `tokenizers` package and ONNX Runtime.

fn multilingual_server(store: &Path) -> ServerConfig {
    ServerConfig::local(store)
        .env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_MULTILINGUAL_MODEL"))
        .env("CLIPFN_TEXT_TOKENIZER", &setup_var("CLIPFN_TEST_MULTILINGUAL_TOKENIZER"))
}

/// The corpus above plus the fixture text the tokenizer was trained on, line by line.
fn multilingual_corpus() -> Vec<String> {
    let trained = std::fs::read_to_string(repo().join("tests/fixtures/multilingual.txt")).unwrap();
    trained.lines().map(String::from).chain(corpus()).collect()
}

#[test]
fn tokenizer_json_ids_match_python_tokenizers() {
    let corpus = multilingual_corpus();
    let file = setup_var("CLIPFN_TEST_MULTILINGUAL_TOKENIZER");
    let tokenizer = JsonTokenizer::from_bytes(&std::fs::read(&file).unwrap(), None, 128).unwrap();
    assert!(corpus.len() >= 1000);
    let tokenizer = Tokenizer::Json(Box::new(tokenizer));
    assert_ids_match(&tokenizer, &corpus, &["--tokenizer", &file]);
    // The file's truncation (64) is kept under the larger cap; a smaller cap wins.
    assert_eq!(tokenizer.tokenize(&"바다 ".repeat(200)).unwrap().ids.len(), 64);
    let capped = JsonTokenizer::from_bytes(&std::fs::read(&file).unwrap(), None, 16).unwrap();
    assert_eq!(capped.tokenize(&"바다 ".repeat(200)).unwrap().ids.len(), 16);
}

#[test]
fn multilingual_tower_embeds_searches_and_classifies_in_korean() {
    let photos = camera_photos(2);
    let (store, keys) = store_keyed(&photos, |i, _| format!("{i}.jpg"));
    let labels_file = store.path().join("labels.json");
    let sets = json!({"sets": {"장소": {"labels": ["바다", "도시", "산"], "templates": ["{} 사진"]}}});
    std::fs::write(&labels_file, sets.to_string()).unwrap();
    let server = multilingual_server(store.path()).env("CLIPFN_LABELS", labels_file.to_str().unwrap()).start();

    // Texts of very different lengths share batches, padded to the longest: each must still equal
    // the text run alone at its own length.
    let texts: Vec<String> = multilingual_corpus().into_iter().step_by(37).take(40).collect();
    let (status, body) = server.post_json("/v1/embed", &json!({ "texts": texts }));
    assert_eq!(status, 200, "{body}");
    assert_eq!((&body["model"], &body["dim"]), (&json!("multilingual-text-test"), &json!(512)));
    let ours = embeddings(&body);
    let (model, file) = (setup_var("CLIPFN_TEST_MULTILINGUAL_MODEL"), setup_var("CLIPFN_TEST_MULTILINGUAL_TOKENIZER"));
    let theirs = reference("embed", &["--model", &model, "--tokenizer", &file], &json!(texts));
    let mut lowest = 1.0f32;
    for (i, (a, b)) in ours.iter().zip(theirs.as_array().unwrap()).enumerate() {
        let b: Vec<f32> = b.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let similarity = cosine(a, &b);
        assert!(similarity >= 0.9999, "{:?}: cosine {similarity} against Python ONNX Runtime", texts[i]);
        lowest = lowest.min(similarity);
    }
    eprintln!("multilingual embeddings: {} texts, lowest cosine to Python ONNX Runtime {lowest}", texts.len());
    let (_, pair) = server.post_json("/v1/embed", &json!({"texts": ["바다 일몰", "서울 야경"]}));
    let pair = embeddings(&pair);
    assert!(cosine(&pair[0], &pair[1]) < 0.99, "the model tells Korean texts apart");

    let (status, ready) = server.get("/readyz");
    assert_eq!(status, 200);
    assert_eq!(
        (&ready["text_model"]["tokenizer"], &ready["text_model"]["context"]),
        (&json!("tokenizer.json"), &Value::Null)
    );

    let (status, body) =
        server.post_json("/v1/embeddings", &json!({"input": ["바다 일몰", "눈 속의 강아지"], "model": "x"}));
    assert_eq!(status, 200, "{body}");
    let search = embeddings(&body);
    assert!(cosine(&search[0], &pair[0]) > 0.9999, "the same text, the same embedding on both endpoints");
    let tokenizer = JsonTokenizer::from_bytes(&std::fs::read(&file).unwrap(), None, 128).unwrap();
    let tokens: usize = ["바다 일몰", "눈 속의 강아지"].iter().map(|t| tokenizer.tokenize(t).unwrap().ids.len()).sum();
    assert_eq!(body["usage"]["prompt_tokens"], tokens, "the tokenizer.json's count, [CLS] and [SEP] included");

    let (status, images) = server.post_json("/v1/embed", &json!({ "images": keys }));
    assert_eq!(status, 200, "{images}");
    let image_embeddings: Vec<Value> =
        images["data"].as_array().unwrap().iter().map(|d| d["embedding"].clone()).collect();
    for (request, labels, template) in [
        (json!({"images": keys, "label_set": "장소", "top_k": 3}), ["바다", "도시", "산"], "{} 사진"),
        (
            json!({"images": keys, "labels": ["해변", "음식", "고양이"], "top_k": 3}),
            ["해변", "음식", "고양이"],
            "a photo of a {}.",
        ),
    ] {
        let (status, body) = server.post_json("/v1/classify", &request);
        assert_eq!(status, 200, "{body}");
        let prompts: Vec<String> = labels.iter().map(|l| template.replace("{}", l)).collect();
        let (_, embedded) = server.post_json("/v1/embed", &json!({ "texts": prompts }));
        let per_label: Vec<Value> =
            embedded["data"].as_array().unwrap().iter().map(|d| json!([d["embedding"]])).collect();
        let want = reference("classify", &[], &json!({"images": image_embeddings, "prompts": per_label, "top_k": 3}));
        for (photo, want) in body["data"].as_array().unwrap().iter().zip(want.as_array().unwrap()) {
            for (got, want) in photo["labels"].as_array().unwrap().iter().zip(want.as_array().unwrap()) {
                assert_eq!(got["label"], labels[want["label"].as_u64().unwrap() as usize], "{photo}");
                assert!((got["score"].as_f64().unwrap() - want["score"].as_f64().unwrap()).abs() < 1e-4, "{photo}");
            }
        }
    }
}

/// `clipfn serve` with the multilingual tower and `envs` over it must exit; its stderr.
fn failed_multilingual_start(envs: &[(&str, &str)]) -> String {
    let (model, file) = (setup_var("CLIPFN_TEST_MULTILINGUAL_MODEL"), setup_var("CLIPFN_TEST_MULTILINGUAL_TOKENIZER"));
    let tower = [("CLIPFN_TEXT_MODEL", model.as_str()), ("CLIPFN_TEXT_TOKENIZER", file.as_str())];
    common::failed_start(&[&tower[..], envs].concat())
}

#[test]
fn bad_multilingual_settings_stop_start_up_naming_both_figures() {
    let dir = tempfile::tempdir().unwrap();
    let narrow = dir.path().join("narrow.onnx");
    let made = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(repo().join("tools/make_models.py"))
        .args(["--kind", "text-multilingual", "--dim", "256", "--out", narrow.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let message = failed_multilingual_start(&[("CLIPFN_TEXT_MODEL", narrow.to_str().unwrap())]);
    assert!(message.contains("256 dimensions but the image model's have 512"), "{message}");

    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{\"model\": 7}").unwrap();
    let message = failed_multilingual_start(&[("CLIPFN_TEXT_TOKENIZER", garbage.to_str().unwrap())]);
    assert!(message.contains("garbage.json") && message.contains("not a usable tokenizer.json"), "{message}");
    let message = failed_multilingual_start(&[("CLIPFN_TEXT_TOKENIZER", "/nonexistent/tokenizer.json")]);
    assert!(message.contains("reading the tokenizer.json /nonexistent/tokenizer.json"), "{message}");

    // One token more than the model's embedding table holds.
    let mut file: Value =
        serde_json::from_slice(&std::fs::read(setup_var("CLIPFN_TEST_MULTILINGUAL_TOKENIZER")).unwrap()).unwrap();
    let vocab = file["model"]["vocab"].as_object_mut().unwrap();
    let size = vocab.len();
    vocab.insert("##zzz".into(), json!(size));
    let larger = dir.path().join("larger.json");
    std::fs::write(&larger, file.to_string()).unwrap();
    let message = failed_multilingual_start(&[("CLIPFN_TEXT_TOKENIZER", larger.to_str().unwrap())]);
    assert!(message.contains(&format!("vocabulary ({} tokens)", size + 1)), "{message}");
    assert!(message.contains(&format!("{}", size - 1)), "ONNX Runtime names the table's bound: {message}");
}
