//! Photos as users have them, end to end through the real binary: every format clipfn decodes and
//! every EXIF orientation, compared with the Pillow reference (tools/reference.py), and hostile
//! files that must each get their own error without hurting the server or the other photos.
//!
//! The files are the Pillow sdist's Tests/images, the pillow-heif sdist's tests/images and the
//! Debian wallpaper photos that tools/setup.sh fetches, plus a few that Pillow writes here for
//! cases those trees lack (a plain CMYK JPEG, a lossless WebP, PNGs with an eXIf orientation).

use crate::common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use common::{ServerConfig, camera_photos, cosine, file_name, item, reference_embeddings, setup_var, store_keyed};
use serde_json::Value;

/// Embeddings closer than this to the reference count as the same (CLIP compares by cosine).
const PARITY: f32 = 0.99;

fn pillow(name: &str) -> PathBuf {
    PathBuf::from(setup_var("CLIPFN_PILLOW_IMAGES_DIR")).join(name)
}

fn heif(name: &str) -> PathBuf {
    PathBuf::from(setup_var("CLIPFN_PHOTOS_DIR")).join("heif").join(name)
}

/// Files written by Pillow (libjpeg, libwebp, libpng) for cases the test-image trees lack.
fn generated(name: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
import sys
from PIL import Image
src, out = sys.argv[1], sys.argv[2]
# CMYK with Adobe transform 0 (pil_sample_cmyk.jpg is YCCK, transform 2).
Image.open(f"{src}/hopper.jpg").convert("CMYK").save(f"{out}/cmyk.jpg", quality=90)
Image.open(f"{src}/hopper.png").save(f"{out}/lossless.webp", lossless=True)
# The rotated pixels and EXIF block of hopper_orientation_N.jpg, as a PNG with an eXIf chunk.
for o in range(2, 9):
    jpeg = Image.open(f"{src}/hopper_orientation_{o}.jpg")
    jpeg.save(f"{out}/hopper_orientation_{o}.png", exif=jpeg.info["exif"])
"#;
        let status = Command::new(setup_var("CLIPFN_PYTHON"))
            .args(["-c", script])
            .arg(setup_var("CLIPFN_PILLOW_IMAGES_DIR"))
            .arg(dir.path())
            .status()
            .expect("running Pillow");
        assert!(status.success(), "Pillow could not write the generated test files");
        dir
    });
    dir.path().join(name)
}

/// A store holding `files` under numbered keys (names repeat across the test-image trees).
fn store_of(files: &[PathBuf]) -> (tempfile::TempDir, Vec<String>) {
    store_keyed(files, |i, file| format!("{i:03}-{}", file_name(file)))
}

fn embed_all(server: &common::Server, keys: &[String]) -> Value {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (status, body) = server.embed(&keys);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), keys.len());
    body
}

/// Embeds `files` in one request and checks every one against the Pillow reference; returns the
/// embeddings in order. All mismatches are reported together.
fn assert_parity(files: &[PathBuf]) -> Vec<Vec<f32>> {
    let (store, keys) = store_of(files);
    // Parity is about pixels, not speed: a loaded machine must not turn a slow HEVC decode into
    // `decode_failed` (the time budget has its own test below).
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_DECODE_TIMEOUT_MS", "300000")
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "300000")
        .start();
    let body = embed_all(&server, &keys);
    let reference = reference_embeddings(&setup_var("CLIPFN_TEST_MODEL"), files);
    let mut failures = Vec::new();
    let mut embeddings = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let name = file.display();
        match (item(&body, i), reference.get(file)) {
            (Ok(ours), Some(theirs)) => {
                let similarity = cosine(&ours, theirs);
                if similarity < PARITY {
                    failures.push(format!("{name}: cosine {similarity:.4} against the reference"));
                }
                embeddings.push(ours);
            }
            (Ok(_), None) => failures.push(format!("{name}: Pillow could not read it (see reference.py's stderr)")),
            (Err(code), _) => failures.push(format!("{name}: {code}: {}", body["data"][i]["error"]["message"])),
        }
    }
    assert!(failures.is_empty(), "{} of {} photos differ:\n{}", failures.len(), files.len(), failures.join("\n"));
    embeddings
}

/// Every file gets `unsupported_format`, and the log says which support is missing.
fn assert_not_built_in(files: &[PathBuf]) {
    let (store, keys) = store_of(files);
    let log = store.path().join("server.log");
    let server = ServerConfig::local(store.path()).stderr_to(&log).start();
    let body = embed_all(&server, &keys);
    for (i, file) in files.iter().enumerate() {
        assert_eq!(item(&body, i), Err("unsupported_format".to_string()), "{}", file.display());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("not built in").count(), files.len(), "{text}");
}

#[test]
fn jpeg_png_webp_gif_bmp_and_tiff_match_the_pillow_reference() {
    let progressive = camera_photos(usize::MAX).into_iter().find(|p| p.ends_with("mate_FreshFlower.jpg")).unwrap();
    assert_parity(&[
        // JPEG: baseline, progressive (a camera photo, decoded at 1/4), grayscale, CMYK, YCCK,
        // MPO (its first image), warnings in the header (extraneous bytes), 12-bit quant tables.
        pillow("hopper.jpg"),
        progressive,
        pillow("hopper_gray.jpg"),
        generated("cmyk.jpg"),
        pillow("pil_sample_cmyk.jpg"),
        pillow("sugarshack.mpo"),
        pillow("frozenpond.mpo"),
        pillow("junk_jpeg_header.jpg"),
        pillow("hopper_16bit_qtables.jpg"),
        // PNG: 8-bit RGB, 16-bit RGBA, palette, palette with tRNS, RGBA.
        pillow("hopper.png"),
        heif("non_heif/RGBA_16__128x128.png"),
        pillow("pil123p.png"),
        pillow("p_trns_single.png"),
        pillow("transparent.png"),
        // WebP: lossy, lossless, lossy with alpha, animated (first frame).
        pillow("hopper.webp"),
        generated("lossless.webp"),
        pillow("transparent.webp"),
        pillow("iss634.webp"),
        // GIF: still, animated (first frame), transparent first frame (palette colour, not black).
        pillow("hopper.gif"),
        pillow("iss634.gif"),
        pillow("first_frame_transparency.gif"),
        // BMP: plain and RLE8. TIFF.
        pillow("hopper.bmp"),
        pillow("hopper_rle8.bmp"),
        pillow("hopper.tif"),
    ]);
}

#[test]
fn every_exif_orientation_matches_the_pillow_reference() {
    let mut files = Vec::new();
    for o in 2..=8 {
        files.push(pillow(&format!("hopper_orientation_{o}.jpg")));
        files.push(pillow(&format!("hopper_orientation_{o}.webp")));
        files.push(generated(&format!("hopper_orientation_{o}.png")));
        files.push(pillow(&format!("g4_orientation_{o}.tif")));
    }
    let embeddings = assert_parity(&files);

    // Each hopper_orientation_N file stores hopper turned so that its tag turns it upright again:
    // all of them embed alike. The same files with the tag made unreadable must not, or the model
    // is blind to orientation and the checks above prove nothing.
    let store = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (2..=8)
        .map(|o| {
            let mut jpeg = std::fs::read(pillow(&format!("hopper_orientation_{o}.jpg"))).unwrap();
            let exif = jpeg.windows(6).position(|w| w == b"Exif\0\0").expect("an EXIF block");
            jpeg[exif..exif + 4].copy_from_slice(b"Nope");
            let key = format!("as_stored_{o}.jpg");
            std::fs::write(store.path().join(&key), jpeg).unwrap();
            key
        })
        .collect();
    let server = ServerConfig::local(store.path()).start();
    let body = embed_all(&server, &keys);
    for o in 2..=8 {
        let (upright, as_stored) = (&embeddings[(o - 2) * 4], item(&body, o - 2).unwrap());
        let similarity = cosine(upright, &as_stored);
        assert!(similarity < PARITY, "orientation {o}: upright and as stored embed alike ({similarity:.4})");
    }
}

/// HEIF files: an iPhone-style photo, a Xiaomi phone photo, a grid image, one rotated by `irot`,
/// 10-bit colour, alpha, a burst (its primary image).
fn heif_photos() -> Vec<PathBuf> {
    [
        "heif_other/pug.heic",
        "heif_special/xiaomi.heic",
        "heif/zPug_3.heic",
        "heif_special/guitar_cw90.hif",
        "heif/RGB_10__128x128.heif",
        "heif/RGBA_8__128x128.heif",
        "heif_other/nokia/bird_burst.heic",
    ]
    .iter()
    .map(|name| heif(name))
    .collect()
}

/// AVIF files: plain, with alpha, and all eight `irot`/`imir` combinations.
fn avif_photos() -> Vec<PathBuf> {
    let mut files = vec![pillow("avif/hopper.avif"), pillow("avif/transparency.avif")];
    for rot in 0..4 {
        for mir in 0..2 {
            files.push(pillow(&format!("avif/rot{rot}mir{mir}.avif")));
        }
    }
    files
}

#[test]
fn heic_matches_the_pillow_reference_or_says_it_is_not_built_in() {
    if cfg!(feature = "heif") {
        assert_parity(&heif_photos());
    } else {
        assert_not_built_in(&heif_photos());
    }
}

#[test]
fn avif_matches_the_pillow_reference_or_says_it_is_not_built_in() {
    if cfg!(feature = "avif") {
        let embeddings = assert_parity(&avif_photos());
        assert!(cosine(&embeddings[2], &embeddings[4]) < PARITY, "rot0mir0 and rot1mir0 embed alike");
    } else {
        assert_not_built_in(&avif_photos());
    }
}

#[test]
fn camera_photos_decoded_at_dct_scale_match_the_full_size_reference() {
    // JPEGs are decoded at 1/4 or 1/8 of their size; the reference decodes at full size.
    assert_parity(&camera_photos(usize::MAX));
}

/// What a decode reserves from CLIPFN_MAX_DECODE_BYTES: a baseline JPEG its scaled pixels, a
/// progressive one its whole-image coefficients as well, which libjpeg-turbo keeps until the last
/// scan whatever the scale.
#[test]
#[cfg(feature = "jpeg-turbo")]
fn a_progressive_jpeg_reserves_its_coefficients_and_a_baseline_one_its_scaled_pixels() {
    use clipfn::decode::{DecodeOptions, working_memory};
    let photo =
        |name: &str| std::fs::read(camera_photos(usize::MAX).into_iter().find(|p| p.ends_with(name)).unwrap()).unwrap();
    let options = DecodeOptions::for_input(224, 100_000_000);
    // 1920 x 1280, baseline: decoded at 1/4 (1280 / 8 = 160 < 224), 480 x 320 RGB.
    assert_eq!(working_memory(&photo("mate_Storm.jpg"), &options), 480 * 320 * 3);
    // 1600 x 1203, progressive 4:2:0: at 1/4, 400 x 301 RGB, plus 200 x 151 blocks of 64 2-byte
    // coefficients for Y and a quarter as many for each of Cb and Cr.
    let flower = photo("mate_FreshFlower.jpg");
    assert_eq!(working_memory(&flower, &options), 400 * 301 * 3 + 200 * 151 * 128 * 3 / 2);
    // Over the pixel limit the decode refuses the photo before it allocates: nothing to reserve.
    assert_eq!(working_memory(&flower, &DecodeOptions::for_input(224, 1_000_000)), 0);
}

/// A JPEG whose header claims 60000 x 60000 pixels: 3.6 gigapixels from a few hundred bytes.
fn jpeg_bomb() -> Vec<u8> {
    let mut jpeg = Vec::new();
    image::DynamicImage::new_rgb8(16, 16)
        .write_to(&mut std::io::Cursor::new(&mut jpeg), image::ImageFormat::Jpeg)
        .unwrap();
    let sof = jpeg.windows(2).position(|w| w == [0xFF, 0xC0]).expect("baseline SOF0");
    jpeg[sof + 5..sof + 9].copy_from_slice(&[0xEA, 0x60, 0xEA, 0x60]); // 60000 x 60000, under libjpeg's 65500
    jpeg
}

/// A real PNG of 10000 x 12000 black pixels: 120 MB of pixels in about 120 KB.
fn png_bomb() -> Vec<u8> {
    let mut png = Vec::new();
    let encoder = image::codecs::png::PngEncoder::new_with_quality(
        &mut png,
        image::codecs::png::CompressionType::Fast,
        image::codecs::png::FilterType::NoFilter,
    );
    image::ImageEncoder::write_image(encoder, &vec![0; 10_000 * 12_000], 10_000, 12_000, image::ExtendedColorType::L8)
        .unwrap();
    png
}

#[test]
fn hostile_files_get_their_own_errors_and_good_photos_their_embeddings() {
    let photos = camera_photos(2);
    let store = tempfile::tempdir().unwrap();
    let root = store.path();
    let write = |key: &str, bytes: &[u8]| std::fs::write(root.join(key), bytes).unwrap();
    let copy = |key: &str, from: &Path| std::fs::copy(from, root.join(key)).map(drop).unwrap();
    copy("good.jpg", &photos[0]);
    copy("good.png", &pillow("hopper.png"));
    copy("good.gif", &pillow("hopper.gif"));
    let camera = std::fs::read(&photos[1]).unwrap();
    write("half.jpg", &camera[..camera.len() / 2]);
    copy("truncated_jpeg.jpg", &pillow("truncated_jpeg.jpg"));
    write("bomb.jpg", &jpeg_bomb());
    write("bomb.png", &png_bomb());
    write("error-page.jpg", b"<!DOCTYPE html><html><head><title>403 Forbidden</title></head></html>");
    write("empty.heic", b"");
    let mut video = vec![0, 0, 0, 0x18];
    video.extend_from_slice(b"ftypisom\0\0\x02\0isomiso2mp41\0\0\0\x08free");
    write("video.heic", &video);
    let heic = std::fs::read(heif("heif_other/pug.heic")).unwrap();
    write("half.heic", &heic[..heic.len() / 2]);
    copy("corrupted.heic", &heif("heif_corrupted/corrupted.heic"));
    copy("200MP.heic", &heif("heif_special/200MP.heic"));
    let server = ServerConfig::local(root).start();

    let heif_or = |code| -> Result<(), &str> { Err(if cfg!(feature = "heif") { code } else { "unsupported_format" }) };
    // libheif decodes the tiles that are there, as pillow-heif (the reference) does.
    let heif_ok = if cfg!(feature = "heif") { Ok(()) } else { Err("unsupported_format") };
    let cases = [
        ("good.jpg", Ok(())),
        ("half.jpg", Err("decode_failed")),
        ("truncated_jpeg.jpg", Err("decode_failed")),
        ("bomb.jpg", Err("too_large")),
        ("bomb.png", Err("too_large")),
        ("good.png", Ok(())),
        ("error-page.jpg", Err("unsupported_format")),
        ("empty.heic", Err("unsupported_format")),
        ("video.heic", Err("unsupported_format")),
        ("half.heic", heif_ok),
        ("corrupted.heic", heif_or("decode_failed")),
        ("200MP.heic", heif_or("too_large")),
        ("good.gif", Ok(())),
        ("good.jpg", Ok(())),
    ];
    let keys: Vec<String> = cases.iter().map(|(key, _)| key.to_string()).collect();
    let body = embed_all(&server, &keys);
    for (i, (key, expected)) in cases.iter().enumerate() {
        let got = item(&body, i);
        let message = &body["data"][i]["error"]["message"];
        match (&got, expected) {
            (Ok(_), Ok(())) => {}
            (Err(code), Err(want)) => assert_eq!(code, want, "{key}: {message}"),
            _ => panic!("{key}: got {:?} ({message}), want {expected:?}", got.map(|_| "an embedding")),
        }
    }
    assert_eq!(item(&body, 0).unwrap(), item(&body, cases.len() - 1).unwrap(), "same photo, same embedding");
    assert_eq!(server.get("/readyz").0, 200, "hostile files must not hurt readiness");
    let again = embed_all(&server, &["good.png".to_string()]);
    assert!(item(&again, 0).is_ok(), "the server still embeds afterwards: {again}");
}

#[test]
fn decoding_has_a_time_budget() {
    let photos = camera_photos(1);
    let store = tempfile::tempdir().unwrap();
    std::fs::copy(&photos[0], store.path().join("photo.jpg")).unwrap();
    let log = store.path().join("server.log");
    let server = ServerConfig::local(store.path()).env("CLIPFN_DECODE_TIMEOUT_MS", "1").stderr_to(&log).start();
    let body = embed_all(&server, &["photo.jpg".to_string()]);
    assert_eq!(item(&body, 0), Err("decode_failed".to_string()), "{body}");
    assert_eq!(server.get("/readyz").0, 200);
    // The client gets the code's fixed message; the log says it was the time budget.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("1 ms budget") {
        assert!(std::time::Instant::now() < until, "no time budget in the log");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
