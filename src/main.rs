//! The `clipfn` command line: `serve` (HTTP or Lambda), `replay` and `backfill`.

use std::{
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use clipfn::{
    hosts::{backfill, lambda, replay, serve},
    observe::telemetry,
    settings,
    sys::memory,
};

#[derive(Parser)]
#[command(version, about = "Photo references in, CLIP image embeddings out")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API on 0.0.0.0:$PORT (configuration from CLIPFN_* variables), or, when
    /// AWS_LAMBDA_RUNTIME_API is set, the same API as an AWS Lambda function.
    #[command(after_long_help = SETTINGS_HELP, after_help = SETTINGS_HELP)]
    Serve,
    /// Feed saved API Gateway events (or plain {"images": [...]} bodies) through the handler
    /// in-process, print each gateway response as a JSON line, and check each event against its
    /// NAME.expect.json when there is one (exit 1 when one fails).
    #[command(after_help = SETTINGS_HELP)]
    Replay {
        #[arg(required = true)]
        events: Vec<PathBuf>,
    },
    /// Embed a whole manifest or bucket prefix into Parquet files, as one task of a Cloud Run Job
    /// or AWS Batch array job (same CLIPFN_* settings as serve).
    Backfill(backfill::Args),
}

/// Settings are environment variables, not flags; say where they are described.
const SETTINGS_HELP: &str = "\
Settings come from the environment, read once at start-up:
  CLIPFN_MODEL      path or gs://, s3://, file:// URI of the ONNX image encoder (required)
  ORT_DYLIB_PATH    ONNX Runtime shared library, libonnxruntime.so (required)
  CLIPFN_STORE      where bare keys resolve: gs://bucket[/prefix], s3://bucket[/prefix], or a folder
  PORT              listen port (8080)
Every setting, with its default and meaning: the Configuration table in README.md
(CLIPFN_BATCH_SIZE, CLIPFN_PROVIDER, CLIPFN_MAX_* limits, timeouts, OTEL_* telemetry, ...).";

fn main() -> ExitCode {
    memory::return_large_blocks_to_the_system();
    let cli = Cli::parse();
    // The log format is a setting, so settings are read before logging starts; an error in them
    // is printed plainly.
    let (settings, telemetry) = match settings::Settings::from_env().map_err(anyhow::Error::from).and_then(|settings| {
        let telemetry = telemetry::Telemetry::init(settings.server.log_format(), settings::gcp_project())?;
        Ok((settings, telemetry))
    }) {
        Ok(ready) => ready,
        Err(e) => {
            eprintln!("clipfn: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("starting the tokio runtime");
    let result = runtime.block_on(run(cli, settings, &telemetry));
    // After a shutdown signal, the exit must come by the deadline it set; otherwise the flush gets
    // a few seconds.
    let exit_by = match &result {
        Ok(Some(deadline)) => *deadline,
        _ => Instant::now() + FLUSH_AT_EXIT,
    };
    // Exporters flush with blocking calls; do that once the runtime is gone. A blocking task stuck
    // on a read must not hold the exit up.
    runtime.shutdown_timeout(exit_by.saturating_duration_since(Instant::now()).min(Duration::from_millis(500)));
    let code = match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, causes included, whatever RUST_BACKTRACE says: start-up errors are read in
            // a Cloud Run log viewer.
            tracing::error!("{e:#}");
            eprintln!("clipfn: {e:#}");
            ExitCode::FAILURE
        }
    };
    telemetry.shutdown(exit_by.saturating_duration_since(Instant::now()));
    code
}

/// How long buffered telemetry may take to leave when no shutdown deadline says otherwise.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(5);

/// Runs the command; `serve` returns the deadline its shutdown signal set for the exit.
async fn run(
    cli: Cli,
    settings: settings::Settings,
    telemetry: &telemetry::Telemetry,
) -> anyhow::Result<Option<Instant>> {
    match cli.command {
        Command::Serve if lambda::is_lambda() => lambda::run(settings, telemetry).await.map(|()| None),
        Command::Serve => serve::run(settings, settings::port()?, telemetry).await.map(Some),
        Command::Replay { events } => replay::run(settings, &events, telemetry).await.map(|()| None),
        Command::Backfill(args) => backfill::run(settings, args, telemetry).await.map(|()| None),
    }
}
