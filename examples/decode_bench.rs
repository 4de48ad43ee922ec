//! Decode and preprocess timings per format: the scaled decode the server does against a full
//! decode, one thread, median of several runs per file.
//!
//!   cargo run --release --features heif,avif --example decode_bench -- [--runs N] [--size S] FILE|DIR...
//!
//! For each file: decode (`DecodeOptions::for_input(S)`: JPEG at its DCT scale, as
//! `preprocess::decode_square` does), then preprocess into the S x S square, each timed on its own;
//! and the same with `DecodeOptions::full_size`, which is what the reference (Pillow) does. The last column is the `image` crate's own full-size decode (zune-jpeg for JPEG,
//! what clipfn used before libjpeg-turbo). Files are read into memory first, so disk I/O is not
//! timed. Per format it prints the mean over files of each file's median.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use clipfn::{
    decode::{DecodeOptions, Decoded, decode},
    preprocess::{Transform, preprocess},
};

#[derive(Default)]
struct Sums {
    files: usize,
    megapixels: f64,
    decode: [f64; 2],
    preprocess: [f64; 2],
    image_crate: f64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut runs, mut size, mut paths) = (5usize, 224u32, Vec::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--size" => size = args.next().and_then(|v| v.parse().ok()).expect("--size S"),
            _ => paths.push(PathBuf::from(arg)),
        }
    }
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()).collect();
            entries.sort();
            files.extend(entries.into_iter().filter(|p| p.is_file()));
        } else {
            files.push(path);
        }
    }
    let limit = 100_000_000;
    let modes = [("scaled", DecodeOptions::for_input(size, limit)), ("full", DecodeOptions::full_size(limit))];
    let transform = Transform::clip(size);
    let mut per_format: BTreeMap<String, Sums> = BTreeMap::new();
    println!(
        "{:<44} {:>6} {:>7}  {:>8} {:>8}  {:>8} {:>8}  {:>8}",
        "file", "fmt", "MP", "dec_scl", "dec_full", "pre_scl", "pre_full", "image"
    );
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let mut decode_ms = [0.0; 2];
        let mut preprocess_ms = [0.0; 2];
        let mut info = None;
        for (m, (_, options)) in modes.iter().enumerate() {
            let mut decode_times = Vec::new();
            let mut preprocess_times = Vec::new();
            for _ in 0..runs {
                let start = Instant::now();
                let Ok(decoded) = decode(&bytes, options) else { break };
                decode_times.push(start.elapsed());
                let start = Instant::now();
                std::hint::black_box(preprocess(&decoded, &transform).unwrap());
                preprocess_times.push(start.elapsed());
                info.get_or_insert_with(|| summary(&decoded));
            }
            if decode_times.is_empty() {
                break;
            }
            decode_ms[m] = median_ms(&mut decode_times);
            preprocess_ms[m] = median_ms(&mut preprocess_times);
        }
        let Some((format, megapixels)) = info else {
            println!("{:<44} not decodable", name(file));
            continue;
        };
        let mut image_times: Vec<Duration> = (0..runs)
            .filter_map(|_| {
                let start = Instant::now();
                let image = image::load_from_memory(&bytes).ok()?.into_rgb8();
                std::hint::black_box(image);
                Some(start.elapsed())
            })
            .collect();
        let image_ms = if image_times.is_empty() { f64::NAN } else { median_ms(&mut image_times) };
        println!(
            "{:<44} {format:>6} {megapixels:>7.2}  {:>8.2} {:>8.2}  {:>8.2} {:>8.2}  {image_ms:>8.2}",
            name(file),
            decode_ms[0],
            decode_ms[1],
            preprocess_ms[0],
            preprocess_ms[1]
        );
        let sums = per_format.entry(format).or_default();
        sums.files += 1;
        sums.megapixels += megapixels;
        sums.image_crate += image_ms;
        for m in 0..2 {
            sums.decode[m] += decode_ms[m];
            sums.preprocess[m] += preprocess_ms[m];
        }
    }
    println!("\nper format: mean over files of the median of {runs} runs, ms (1 thread, model input {size})");
    println!(
        "{:<6} {:>5} {:>6}  {:>10} {:>10} {:>10}  {:>10} {:>10} {:>10}  {:>7}  {:>11}",
        "format",
        "files",
        "MP",
        "dec_scaled",
        "pre_scaled",
        "total",
        "dec_full",
        "pre_full",
        "total",
        "speedup",
        "image_crate"
    );
    for (format, s) in &per_format {
        let n = s.files as f64;
        let (scaled, full) = ((s.decode[0] + s.preprocess[0]) / n, (s.decode[1] + s.preprocess[1]) / n);
        println!(
            "{format:<6} {:>5} {:>6.1}  {:>10.2} {:>10.2} {:>10.2}  {:>10.2} {:>10.2} {:>10.2}  {:>6.2}x  {:>11.2}",
            s.files,
            s.megapixels / n,
            s.decode[0] / n,
            s.preprocess[0] / n,
            scaled,
            s.decode[1] / n,
            s.preprocess[1] / n,
            full,
            full / scaled,
            s.image_crate / n
        );
    }
}

fn summary(decoded: &Decoded) -> (String, f64) {
    let (w, h) = decoded.full_size;
    (decoded.format.to_string(), f64::from(w) * f64::from(h) / 1e6)
}

fn median_ms(times: &mut [Duration]) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e3
}

fn name(path: &std::path::Path) -> String {
    let name = path.file_name().unwrap().to_string_lossy();
    if name.len() > 44 { format!("...{}", &name[name.len() - 41..]) } else { name.into_owned() }
}
