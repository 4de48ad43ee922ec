//! The report: `report.md`, its sections in order with their ratios and goals (sections 5, 7 and 8,
//! and 9 written by `text`, `cold_start` and `towers`), and `throughput.svg`, the raw-inference chart.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use plotters::prelude::*;

use crate::{Knobs, Results, alone::RawPoint, cold_start, common, load::PrecisionRun, towers};

/// Writes `report.md` and `throughput.svg` to the knobs' folder, and the report to stdout.
pub fn write(knobs: &Knobs, photos: &[PathBuf], results: &Results) -> anyhow::Result<()> {
    let mut md = String::new();
    header(&mut md, knobs, photos)?;
    alone(&mut md, results)?;
    end_to_end(&mut md, knobs, results)?;
    precision(&mut md, knobs, results)?;
    match &results.text {
        Some(text) => text.write(&mut md)?,
        None => writeln!(md, "\n## 5. Text tower\n\nSkipped: no CLIPFN_BENCH_TEXT_MODEL (tools/setup.sh --bench).")?,
    }
    backfill(&mut md, knobs, results)?;
    let e2e = &results.end_to_end;
    cold_start::write(&mut md, &results.cold_starts, knobs.warm_up_batches(), (e2e.peak_rss, e2e.peak_rss_64))?;
    match results.towers.as_slice() {
        [] => writeln!(md, "\n## 9. Image towers\n\nSkipped: no CLIPFN_BENCH_SIGLIP_MODEL (tools/setup.sh --bench).")?,
        towers => towers::write(&mut md, towers)?,
    }
    writeln!(md, "\nChart: throughput.svg (images/s and ms per batch by batch size, raw inference).")?;
    std::fs::write(knobs.out.join("report.md"), &md)?;
    chart(&results.raw, &knobs.out.join("throughput.svg"))?;
    println!("{md}");
    eprintln!("wrote {}", knobs.out.join("report.md").display());
    Ok(())
}

/// Raw batch-64 images/s (section 1), the figure the ratios divide by.
fn raw64(raw: &[RawPoint]) -> f64 {
    raw.iter().find(|p| p.batch == 64).map_or(f64::NAN, |p| p.images_per_s)
}

/// The title, and the machine, model and photos.
fn header(md: &mut String, Knobs { provider, runs, model, .. }: &Knobs, photos: &[PathBuf]) -> anyhow::Result<()> {
    let mean_mp = photos
        .iter()
        .filter_map(|p| image::image_dimensions(p).ok())
        .map(|(w, h)| f64::from(w) * f64::from(h) / 1e6)
        .sum::<f64>()
        / photos.len() as f64;
    writeln!(md, "# clipfn benchmark\n")?;
    writeln!(
        md,
        "Machine: {} cores, {}. Model: {} (ViT-B/32 architecture, random weights), {provider} execution provider. Photos: {} real camera JPEGs, mean {mean_mp:.1} MP. Medians of {runs} runs.\n",
        std::thread::available_parallelism()?.get(),
        cpu_name(),
        Path::new(&model).file_name().unwrap_or_default().to_string_lossy(),
        photos.len()
    )?;
    Ok(())
}

/// Sections 1 (raw inference) and 2 (preprocessing).
fn alone(md: &mut String, results: &Results) -> std::fmt::Result {
    let crate::Preprocessing { ours, pillow, pillow_draft } = results.preprocessing;
    writeln!(
        md,
        "## 1. Raw inference (ONNX Runtime session alone)\n\n| batch | images/s | ms per batch |\n|---|---|---|"
    )?;
    for p in &results.raw {
        writeln!(md, "| {} | {:.1} | {:.0} |", p.batch, p.images_per_s, p.ms_per_batch)?;
    }
    writeln!(
        md,
        "\n## 2. Preprocessing, one core (decode + resize + normalise, no fetch)\n\n| implementation | photos/s |\n|---|---|"
    )?;
    writeln!(
        md,
        "| clipfn | {ours:.1} |\n| Pillow, CLIP preprocessing (full decode) | {pillow:.1} |\n| Pillow with JPEG draft (DCT-scaled decode) | {pillow_draft:.1} |"
    )
}

/// Section 3 (end to end, batch fill) and the ratios of sections 1 to 3.
fn end_to_end(md: &mut String, Knobs { vus, secs, .. }: &Knobs, results: &Results) -> std::fmt::Result {
    let crate::EndToEnd { seed, closed, fill, .. } = &results.end_to_end;
    let crate::Preprocessing { ours, pillow, pillow_draft } = results.preprocessing;
    writeln!(md, "\n## 3. End to end (release server, loopback, photos from fake-gcs-server)\n")?;
    writeln!(
        md,
        "| load | requests | images embedded | images/s | p50 s | p95 s | p99 s | errors |\n|---|---|---|---|---|---|---|---|"
    )?;
    writeln!(md, "{}", seed.row(&format!("seed shape: {vus} VUs, 30-50 photos, 3-5 s think, {secs} s")))?;
    writeln!(md, "{}", closed.row(&format!("closed loop, concurrency 2, 30-50 photos, {secs} s")))?;
    writeln!(
        md,
        "\nBatch fill over both runs (batches by size bucket, from /metrics):\n\n| batch size <= | batches |\n|---|---|"
    )?;
    for (le, n) in fill {
        writeln!(md, "| {le} | {n} |")?;
    }
    let raw64 = raw64(&results.raw);
    let e2e = closed.images as f64 / closed.seconds;
    writeln!(md, "\n## Ratios (same run)\n")?;
    writeln!(
        md,
        "- end-to-end images/s (closed loop) / raw batch-64 images/s = {e2e:.1} / {raw64:.1} = **{:.2}** (target >= 0.90)",
        e2e / raw64
    )?;
    writeln!(
        md,
        "- clipfn preprocessing / Pillow (full decode) per core = {ours:.1} / {pillow:.1} = **{:.2}** (target >= 3)",
        ours / pillow
    )?;
    writeln!(md, "- clipfn preprocessing / Pillow with draft per core = **{:.2}**", ours / pillow_draft)
}

/// Section 4: each precision end to end, the variant against the baseline, and each against its CPU
/// ceiling.
fn precision(md: &mut String, Knobs { provider, server_batch, .. }: &Knobs, results: &Results) -> anyhow::Result<()> {
    let crate::Precision { by_precision, raw_by_precision } = &results.precision;
    let ours = results.preprocessing.ours;
    // The first precision is the baseline (fp32), the second the variant measured against it.
    let (base, variant) = (&by_precision[0], &by_precision[1]);
    let (b, v) = (&base.precision, &variant.precision);
    // The goals are for int8 on CPU; other pairs are reported without one.
    let goal = |text: &str| if v == "int8" { format!(" (goal {text})") } else { String::new() };
    let rate = |r: &PrecisionRun| r.load.images as f64 / r.load.seconds;
    let cosines: Vec<f64> =
        base.embeddings.iter().zip(&variant.embeddings).map(|(a, b)| f64::from(common::cosine(a, b))).collect();
    let min_cosine = cosines.iter().copied().fold(1.0, f64::min);
    writeln!(md, "\n## 4. Precision: the model folder's {b} and {v} files, end to end on {provider}\n")?;
    writeln!(
        md,
        "| precision | file | requests | images embedded | images/s | p50 s | p95 s | p99 s | errors | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for r in by_precision {
        let row = r.load.row(&r.precision);
        let row = row.replacen(&format!("| {} |", r.precision), &format!("| {} | {} |", r.precision, r.file), 1);
        writeln!(md, "{row} {:.0} |", r.peak_rss_mib)?;
    }
    writeln!(
        md,
        "\n- {v} / {b} end-to-end images/s = {:.1} / {:.1} = **{:.2}x**{}",
        rate(variant),
        rate(base),
        rate(variant) / rate(base),
        goal(">= 2.2")
    )?;
    writeln!(
        md,
        "- {v} / {b} peak RSS = {:.0} / {:.0} MiB = **{:.2}**{}",
        variant.peak_rss_mib,
        base.peak_rss_mib,
        variant.peak_rss_mib / base.peak_rss_mib,
        goal("<= 0.5")
    )?;
    writeln!(
        md,
        "- {v} embeddings' cosine to {b}'s over {} photos: min **{min_cosine:.4}**, mean {:.4}{}",
        cosines.len(),
        cosines.iter().sum::<f64>() / cosines.len() as f64,
        goal(">= 0.99")
    )?;
    let cores = std::thread::available_parallelism()?.get() as f64;
    writeln!(
        md,
        "\nThe CPU ceiling at a precision is `1 / (1/raw + decode_per_photo/cores)`: raw is that file's session \
         alone at batch {server_batch} (measured just after its server stopped), decode_per_photo is section 2's \
         1/{ours:.1} s, and there are {cores} cores.\n"
    )?;
    for (r, raw) in by_precision.iter().zip(raw_by_precision) {
        let ceiling = 1.0 / (1.0 / raw + 1.0 / (ours * cores));
        writeln!(
            md,
            "- {}: raw {raw:.1} images/s, ceiling {ceiling:.1}; end to end / ceiling = {:.1} / {ceiling:.1} = **{:.2}** (goal >= 0.9)",
            r.precision,
            rate(r),
            rate(r) / ceiling
        )?;
    }
    Ok(())
}

/// Section 6: the backfill, and its ratio to raw inference.
fn backfill(md: &mut String, Knobs { server_batch, .. }: &Knobs, results: &Results) -> std::fmt::Result {
    let crate::Backfill { photos: backfilled, rate: backfill_rate } = results.backfill;
    let raw64 = raw64(&results.raw);
    writeln!(
        md,
        "\n## 6. Backfill (`clipfn backfill`, release, one task, batch {server_batch}, local store, Parquet out)\n\n| photos | photos/s |\n|---|---|\n| {backfilled} | {backfill_rate:.1} |"
    )?;
    writeln!(
        md,
        "\n- backfill photos/s / raw batch-64 images/s = {backfill_rate:.1} / {raw64:.1} = **{:.2}** (target >= 0.95)",
        backfill_rate / raw64
    )
}

fn chart(points: &[RawPoint], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(450);
    let max_rate = points.iter().map(|p| p.images_per_s).fold(0.0, f64::max) * 1.2;
    let max_ms = points.iter().map(|p| p.ms_per_batch).fold(0.0, f64::max) * 1.2;
    for (area, title, max, value, label) in [
        (&left, "Throughput by batch size", max_rate, 0usize, "images/s"),
        (&right, "Latency of one batch", max_ms, 1, "ms per batch"),
    ] {
        let mut c = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..70f64, 0f64..max)?;
        c.configure_mesh().x_desc("batch size").y_desc(label).draw()?;
        let series: Vec<(f64, f64)> =
            points.iter().map(|p| (p.batch as f64, if value == 0 { p.images_per_s } else { p.ms_per_batch })).collect();
        c.draw_series(LineSeries::new(series.clone(), &BLUE))?;
        c.draw_series(series.iter().map(|&(x, y)| Circle::new((x, y), 4, BLUE.filled())))?;
    }
    root.present()?;
    Ok(())
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
