//! Section 5, the text tower: the tokenizer on one core, the text session alone at batch 1 and 64,
//! and a one-line search query's latency over HTTP while a request of 256 photos waits for the model.

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use clipfn::{
    model::{ImageModel, ModelData, Runtime, TextModel, Tower},
    settings::Settings,
    tokenize::{Tokenizer, Tokens},
};

use crate::{
    common::{self, ServerConfig},
    stats::{median, percentile},
};

pub struct TextResult {
    tokenizer_per_s: f64,
    /// (batch, texts/s, ms per batch)
    embeddings: Vec<(usize, f64, f64)>,
    /// Raw batch-64 time of the image session alone (section 1).
    image_batch_ms: f64,
    backlog: Backlog,
}

impl TextResult {
    pub fn write(&self, md: &mut String) -> std::fmt::Result {
        writeln!(md, "\n## 5. Text tower (ViT-B/32 text architecture, random weights)\n")?;
        writeln!(md, "Tokenizer (clean-up + BPE, one core): **{:.0} texts/s**.\n", self.tokenizer_per_s)?;
        writeln!(md, "| batch | texts/s | ms per batch |\n|---|---|---|")?;
        for (batch, rate, ms) in &self.embeddings {
            writeln!(md, "| {batch} | {rate:.1} | {ms:.1} |")?;
        }
        let stats = |xs: &[f64]| {
            let mut xs = xs.to_vec();
            xs.sort_by(f64::total_cmp);
            if xs.is_empty() { (f64::NAN, f64::NAN) } else { (percentile(&xs, 0.5), xs[xs.len() - 1]) }
        };
        let b = &self.backlog;
        let ((idle_p50, idle_max), (busy_p50, busy_max)) = (stats(&b.idle_ms), stats(&b.busy_ms));
        writeln!(
            md,
            "\nOne-line search query over HTTP (`/v1/embed` with one new text), end to end:\n\n| while | queries | p50 ms | max ms |\n|---|---|---|---|"
        )?;
        writeln!(md, "| idle | {} | {idle_p50:.1} | {idle_max:.1} |", b.idle_ms.len())?;
        writeln!(
            md,
            "| one request of 256 photos in flight, {} photos queued for the model when sent | {} | {busy_p50:.1} | {busy_max:.1} |",
            b.queued.iter().map(|q| format!("{q:.0}")).collect::<Vec<_>>().join(", "),
            b.busy_ms.len()
        )?;
        // In a single queue the query would wait for the batch running and every queued photo.
        let fifo_ms: Vec<String> =
            b.queued.iter().map(|q| format!("{:.0}", ((q / 64.0).ceil() + 1.0) * b.batch_ms)).collect();
        writeln!(
            md,
            "\nImage batches (up to 64 photos) took {:.0} ms on average on the server during the backlog (decoders sharing the cores; {:.0} ms for the session alone in section 1). A query waits for the batch already running, then runs ahead of the queued photos; behind them, in one queue, it would have waited about {} ms.",
            b.batch_ms,
            self.image_batch_ms,
            fifo_ms.join(" and ")
        )
    }
}

/// Section 5: the tokenizer, the text session alone, and a query against an image backlog.
#[allow(clippy::too_many_arguments)]
pub fn text_tower(
    (runtime, image): (&Runtime, &ImageModel),
    settings: &Settings,
    text_model: &str,
    image_model: &str,
    image_batch_ms: f64,
    keys: &[String],
    gcs_port: u16,
    provider: &str,
    runs: usize,
) -> anyhow::Result<TextResult> {
    let queries: Vec<String> = (0..2000)
        .map(|i| {
            let things = ["beach at sunset", "my dog in the snow", "birthday cake", "Tokyo at night", "서울 야경"];
            format!("a photo of {} #{i}", things[i % things.len()])
        })
        .collect();
    let tokenizer = Tokenizer::clip();
    let tokenizer_per_s = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                queries.iter().for_each(|q| drop(std::hint::black_box(tokenizer.tokenize(q))));
                queries.len() as f64 / t.elapsed().as_secs_f64()
            })
            .collect(),
    );
    eprintln!("tokenizer: {tokenizer_per_s:.0} texts/s on one core");

    let data = ModelData::File(text_model.into());
    let mut session =
        TextModel::load(&mut runtime.clone(), &image.info, &settings.model, data, "bench-text".into(), &tokenizer)?;
    let tokens = queries.iter().take(64).map(|q| tokenizer.tokenize(q)).collect::<Result<Vec<Tokens>, _>>()?;
    let rows: Vec<&Tokens> = tokens.iter().collect();
    let mut embeddings = Vec::new();
    for batch in [1, 64] {
        let ids = &rows[..batch];
        session.run(ids)?;
        let secs = median(
            (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    session.run(ids).map(|_| t.elapsed().as_secs_f64())
                })
                .collect::<Result<_, _>>()?,
        );
        eprintln!("text embeddings: batch {batch}: {:.1} texts/s", batch as f64 / secs);
        embeddings.push((batch, batch as f64 / secs, secs * 1e3));
    }
    let backlog = query_under_backlog(text_model, image_model, keys, gcs_port, provider)?;
    Ok(TextResult { tokenizer_per_s, embeddings, image_batch_ms, backlog })
}

/// Latencies (ms) of one-text queries over HTTP, first idle, then while one request of 256 photos
/// is in flight with at least a batch of them queued for the model; and the queue depth seen
/// before each of those. Every query is a new text, so none comes from the cache.
fn query_under_backlog(
    text_model: &str,
    image_model: &str,
    keys: &[String],
    gcs_port: u16,
    provider: &str,
) -> anyhow::Result<Backlog> {
    let server = common::gcs_env(ServerConfig::local(Path::new("/")), gcs_port)
        .env("CLIPFN_STORE", "gs://photos")
        .env("CLIPFN_MODEL", image_model)
        .env("CLIPFN_TEXT_MODEL", text_model)
        .env("CLIPFN_PROVIDER", provider)
        .env("CLIPFN_BATCH_SIZE", "64")
        .env("CLIPFN_MAX_IMAGES", "256")
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000")
        .start();
    let client = common::blocking_client();
    let url = format!("{}/v1/embed", server.base);
    let mut n = 0;
    let mut query = || -> anyhow::Result<f64> {
        n += 1;
        let t = Instant::now();
        let response =
            client.post(&url).json(&serde_json::json!({ "texts": [format!("{n} dogs on a beach")] })).send()?;
        anyhow::ensure!(response.status() == 200, "text query: {}", response.status());
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let idle = (0..10).map(|_| query()).collect::<anyhow::Result<Vec<_>>>()?;
    let images: Vec<String> = keys.iter().cycle().take(256).cloned().collect();
    let backlog_url = url.clone();
    let backlog = std::thread::spawn(move || {
        common::blocking_client()
            .post(backlog_url)
            .json(&serde_json::json!({ "images": images }))
            .send()
            .map(|r| r.status())
    });
    let (mut busy, mut depths) = (Vec::new(), Vec::new());
    while !backlog.is_finished() && busy.len() < 20 {
        let depth = common::series(&common::scrape(&server), "clipfn_queue_depth_photos", &[]);
        if depth >= 64.0 {
            depths.push(depth);
            busy.push(query()?);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let status = backlog.join().expect("backlog thread")?;
    anyhow::ensure!(status == 200, "the 256-photo request: {status}");
    // The image batches that ran meanwhile, as the server timed them (decoders sharing the cores).
    let metrics = common::scrape(&server);
    let stage = |suffix: &str| {
        common::series(&metrics, &format!("clipfn_stage_duration_seconds_{suffix}"), &[("stage", "inference")])
    };
    let batch_ms = stage("sum") / stage("count") * 1e3;
    eprintln!(
        "search query: idle {idle:?} ms, under backlog {busy:?} ms (queue depths {depths:?}), image batches {batch_ms:.0} ms"
    );
    Ok(Backlog { idle_ms: idle, busy_ms: busy, queued: depths, batch_ms })
}

/// A search query's latency against an image backlog, and the image batches that ran meanwhile.
struct Backlog {
    idle_ms: Vec<f64>,
    busy_ms: Vec<f64>,
    /// Photos queued for the model when each busy query was sent.
    queued: Vec<f64>,
    /// Mean image batch time on the server during the backlog.
    batch_ms: f64,
}
