//! The `clipfn` command line: `serve` (HTTP or Lambda) and `replay`.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use clipfn::{config, lambda, serve, telemetry};

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
    Serve,
    /// Feed saved API Gateway events (or plain {"images": [...]} bodies) through the handler
    /// in-process and print each gateway response as a JSON line.
    Replay {
        #[arg(required = true)]
        events: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init();
    let runtime = tokio::runtime::Runtime::new().expect("starting the tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, causes included, whatever RUST_BACKTRACE says: start-up errors are read in
            // a Cloud Run log viewer.
            tracing::error!("{e:#}");
            eprintln!("clipfn: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let settings = config::Settings::from_env()?;
    match cli.command {
        Command::Serve if lambda::is_lambda() => lambda::run(settings).await,
        Command::Serve => serve::run(settings, config::port()?).await,
        Command::Replay { events } => lambda::replay(settings, &events).await,
    }
}
