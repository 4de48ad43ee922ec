//! Model folders in the transformers.js layout and in Immich's: which file runs (CLIPFN_PRECISION
//! and the provider), refusals that name what is wrong, and preprocessing that follows
//! `preprocessor_config.json` (Immich's `preprocess_cfg.json`),
//! checked against Pillow with the same numbers. The real binary, real ONNX Runtime, the generated
//! test model's fp32, fp16 and int8 variants (tools/make_models.py --folder).
//!
//! CUDA cannot run here: the fp16-on-CUDA choice is tested as a rule in `model::folder`'s unit
//! tests, with the provider as input.

use crate::common;

use std::path::{Path, PathBuf};

use common::{
    ServerConfig, camera_photos, cosine, failed_start, file_name, gcs_env, item, reference_embeddings_with, scrape,
    series, setup_var, start_fake_gcs, store_named,
};
use serde_json::{Value, json};

/// A model folder holding some of a generated folder's ONNX files and the given
/// `preprocessor_config.json` (none when `Value::Null`).
fn folder_with(from: &str, files: &[&str], config: &Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("onnx")).unwrap();
    for file in files {
        std::os::unix::fs::symlink(Path::new(from).join(file), dir.path().join(file)).unwrap();
    }
    if !config.is_null() {
        std::fs::write(dir.path().join("preprocessor_config.json"), config.to_string()).unwrap();
    }
    dir
}

/// Embeddings of `photos` from a server on `model` with extra settings, and its /readyz model.
fn embed_with(model: &str, envs: &[(&str, &str)], photos: &[PathBuf]) -> (Value, Vec<Vec<f32>>) {
    let store = store_named(photos);
    let config =
        envs.iter().fold(ServerConfig::local(store.path()).env("CLIPFN_MODEL", model), |c, (k, v)| c.env(k, v));
    let server = config.start();
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.embed(&keys);
    assert_eq!(status, 200, "{body}");
    let embeddings = (0..keys.len()).map(|i| item(&body, i).unwrap()).collect();
    (server.get("/readyz").1["model"].clone(), embeddings)
}

#[test]
fn cpu_auto_runs_int8_and_names_it() {
    let store = tempfile::tempdir().unwrap();
    let server = ServerConfig::local(store.path()).env("CLIPFN_MODEL", &setup_var("CLIPFN_TEST_FOLDER")).start();
    let (status, ready) = server.get("/readyz");
    assert_eq!(status, 200);
    let model = &ready["model"];
    assert_eq!(model["id"], "clip-test", "{ready}");
    assert_eq!(model["provider"], "cpu");
    assert_eq!(model["file"], "onnx/vision_model_quantized.onnx");
    assert_eq!(model["precision"], "int8");
    assert_eq!(model["preprocessing"]["resize"], json!({"shortest_edge": 224}));
    let metrics = scrape(&server);
    let labels = [("file", "onnx/vision_model_quantized.onnx"), ("precision", "int8"), ("model", "clip-test")];
    assert!(series(&metrics, "clipfn_model_load_duration_seconds", &labels) > 0.0, "{metrics}");
}

#[test]
fn every_variant_matches_fp32_through_the_pipeline() {
    let photos = camera_photos(4);
    let folder = setup_var("CLIPFN_TEST_FOLDER");
    let (_, single_file) = embed_with(&setup_var("CLIPFN_TEST_MODEL"), &[], &photos);
    let mut by_precision = Vec::new();
    for (precision, floor) in [("fp32", 0.9999), ("fp16", 0.999), ("int8", 0.99)] {
        let (model, embeddings) = embed_with(&folder, &[("CLIPFN_PRECISION", precision)], &photos);
        assert_eq!(model["precision"], precision, "{model}");
        for (i, (ours, fp32)) in embeddings.iter().zip(&single_file).enumerate() {
            let similarity = cosine(ours, fp32);
            assert!(similarity >= floor, "{precision} {}: cosine {similarity} to fp32", file_name(&photos[i]));
        }
        by_precision.push(embeddings);
    }
    // The folder's fp32 file is the single file; the other variants are really other weights.
    assert_eq!(by_precision[0], single_file);
    assert_ne!(by_precision[1], single_file, "fp16 gave fp32's exact numbers");
    assert_ne!(by_precision[2], single_file, "int8 gave fp32's exact numbers");
}

#[test]
fn refusals_name_what_is_wrong() {
    let from = setup_var("CLIPFN_TEST_FOLDER");
    let clip =
        serde_json::from_slice::<Value>(&std::fs::read(Path::new(&from).join("preprocessor_config.json")).unwrap())
            .unwrap();
    let fp32_only = folder_with(&from, &["onnx/vision_model.onnx"], &clip);
    let message = failed_start(&[("CLIPFN_MODEL", fp32_only.path().to_str().unwrap()), ("CLIPFN_PRECISION", "int8")]);
    assert!(message.contains("CLIPFN_PRECISION=int8"), "{message}");
    assert!(message.contains("onnx/vision_model.onnx, preprocessor_config.json"), "{message}");

    let mut nearest = clip.clone();
    nearest["resample"] = json!(0);
    let unsupported = folder_with(&from, &["onnx/vision_model.onnx"], &nearest);
    let message = failed_start(&[("CLIPFN_MODEL", unsupported.path().to_str().unwrap())]);
    assert!(message.contains("preprocessor_config.json") && message.contains("resample=0"), "{message}");

    let mut wrong_size = clip.clone();
    wrong_size["crop_size"] = json!(192);
    let mismatched = folder_with(&from, &["onnx/vision_model.onnx"], &wrong_size);
    let message = failed_start(&[("CLIPFN_MODEL", mismatched.path().to_str().unwrap())]);
    assert!(message.contains("192x192") && message.contains("224x224"), "{message}");

    let message = failed_start(&[("CLIPFN_PRECISION", "fp16")]);
    assert!(message.contains("CLIPFN_PRECISION") && message.contains("clip-test.onnx"), "{message}");
}

#[test]
fn preprocessing_follows_the_folder_against_pillow() {
    let mut photos = camera_photos(4);
    photos.push(Path::new(&setup_var("CLIPFN_PILLOW_IMAGES_DIR")).join("hopper_orientation_6.jpg"));
    // The generated folder: shortest edge 208, center crop 192, bilinear, mean and std 0.5.
    let folder = setup_var("CLIPFN_TEST_FOLDER_192");
    let fp32 = format!("{folder}/onnx/vision_model.onnx");
    let flags = ["--size", "208", "--crop", "192", "--resample", "bilinear", "--mean", "0.5,0.5,0.5"];
    let pillow = reference_embeddings_with(&fp32, &[&flags[..], &["--std", "0.5,0.5,0.5"]].concat(), &photos);
    let clip_numbers = reference_embeddings_with(&fp32, &["--size", "192"], &photos);
    for normalize in ["cpu", "model"] {
        let envs = [("CLIPFN_PRECISION", "fp32"), ("CLIPFN_NORMALIZE", normalize)];
        let (model, embeddings) = embed_with(&folder, &envs, &photos);
        assert_eq!(model["image_size"], 192, "{model}");
        for (photo, ours) in photos.iter().zip(&embeddings) {
            let similarity = cosine(ours, &pillow[photo]);
            assert!(similarity >= 0.99, "{normalize} {}: cosine {similarity} to Pillow", file_name(photo));
        }
        // Had CLIP's numbers been used, the test model would have said so.
        let worst = photos.iter().zip(&embeddings).map(|(p, e)| cosine(e, &clip_numbers[p])).fold(1.0, f32::min);
        assert!(worst < 0.99, "CLIP's numbers give the same embeddings (cosine {worst}): the check is blind");
    }

    // SigLIP-style: both sides squashed to the input size, no crop, other statistics.
    let squash = json!({
        "do_normalize": true, "do_rescale": true, "do_resize": true, "resample": 3,
        "image_mean": [0.4, 0.5, 0.6], "image_std": [0.2, 0.3, 0.25], "size": {"height": 192, "width": 192}
    });
    let siglip = folder_with(&folder, &["onnx/vision_model.onnx"], &squash);
    let (_, embeddings) = embed_with(siglip.path().to_str().unwrap(), &[], &photos);
    let flags = ["--squash", "--size", "192", "--crop", "0", "--mean", "0.4,0.5,0.6", "--std", "0.2,0.3,0.25"];
    let pillow = reference_embeddings_with(&fp32, &flags, &photos);
    for (photo, ours) in photos.iter().zip(&embeddings) {
        let similarity = cosine(ours, &pillow[photo]);
        assert!(similarity >= 0.99, "squash {}: cosine {similarity} to Pillow", file_name(photo));
    }
}

#[test]
fn a_folder_loads_from_a_bucket_prefix() {
    let data = tempfile::tempdir().unwrap();
    let folder = Path::new(&setup_var("CLIPFN_TEST_FOLDER")).to_path_buf();
    let bucket = data.path().join("models/clip-test");
    std::fs::create_dir_all(bucket.join("onnx")).unwrap();
    for file in ["onnx/vision_model.onnx", "onnx/vision_model_quantized.onnx", "preprocessor_config.json"] {
        std::fs::copy(folder.join(file), bucket.join(file)).unwrap();
    }
    let (_gcs, port) = start_fake_gcs(data.path(), None);
    let store = tempfile::tempdir().unwrap();
    let server = gcs_env(ServerConfig::local(store.path()), port).env("CLIPFN_MODEL", "gs://models/clip-test/").start();
    let model = &server.get("/readyz").1["model"];
    assert_eq!(
        (model["id"].as_str(), model["file"].as_str()),
        (Some("clip-test"), Some("onnx/vision_model_quantized.onnx"))
    );
}

/// The test folder's vision files plus the multilingual text tower as its int8 variant, an fp32
/// text file that cannot load (so the rule's pick is what runs) and the tokenizer.json.
fn folder_with_text() -> tempfile::TempDir {
    let from = setup_var("CLIPFN_TEST_FOLDER");
    let dir = folder_with(&from, &["onnx/vision_model.onnx", "onnx/vision_model_fp16.onnx"], &Value::Null);
    let link = |from: String, to: &str| std::os::unix::fs::symlink(from, dir.path().join(to)).unwrap();
    link(setup_var("CLIPFN_TEST_MULTILINGUAL_MODEL"), "onnx/text_model_quantized.onnx");
    link(setup_var("CLIPFN_TEST_MULTILINGUAL_TOKENIZER"), "tokenizer.json");
    std::fs::write(dir.path().join("onnx/text_model.onnx"), "not a model").unwrap();
    dir
}

#[test]
fn a_folder_with_a_text_tower_serves_text_with_no_text_settings() {
    let dir = folder_with_text();
    let folder = dir.path().to_str().unwrap();
    let store = tempfile::tempdir().unwrap();
    let server = ServerConfig::local(store.path()).env("CLIPFN_MODEL", folder).start();
    let (_, ready) = server.get("/readyz");
    let text = &ready["text_model"];
    assert_eq!((&text["id"], &text["tokenizer"]), (&json!(file_name(dir.path())), &json!("tokenizer.json")), "{ready}");
    let (status, body) = server.post_json("/v1/embed", &json!({"texts": ["바다 일몰", "a photo of a dog"]}));
    assert_eq!(status, 200, "{body}");
    let vector = |body: &Value| -> Vec<f32> {
        body["data"][0]["embedding"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect()
    };
    let from_folder = vector(&body);
    drop(server);

    // The same tower named on its own gives the same embedding.
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_MULTILINGUAL_MODEL"))
        .env("CLIPFN_TEXT_TOKENIZER", &setup_var("CLIPFN_TEST_MULTILINGUAL_TOKENIZER"))
        .start();
    let (_, body) = server.post_json("/v1/embed", &json!({"texts": ["바다 일몰"]}));
    assert!(cosine(&vector(&body), &from_folder) > 0.9999, "{body}");
    drop(server);

    // Explicit settings override the folder: CLIP's text tower with its built-in BPE.
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_MODEL", folder)
        .env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_TEXT_MODEL"))
        .start();
    let text = server.get("/readyz").1["text_model"].clone();
    assert_eq!((&text["id"], &text["tokenizer"]), (&json!("clip-text-test"), &json!("clip-bpe")), "{text}");
}

#[test]
fn a_folder_text_tower_follows_the_precision_rule() {
    let dir = folder_with_text();
    // fp16 exists for the vision tower only: the text tower refuses, naming what it found.
    let message = failed_start(&[("CLIPFN_MODEL", dir.path().to_str().unwrap()), ("CLIPFN_PRECISION", "fp16")]);
    assert!(message.contains("text_model") && message.contains("text_model_quantized.onnx"), "{message}");
}

/// Immich's model cache, as tools/models/immich.py generates it (`clip/ViT-B-32__openai`):
/// `visual/model.onnx` with open_clip's `preprocess_cfg.json` (side 192, mean and std 0.5, not
/// CLIP's), `textual/model.onnx` (int32 ids) with CLIP's BPE as `tokenizer.json`.
#[test]
fn an_immich_folder_is_read_in_immich_layout() {
    let photos = camera_photos(3);
    let folder = setup_var("CLIPFN_TEST_IMMICH_CLIP");
    let visual = format!("{folder}/visual/model.onnx");
    let flags = ["--size", "192", "--crop", "192", "--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5"];
    let pillow = reference_embeddings_with(&visual, &flags, &photos);
    let clip_numbers = reference_embeddings_with(&visual, &["--size", "192"], &photos);
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path()).env("CLIPFN_MODEL", &folder).start();
    let ready = server.get("/readyz").1;
    let (model, text) = (&ready["model"], &ready["text_model"]);
    assert_eq!(
        (&model["id"], &model["file"], &model["precision"]),
        (&json!("ViT-B-32__openai"), &json!("visual/model.onnx"), &json!("fp32")),
        "{ready}"
    );
    assert_eq!(
        (&model["image_size"], &text["id"], &text["tokenizer"]),
        (&json!(192), &json!("ViT-B-32__openai"), &json!("tokenizer.json")),
        "{ready}"
    );
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.embed(&keys);
    assert_eq!(status, 200, "{body}");
    for (i, photo) in photos.iter().enumerate() {
        let ours = item(&body, i).unwrap();
        let similarity = cosine(&ours, &pillow[photo]);
        assert!(similarity >= 0.99, "{}: cosine {similarity} to Pillow", file_name(photo));
        assert!(
            cosine(&ours, &clip_numbers[photo]) < 0.99,
            "CLIP's numbers give the same embedding: the check is blind"
        );
    }
    let texts = ["a photo of a cat", "Two DOGS,  running on the beach!", "의자 위의 고양이"];
    let text_embeddings = |server: &common::Server| {
        let (status, body) = server.post_json("/v1/embed", &json!({"texts": texts}));
        assert_eq!(status, 200, "{body}");
        (0..texts.len()).map(|i| item(&body, i).unwrap()).collect::<Vec<_>>()
    };
    let from_folder = text_embeddings(&server);
    drop(server);
    // The same tower named on its own, with clipfn's built-in BPE: the folder's tokenizer.json
    // and tokenizer_config.json (padding to 77 with the end token) give CLIP's own ids.
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_MODEL", &visual)
        .env("CLIPFN_IMAGE_SIZE", "192")
        .env("CLIPFN_TEXT_MODEL", &format!("{folder}/textual/model.onnx"))
        .start();
    assert_eq!(server.get("/readyz").1["text_model"]["tokenizer"], "clip-bpe");
    for ((text, ours), builtin) in texts.iter().zip(&from_folder).zip(text_embeddings(&server)) {
        let similarity = cosine(ours, &builtin);
        assert!(similarity > 0.9999, "{text}: cosine {similarity} between the folder's tokenizer and CLIP's BPE");
    }
}
