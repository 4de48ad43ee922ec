//! "Decode less" (issue 20): a photo whose short side lies just under a DCT scale step (864 px:
//! 216 at 1/4) can decode at the finer step (432 at 1/2), so that the resize only shrinks, or at the
//! coarser one with a small upscale. This measures both against CLIP's reference preprocessing
//! (Pillow, full decode: tools/reference.py), for bands of short sides made from the camera
//! photos, and the decode + preprocess time the coarser step saves on one thread. The decoder takes
//! the coarser step down to 90% of 224 (`decode::jpeg::scale_denom`); this is the evidence.

use std::{fmt::Write as _, path::PathBuf, time::Instant};

use clipfn::{
    decode::{DecodeOptions, decode},
    model::{ImageModel, Tower},
    preprocess::{Transform, preprocess},
};

use crate::common::{cosine, reference_embeddings, resized_jpegs, setup_var};

const SIDE: u32 = 224;

/// Full-size short sides, each just under a step: the coarser step gives 0.96, 0.90 and 0.80 of
/// 224 at 1/4, and 0.96 at 1/2.
const BANDS: [u32; 4] = [860, 806, 717, 430];

/// Decode targets that make every band take its finer step (90% of 249 is 225: the short side
/// never under 224) or its coarser one (90% of 177 is 160).
const FINE_TARGET: u32 = 249;
const COARSE_TARGET: u32 = 177;

pub struct Band {
    short_side: u32,
    /// The coarser step's short side over 224.
    fraction: f64,
    photos: usize,
    /// Decode + preprocess on one thread, ms per photo: (the finer step, the coarser step).
    ms: (f64, f64),
    /// Cosine to the reference embedding: (finer mean, finer min, coarser mean, coarser min).
    cosines: (f64, f64, f64, f64),
}

/// Embeddings of `photos` through clipfn's decode at `target` (not `decode_square`'s own: the point
/// here is to try others) and its preprocessing, one by one.
fn embed(model: &mut ImageModel, photos: &[Vec<u8>], target: u32) -> Vec<Vec<f32>> {
    let transform = Transform::clip(SIDE);
    let options = DecodeOptions { target_short_side: Some(target), ..DecodeOptions::for_input(SIDE, u64::MAX) };
    photos
        .iter()
        .map(|bytes| {
            let square = preprocess(&decode(bytes, &options).unwrap(), &transform).unwrap();
            model.run(&[&square]).unwrap().remove(0)
        })
        .collect()
}

/// Milliseconds per photo of decode + preprocess on this thread at each of `targets`, median of
/// 7 passes; the targets take turns within each pass, so that drift in the machine's speed falls
/// on both alike.
fn ms_per_photo<const N: usize>(photos: &[Vec<u8>], targets: [u32; N]) -> [f64; N] {
    let transform = Transform::clip(SIDE);
    let mut passes = [(); N].map(|_| Vec::new());
    for _ in 0..7 {
        for (target, times) in targets.iter().zip(&mut passes) {
            let options =
                DecodeOptions { target_short_side: Some(*target), ..DecodeOptions::for_input(SIDE, u64::MAX) };
            let started = Instant::now();
            for bytes in photos {
                std::hint::black_box(preprocess(&decode(bytes, &options).unwrap(), &transform).unwrap());
            }
            times.push(started.elapsed().as_secs_f64() * 1e3 / photos.len() as f64);
        }
    }
    passes.map(|mut times| {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    })
}

fn mean_and_min(xs: &[f64]) -> (f64, f64) {
    (xs.iter().sum::<f64>() / xs.len() as f64, xs.iter().copied().fold(1.0, f64::min))
}

/// Every band over copies of `camera`, through `model`: the test model (the decode quality gate's).
pub fn measure(camera: &[PathBuf], model: &mut ImageModel) -> Vec<Band> {
    let model_path = setup_var("CLIPFN_TEST_MODEL");
    let dir = tempfile::tempdir().unwrap();
    BANDS
        .iter()
        .map(|&short| {
            let to_short = |w: u32, h: u32| ((w * short).div_ceil(w.min(h)), (h * short).div_ceil(w.min(h)));
            let paths = resized_jpegs(camera, dir.path(), &format!("{short}-"), 90, to_short);
            let reference = reference_embeddings(&model_path, &paths);
            let bytes: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
            let to_reference = |embeddings: Vec<Vec<f32>>| -> Vec<f64> {
                paths.iter().zip(&embeddings).map(|(p, e)| f64::from(cosine(e, &reference[p]))).collect()
            };
            let (fine, fine_min) = mean_and_min(&to_reference(embed(model, &bytes, FINE_TARGET)));
            let (coarse, coarse_min) = mean_and_min(&to_reference(embed(model, &bytes, COARSE_TARGET)));
            let fine_step = [8, 4, 2, 1].into_iter().find(|d| short.div_ceil(*d) >= SIDE).unwrap();
            Band {
                short_side: short,
                fraction: f64::from(short.div_ceil(fine_step * 2)) / f64::from(SIDE),
                photos: paths.len(),
                ms: ms_per_photo(&bytes, [FINE_TARGET, COARSE_TARGET]).into(),
                cosines: (fine, fine_min, coarse, coarse_min),
            }
        })
        .collect()
}

pub fn write(md: &mut String, bands: &[Band]) -> std::fmt::Result {
    writeln!(
        md,
        "\n## Decode less: the coarser DCT step and a small upscale\n\nCopies of the camera photos scaled to each \
         short side (baseline JPEG, quality 90); embeddings through the test model, cosine to CLIP's reference \
         preprocessing (Pillow, full decode). Gate: mean >= 0.995 and every photo >= 0.985. Time: decode + \
         preprocess, one thread, median of 7 passes taken in turns.\n"
    )?;
    writeln!(
        md,
        "| short side | coarser step / 224 | photos | finer ms/photo | coarser ms/photo | saved | finer cosine mean / min | coarser cosine mean / min | gate | the decoder takes |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for b in bands {
        let (t, tm, c, cm) = b.cosines;
        let gate = if c >= 0.995 && cm >= 0.985 { "holds" } else { "fails" };
        let taken = if b.fraction >= 0.9 { "coarser" } else { "finer" };
        writeln!(
            md,
            "| {} | {:.2} | {} | {:.2} | {:.2} | {:.0}% | {t:.4} / {tm:.4} | {c:.4} / {cm:.4} | {gate} | {taken} |",
            b.short_side,
            b.fraction,
            b.photos,
            b.ms.0,
            b.ms.1,
            100.0 * (1.0 - b.ms.1 / b.ms.0)
        )?;
    }
    Ok(())
}
