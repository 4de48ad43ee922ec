//! SigLIP and SigLIP 2 model folders end to end (issue 21), against tools/siglip_reference.py
//! (transformers' SiglipImageProcessor, the Python `tokenizers` package with the folder's padding
//! and lower-casing, ONNX Runtime, NumPy's sigmoid): the embedding output found by name, the
//! squashing resize, fixed-length padding with the file's pad token, sigmoid scores with the
//! model's own scale and bias, photos on /v1/embeddings, and the folders that must not start.
//! Real binary, real ONNX Runtime, the generated folders (tools/make_models.py --kind siglip*-test).

use crate::common;

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use clipfn::tokenize::{JsonTokenizer, Tokenizer};
use common::{ServerConfig, camera_photos, cosine, failed_start, item, repo, setup_var};
use serde_json::{Value, json};

const SIGLIP2: &str = "CLIPFN_TEST_SIGLIP2_FOLDER";
const SIGLIP: &str = "CLIPFN_TEST_SIGLIP_FOLDER";
const NOLOGITS: &str = "CLIPFN_TEST_SIGLIP2_NOLOGITS_FOLDER";

/// tools/siglip_reference.py COMMAND --folder FOLDER ARGS, with `input` as JSON on stdin.
fn siglip_reference(command: &str, folder: &str, args: &[&str], input: &Value) -> Value {
    let mut child = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(repo().join("tools/siglip_reference.py"))
        .arg(command)
        .args(if folder.is_empty() { vec![] } else { vec!["--folder", folder] })
        .args(args)
        .env_remove("OPENBLAS_CORETYPE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running tools/siglip_reference.py");
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "siglip_reference.py {command}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("siglip_reference.py prints JSON")
}

fn floats(value: &Value) -> Vec<f32> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect()
}

/// A store holding `photos`, and their keys there.
fn store_of(photos: &[PathBuf]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let keys = photos
        .iter()
        .map(|photo| {
            let key = photo.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::copy(photo, dir.path().join(&key)).unwrap();
            key
        })
        .collect();
    (dir, keys)
}

/// The generated folder `from` with some files left out and some written anew (the rest linked).
fn folder_like(from: &str, leave_out: &[&str], write: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("onnx")).unwrap();
    let from = Path::new(from);
    let files =
        ["onnx", ""].iter().flat_map(|sub| std::fs::read_dir(from.join(sub)).unwrap()).map(|e| e.unwrap().path());
    for path in files.filter(|p| p.is_file()) {
        let relative = path.strip_prefix(from).unwrap().to_str().unwrap().to_string();
        if !leave_out.contains(&relative.as_str()) && !write.iter().any(|(file, _)| *file == relative) {
            std::os::unix::fs::symlink(&path, dir.path().join(&relative)).unwrap();
        }
    }
    for (file, text) in write {
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    dir
}

/// A JSON file of a generated folder, changed by `edit`.
fn edited(folder: &str, file: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut value: Value = serde_json::from_slice(&std::fs::read(Path::new(folder).join(file)).unwrap()).unwrap();
    edit(&mut value);
    value.to_string()
}

fn server(folder: &str, store: &Path) -> ServerConfig {
    ServerConfig::local(store).env("CLIPFN_MODEL", folder).env("CLIPFN_PRECISION", "fp32")
}

fn text_embeddings(server: &common::Server, texts: &[String]) -> Vec<Vec<f32>> {
    let (status, body) = server.post_json("/v1/embed", &json!({ "texts": texts }));
    assert_eq!(status, 200, "{body}");
    body["data"].as_array().unwrap().iter().map(|d| floats(&d["embedding"])).collect()
}

#[test]
fn siglip_folders_start_naming_their_outputs_padding_and_scoring() {
    let store = tempfile::tempdir().unwrap();
    for (var, family, side, pad_id, scale, bias) in
        [(SIGLIP2, "siglip2", 224, 0, 2.0f64, -1.25), (SIGLIP, "siglip", 256, 1, 2.5, -3.5)]
    {
        let server = ServerConfig::local(store.path()).env("CLIPFN_MODEL", &setup_var(var)).start();
        let (status, ready) = server.get("/readyz");
        assert_eq!(status, 200, "{ready}");
        let (model, text) = (&ready["model"], &ready["text_model"]);
        assert_eq!((&model["output_name"], &text["output_name"]), (&json!("pooler_output"), &json!("pooler_output")));
        assert_eq!(model["preprocessing"]["resize"], json!({ "square": side }), "{ready}");
        assert_eq!((&model["preprocessing"]["crop"], &model["image_size"]), (&Value::Null, &json!(side)));
        assert_eq!(
            (&text["context"], &text["padding"]["pad_id"], &text["mask_name"]),
            (&json!(64), &json!(pad_id), &Value::Null)
        );
        let scoring = &ready["family"]["scoring"];
        assert_eq!((&ready["family"]["name"], &scoring["rule"]), (&json!(family), &json!("sigmoid")), "{ready}");
        assert!((scoring["scale"].as_f64().unwrap() - scale.exp()).abs() < 1e-4, "{ready}");
        assert!((scoring["bias"].as_f64().unwrap() - bias).abs() < 1e-6, "{ready}");
        assert_eq!(ready["family"]["scoring_from"], "config.json");
    }
    // CLIP's folder keeps CLIP's rule.
    let server = ServerConfig::local(store.path()).env("CLIPFN_MODEL", &setup_var("CLIPFN_TEST_FOLDER")).start();
    let family = server.get("/readyz").1["family"].clone();
    assert_eq!((&family["name"], &family["scoring"]), (&json!("clip"), &json!({"rule": "softmax", "scale": 100.0})));
}

#[test]
fn photo_embeddings_match_the_siglip_image_processor() {
    let photos = camera_photos(12);
    let (store, keys) = store_of(&photos);
    let paths: Vec<&str> = photos.iter().map(|p| p.to_str().unwrap()).collect();
    for var in [SIGLIP2, SIGLIP] {
        let folder = setup_var(var);
        let server = server(&folder, store.path()).start();
        let (status, body) = server.post_json("/v1/embed", &json!({ "images": keys }));
        assert_eq!(status, 200, "{body}");
        let reference = siglip_reference("images", &folder, &paths, &Value::Null);
        let similarities: Vec<f32> = photos
            .iter()
            .enumerate()
            .map(|(i, photo)| {
                let theirs = &reference["embeddings"][photo.to_str().unwrap()];
                assert!(theirs.is_array(), "the reference failed on {}: {reference}", keys[i]);
                cosine(&item(&body, i).unwrap(), &floats(theirs))
            })
            .collect();
        let mean = similarities.iter().sum::<f32>() / similarities.len() as f32;
        let lowest = similarities.iter().copied().fold(1.0, f32::min);
        eprintln!("{var}: {} photos, cosine to SiglipImageProcessor mean {mean:.5}, lowest {lowest:.5}", photos.len());
        assert!(mean >= 0.995 && lowest >= 0.985, "{var}: mean {mean}, lowest {lowest}: {similarities:?}");
    }
}

/// The folder's tokenizer as clipfn loads it, and its ids padded as the model is fed.
fn padded_ids(folder: &str, texts: &[String]) -> Vec<Vec<i64>> {
    let read = |file: &str| std::fs::read(Path::new(folder).join(file)).unwrap();
    let json = JsonTokenizer::from_bytes(&read("tokenizer.json"), Some(&read("tokenizer_config.json")), 128).unwrap();
    let tokenizer = Tokenizer::Json(Box::new(json));
    let padding = tokenizer.padding();
    let length = padding.length.expect("SigLIP folders pad to a fixed length");
    texts
        .iter()
        .map(|text| {
            let mut ids = tokenizer.tokenize(text).unwrap().ids;
            assert!(ids.len() <= length, "{text:?}: {} ids", ids.len());
            ids.resize(length, padding.pad_id);
            ids
        })
        .collect()
}

#[test]
fn token_ids_match_the_reference_on_the_corpus() {
    let corpus: Vec<String> = serde_json::from_value(siglip_reference("corpus", "", &[], &Value::Null)).unwrap();
    assert!(corpus.len() >= 1000, "{}", corpus.len());
    for var in [SIGLIP2, SIGLIP] {
        let folder = setup_var(var);
        let want: Vec<Vec<i64>> =
            serde_json::from_value(siglip_reference("tokens", &folder, &[], &json!(corpus))).unwrap();
        let ours = padded_ids(&folder, &corpus);
        let differ: Vec<String> = corpus
            .iter()
            .zip(ours.iter().zip(&want))
            .filter(|(_, (a, b))| a != b)
            .map(|(text, (a, b))| format!("{text:?}: ours {a:?}, reference {b:?}"))
            .collect();
        let equal = corpus.len() - differ.len();
        eprintln!("{var}: token ids equal on {equal} of {} strings", corpus.len());
        assert!(differ.is_empty(), "{var}: {} differ:\n{}", differ.len(), differ[..differ.len().min(5)].join("\n"));
    }
}

/// Texts of very different lengths, a few of them past the 64-token limit: first the shortest,
/// then one in capitals.
fn mixed_texts() -> Vec<String> {
    let trained = std::fs::read_to_string(repo().join("tests/fixtures/multilingual.txt")).unwrap();
    let mut texts: Vec<String> = ["a", "A Photo Of The Beach At Sunset", "바다"].map(String::from).to_vec();
    texts.extend(trained.lines().step_by(3).map(String::from));
    texts.push("a photo of the beach at sunset ".repeat(20));
    texts.push("해변에서 본 일몰 ".repeat(30));
    texts
}

#[test]
fn text_embeddings_match_and_do_not_depend_on_their_batch_mates() {
    let store = tempfile::tempdir().unwrap();
    let texts = mixed_texts();
    for var in [SIGLIP2, SIGLIP] {
        let folder = setup_var(var);
        let server = server(&folder, store.path()).start();
        let ours = text_embeddings(&server, &texts);
        let theirs = siglip_reference("embed", &folder, &[], &json!(texts));
        let lowest = ours
            .iter()
            .zip(theirs.as_array().unwrap())
            .zip(&texts)
            .map(|((a, b), text)| {
                let similarity = cosine(a, &floats(b));
                assert!(similarity >= 0.9999, "{var} {text:?}: cosine {similarity} to the reference");
                similarity
            })
            .fold(1.0, f32::min);
        eprintln!("{var}: {} texts in mixed batches of 8, lowest cosine to the reference {lowest:.6}", texts.len());
        // The shortest text alone, and among the longest: the same vector (padding to the batch's
        // longest would move it to a cosine of 0.6-0.9).
        let alone = text_embeddings(&server, &texts[..1]);
        let crowded: Vec<String> = texts.iter().rev().take(7).chain(&texts[..1]).cloned().collect();
        let crowded = text_embeddings(&server, &crowded);
        let same = cosine(&alone[0], &crowded[7]);
        assert!(same > 0.99999, "{var}: a text's vector moved with its batch-mates: cosine {same}");
        // Lower-cased, as tokenizer_config.json asks: the vocabulary has no capitals.
        let lower = text_embeddings(&server, &["a photo of the beach at sunset".into()]);
        assert!(cosine(&ours[1], &lower[0]) > 0.99999, "{var}: capitals were not lower-cased");
    }
}

#[test]
fn classify_scores_are_sigmoids_of_the_embed_outputs() {
    let photos = camera_photos(3);
    let (store, keys) = store_of(&photos);
    let labels = ["beach", "food", "city", "dog", "mountain"];
    for var in [SIGLIP2, NOLOGITS] {
        let folder = setup_var(var);
        let server = server(&folder, store.path()).start();
        let family = server.get("/readyz").1["family"].clone();
        let from = if var == NOLOGITS { "onnx/model.onnx" } else { "config.json" };
        assert_eq!((&family["scoring"]["rule"], &family["scoring_from"]), (&json!("sigmoid"), &json!(from)));
        let (status, body) = server.post_json("/v1/classify", &json!({"images": keys, "labels": labels, "top_k": 5}));
        assert_eq!(status, 200, "{body}");
        let (_, images) = server.post_json("/v1/embed", &json!({ "images": keys }));
        let images: Vec<Vec<f32>> = (0..keys.len()).map(|i| item(&images, i).unwrap()).collect();
        let prompts: Vec<String> = labels.iter().map(|l| format!("a photo of a {l}.")).collect();
        let prompts: Vec<Vec<Vec<f32>>> = text_embeddings(&server, &prompts).into_iter().map(|p| vec![p]).collect();
        let want =
            siglip_reference("classify", &folder, &[], &json!({"images": images, "prompts": prompts, "top_k": 5}));
        let mut total = 0.0;
        for (photo, want) in body["data"].as_array().unwrap().iter().zip(want.as_array().unwrap()) {
            for (got, want) in photo["labels"].as_array().unwrap().iter().zip(want.as_array().unwrap()) {
                assert_eq!(got["label"], labels[want["label"].as_u64().unwrap() as usize], "{var}: {photo}");
                let (got, want) = (got["score"].as_f64().unwrap(), want["score"].as_f64().unwrap());
                assert!((got - want).abs() < 1e-4, "{var}: score {got}, NumPy's sigmoid {want}");
                total += got;
            }
        }
        assert!((total / keys.len() as f64 - 1.0).abs() > 1e-3, "{var}: the scores look like a softmax");
    }
}

#[test]
fn bad_siglip_folders_refuse_naming_the_file_and_setting() {
    let siglip2 = setup_var(SIGLIP2);
    let store = tempfile::tempdir().unwrap();
    // No logit scale or bias anywhere: it embeds, but classifying is refused, and so are label sets.
    let config = edited(&setup_var(NOLOGITS), "config.json", |_| {});
    let bare = folder_like(&setup_var(NOLOGITS), &["onnx/model.onnx"], &[("config.json", config)]);
    let bare = bare.path().to_str().unwrap();
    let server = server(bare, store.path()).start();
    assert!(server.get("/readyz").1["family"]["scoring"].is_null());
    let (status, body) = server.post_json("/v1/classify", &json!({"images": ["a.jpg"], "labels": ["beach"]}));
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert_eq!((status, &body["error"]["code"]), (501, &json!("cannot_classify")), "{body}");
    assert!(message.contains("config.json has no logit_scale and logit_bias") && message.contains("onnx/model.onnx"));
    let (status, body) = server.post_json("/v1/embed", &json!({"texts": ["beach"]}));
    assert_eq!(status, 200, "{body}");
    drop(server);
    let labels = store.path().join("labels.json");
    std::fs::write(&labels, r#"{"sets": {"places": {"labels": ["beach"]}}}"#).unwrap();
    let message = failed_start(&[("CLIPFN_MODEL", bare), ("CLIPFN_LABELS", labels.to_str().unwrap())]);
    assert!(message.contains("CLIPFN_LABELS") && message.contains("logit_scale"), "{message}");

    let cases = [
        (
            "tokenizer.json",
            edited(&siglip2, "tokenizer.json", |t| t["padding"]["strategy"] = json!("BatchLongest")),
            &["tokenizer.json padding BatchLongest", "attention_mask"][..],
        ),
        (
            "preprocessor_config.json",
            edited(&siglip2, "preprocessor_config.json", |p| p["size"] = json!({"height": "224", "width": 224})),
            &["preprocessor_config.json", "'size'", "not a number"],
        ),
        (
            "preprocessor_config.json",
            edited(&siglip2, "preprocessor_config.json", |p| p["size"] = json!({"height": 224, "width": 256})),
            &["preprocessor_config.json", "'size'", "square"],
        ),
        (
            "config.json",
            edited(&siglip2, "config.json", |c| c["logit_bias"] = json!("-1.25")),
            &["config.json", "'logit_bias'", "not a number"],
        ),
    ];
    for (file, text, wanted) in cases {
        let bad = folder_like(&siglip2, &[], &[(file, text)]);
        let message = failed_start(&[("CLIPFN_MODEL", bad.path().to_str().unwrap())]);
        assert!(wanted.iter().all(|w| message.contains(w)), "{file}: {wanted:?} not in {message}");
    }
    // SigLIP 1's padding lives in tokenizer_config.json: without it, no fixed length, no start.
    let siglip = setup_var(SIGLIP);
    for (edit, wanted) in [
        (json!({"model_max_length": "64"}), "'model_max_length'"),
        (json!({"pad_token": null}), "tokenizer_config.json no pad_token"),
        (json!({"pad_token": "<nope>"}), "pad_token '<nope>' is not in tokenizer.json"),
    ] {
        let text = edited(&siglip, "tokenizer_config.json", |c| {
            edit.as_object().unwrap().iter().for_each(|(k, v)| c[k] = v.clone())
        });
        let bad = folder_like(&siglip, &[], &[("tokenizer_config.json", text)]);
        let message = failed_start(&[("CLIPFN_MODEL", bad.path().to_str().unwrap())]);
        assert!(message.contains(wanted), "{edit}: {message}");
    }
}

#[test]
fn openai_client_embeds_photos_on_v1_embeddings() {
    let photos = camera_photos(3);
    let (store, keys) = store_of(&photos);
    let server = server(&setup_var(SIGLIP2), store.path()).start();
    // No proxy or OpenAI variable of the developer's reaches the client: loopback only.
    let client = repo().join("tests/clients/openai_embeddings.py");
    let output = Command::new(setup_var("CLIPFN_PYTHON"))
        .env_clear()
        .args([client.to_str().unwrap(), &server.base, "missing.jpg"])
        .args(&keys)
        .output()
        .expect("running tests/clients/openai_embeddings.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["dim"], 128, "{summary}");

    // The same rules as /v1/embed: the limits, inline photos, a bad reference named by its index
    // with the photo's own status (OpenAI's shape has no per-item errors).
    let inline = format!("data:image/jpeg;base64,{}", base64_of(&photos[0]));
    let (status, body) =
        server.post_json("/v1/embeddings", &json!({"model": "x", "input": [inline], "modality": "image"}));
    assert_eq!(status, 200, "{body}");
    let (_, own) = server.post_json("/v1/embed", &json!({ "images": keys[..1] }));
    assert!(cosine(&floats(&body["data"][0]["embedding"]), &item(&own, 0).unwrap()) > 0.99999);
    for (request, wanted, named) in [
        (json!({"input": ["a.jpg", 7], "modality": "image"}), 400, "input[1] must be a photo reference"),
        (json!({"input": [], "modality": "image"}), 400, "images must hold 1 to"),
        (json!({"input": [keys[0], "http://169.254.169.254/x.jpg"], "modality": "image"}), 403, "input[1]"),
        (json!({"input": [keys[0], "no/such.jpg"], "modality": "image"}), 404, "input[1]: no object"),
        (json!({"input": ["data:image/jpeg;base64,AAAA"], "modality": "image"}), 422, "input[0]"),
        (json!({"input": ["a.jpg"], "modality": "audio"}), 400, "modality must be text or image"),
        (json!({"input": [keys[0]], "modality": "image", "dimensions": 512}), 400, "this model answers 128"),
    ] {
        let (status, body) = server.post_json("/v1/embeddings", &request);
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(status, wanted, "{request}: {body}");
        assert!(message.contains(named), "{request}: '{message}' does not say '{named}'");
    }
}

fn base64_of(path: &Path) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap())
}
