//! `clipfn backfill`: embeds a whole listing as one task of a Cloud Run Job or AWS Batch array job,
//! writing Parquet under `--out`: each photo's embedding, its perceptual hash and sharpness, the
//! heads' scores and the faces, from one fetch and one decode as `/v1/analyze` gives them. It is a second entry point and a second sink on the same
//! pipeline as the server (source -> decode -> model worker -> model), with no HTTP.
//!
//! A task takes its share of the keys ([`shard`]), drops those that already have a row under
//! `--out` (its own finished chunks on a retry; every file's keys with `--incremental`), and
//! streams the rest through the pipeline, writing a file per `--chunk` photos
//! (`CLIPFN_BACKFILL_CHUNK`; [`sink`]). A photo that fails gets an error row; only a listing that
//! cannot be read or an output that cannot be written fails the task.

mod columns;
mod listing;
mod progress;
pub mod shard;
pub mod sink;

use std::sync::Arc;

use futures::StreamExt;

use self::{
    columns::Columns,
    listing::Listing,
    progress::Progress,
    shard::{Task, TaskError},
    sink::{Output, Row},
};
use crate::{
    observe::telemetry::Telemetry,
    pipeline::{EmbeddedPhoto, Pipeline, SquareFor},
    service::Service,
    settings::Settings,
    storage::{Client, Storage},
};

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("listing").required(true).args(["manifest", "source"])))]
pub struct Args {
    /// File or object URI with one photo key per line; keys resolve against CLIPFN_STORE and
    /// CLIPFN_ALLOWED_SOURCES as in the API.
    #[arg(long)]
    pub manifest: Option<String>,
    /// URI prefix to list instead of a manifest; each object is keyed by its full URI.
    #[arg(long)]
    pub source: Option<String>,
    /// URI prefix (or local directory) that the Parquet files go under.
    #[arg(long)]
    pub out: String,
    /// Embed only keys that have no row under --out yet.
    #[arg(long)]
    pub incremental: bool,
    /// This task's index; overrides CLOUD_RUN_TASK_INDEX and AWS_BATCH_JOB_ARRAY_INDEX.
    #[arg(long)]
    pub task_index: Option<u32>,
    /// The number of tasks; overrides CLOUD_RUN_TASK_COUNT (AWS Batch needs it).
    #[arg(long)]
    pub task_count: Option<u32>,
    /// Photos per Parquet file: the most a retried task redoes.
    #[arg(long, env = "CLIPFN_BACKFILL_CHUNK", default_value_t = 5000, value_parser = positive)]
    pub chunk: usize,
}

/// A count that must be at least 1 (`--chunk` 0 would never fill a file).
fn positive(value: &str) -> Result<usize, String> {
    match value.trim().parse() {
        Ok(0) => Err("must be greater than 0 (--chunk, or CLIPFN_BACKFILL_CHUNK)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Failures of the whole task; a photo's failure is a row, never one of these.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    #[error("task: {0}")]
    Task(#[from] TaskError),
    #[error("cannot read the listing {location}: {message}")]
    Listing { location: String, message: String },
    #[error("cannot use --out {location}: {message}")]
    Output { location: String, message: String },
    #[error("--out holds {file}, embedded with model '{found}', but this job runs '{ours}'; use another --out")]
    OtherModel { file: String, found: String, ours: String },
}

pub async fn run(settings: Settings, args: Args, telemetry: &Telemetry) -> anyhow::Result<()> {
    let task = Task::resolve(args.task_index, args.task_count, |name| std::env::var(name).ok())?;
    let storage = Storage::new(Client::new(&settings.sources));
    let out_prefix = storage
        .open_prefix(&args.out)
        .map_err(|e| BackfillError::Output { location: args.out.clone(), message: e.to_string() })?;
    let listing = match (&args.manifest, &args.source) {
        (Some(manifest), _) => Listing::Manifest(manifest),
        (None, Some(prefix)) => Listing::Prefix(prefix),
        (None, None) => unreachable!("clap requires --manifest or --source"),
    };
    let (listed, mut keys) = listing::keys(&storage, &listing, &out_prefix, task).await?;
    keys.sort_unstable();
    keys.dedup();

    // The model is loaded before --out is read: its id (a file's name or a folder's) is what the
    // files there must match.
    let service = Service::load(&settings, telemetry.metrics()).await?;
    let pipeline = &service.pipeline;
    let output = Arc::new(Output::new(out_prefix, task, pipeline.model().id.clone(), Columns::of(pipeline)));
    let existing = output.scan(args.incremental).await?;
    let owned = keys.len();
    keys.retain(|key| !existing.done.contains(key));
    let already_done = (owned - keys.len()) as u64;
    tracing::info!(
        task_index = task.index,
        task_count = task.count,
        listed,
        owned,
        already_done,
        pending = keys.len(),
        chunks_present = existing.chunks,
        "backfill starting"
    );
    let (progress, chunks_written) = embed(&settings, pipeline, keys, &output, existing.next_chunk, args.chunk).await?;
    let summary = progress.finish(task, already_done, existing.chunks as u64, chunks_written);
    let summary = serde_json::to_string(&summary)?;
    tracing::info!(%summary, "backfill done");
    println!("{summary}");
    Ok(())
}

/// Streams `keys` through the pipeline and writes their rows, `chunk_size` at a time, in chunks
/// numbered from `chunk`. One chunk is put while the next is embedded.
async fn embed(
    settings: &Settings,
    pipeline: &Pipeline,
    keys: Vec<String>,
    output: &Arc<Output>,
    mut chunk: u32,
    chunk_size: usize,
) -> anyhow::Result<(Progress, u64)> {
    let dim = pipeline.model().dim;
    let mut progress = Progress::start(keys.len() as u64);
    let mut chunks = pipeline
        .embed_all(keys, settings.limits.max_queued_images, pipeline.wants_all(SquareFor::Every))?
        .map(row)
        .inspect(|row| progress.record(row.error.as_ref().map(|(code, _)| *code)))
        .chunks(chunk_size);
    let mut writing: Option<tokio::task::JoinHandle<Result<(), BackfillError>>> = None;
    let mut written = 0;
    while let Some(rows) = chunks.next().await {
        if let Some(previous) = writing.take() {
            previous.await??;
        }
        let output = Arc::clone(output);
        writing = Some(tokio::spawn(async move { output.write(chunk, dim, rows).await }));
        chunk += 1;
        written += 1;
    }
    if let Some(previous) = writing {
        previous.await??;
    }
    drop(chunks);
    Ok((progress, written))
}

fn row(EmbeddedPhoto { image, photo }: EmbeddedPhoto) -> Row {
    let (signals, error) = match photo.result {
        Ok(signals) => (Some(signals), None),
        Err(e) => {
            let (code, message) = e.code_and_message(&image);
            (None, Some((code.as_str(), message)))
        }
    };
    Row { key: image, signals, error, bytes: photo.bytes }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let base = ["clipfn-backfill", "--manifest", "keys.txt", "--out", "gs://out/"];
        Command::try_parse_from(base.iter().chain(extra)).map(|command| command.args)
    }

    #[test]
    fn the_chunk_is_5000_unless_given_and_never_0() {
        // Run without CLIPFN_BACKFILL_CHUNK in the environment, as the tests are.
        if std::env::var_os("CLIPFN_BACKFILL_CHUNK").is_none() {
            assert_eq!(parse(&[]).unwrap().chunk, 5000);
        }
        assert_eq!(parse(&["--chunk", "7"]).unwrap().chunk, 7);
        let zero = parse(&["--chunk", "0"]).unwrap_err().to_string();
        assert!(zero.contains("greater than 0") && zero.contains("CLIPFN_BACKFILL_CHUNK"), "{zero}");
        assert!(parse(&["--chunk", "many"]).is_err());
    }
}
