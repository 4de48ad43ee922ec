//! Photo bytes -> model input, as the server runs it on every fetched object: sniff, header
//! checks, decode at the DCT scale for a 224 input, orientation and EXIF metadata, resize, crop,
//! normalise; and the bytes read as an EXIF block on their own (`decode::metadata::from_exif`),
//! so that IFD counts and offsets of every kind reach the EXIF parser.
//!
//! A finding is anything that would take the process down or stall it: a crash or memory error
//! (the C decoders too), an abort, a panic in clipfn's own code, a timeout, running out of memory,
//! or a photo that decodes but cannot be preprocessed. Panics inside the pure-Rust decoder crates
//! are known (`tiff` has several) and contained where the server contains them, on its decode
//! threads (src/pipeline/decode_pool.rs); here the same `catch_unwind` stands in for them, and
//! they are not reported again.
#![no_main]

use clipfn::{
    decode::{DecodeOptions, decode},
    model::{ImageModelInfo, Layout, PixelBatch, Pixels},
    preprocess::{Transform, preprocess},
    settings::{Device, Weights},
};
use libfuzzer_sys::fuzz_target;

const SIZE: u32 = 224;
/// Lower than the server's default (100 MP) so that one input stays within libFuzzer's RSS limit.
const MAX_PIXELS: u64 = 16_000_000;

fuzz_target!(
    init: {
        // libfuzzer-sys aborts on every panic, even one that is caught. Keep that for panics in
        // this repository's code and let the ones raised inside dependencies reach the
        // catch_unwind that contains them (an uncaught one still aborts in libfuzzer-sys).
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_dependency = info.location().is_some_and(|l| l.file().contains("/.cargo/registry/"));
            if !in_dependency {
                default_hook(info);
                std::process::abort();
            }
        }));
    },
    |data: &[u8]| {
        let metadata = clipfn::decode::metadata::from_exif(data);
        if let Some(taken_at) = &metadata.taken_at {
            let _ = (taken_at.iso8601(), taken_at.utc_millis());
        }
        if let Some(place) = metadata.location {
            assert!(place.lat.abs() <= 90.0 && place.lon.abs() <= 180.0, "a place off the globe");
        }
        let decoded = std::panic::catch_unwind(|| decode(data, &DecodeOptions::for_input(SIZE, MAX_PIXELS)));
        let Ok(Ok(decoded)) = decoded else { return };
        let (width, height) = decoded.image.dimensions();
        assert!(width > 0 && height > 0, "decoded an empty image");
        let (full_w, full_h) = decoded.full_size;
        assert!(u64::from(full_w) * u64::from(full_h) <= MAX_PIXELS, "pixel limit not enforced");
        let denom = decoded.scale_denom;
        assert_eq!((width, height), (full_w.div_ceil(denom), full_h.div_ceil(denom)), "size and scale disagree");
        let transform = Transform::clip(SIZE);
        let square = preprocess(&decoded, &transform).expect("a decoded photo must preprocess");
        let mut batch = PixelBatch::new(&model(transform.clone()));
        let Pixels::NormalizedNchw(slot) = batch.lay_out(&[&square], &transform) else { unreachable!("asked for NCHW") };
        assert_eq!(slot.len(), 3 * (SIZE * SIZE) as usize);
        assert!(slot.iter().all(|v| v.is_finite()), "non-finite model input");
    }
);

/// The image tower's description, as far as laying out its batch goes: one photo, normalised on
/// the host.
fn model(preprocessing: Transform) -> ImageModelInfo {
    ImageModelInfo {
        id: "fuzz".into(),
        file: "fuzz.onnx".into(),
        precision: Weights::Fp32,
        provider: Device::Cpu,
        fallback_reason: None,
        input_name: "pixel_values".into(),
        output_name: "image_embeds".into(),
        image_size: SIZE,
        preprocessing,
        input_layout: Layout::NormalizedNchw,
        dim: 512,
        batch_size: 1,
        warm_up_batches: vec![1],
    }
}
