//! clipfn: photo references in, CLIP image embeddings out.

mod api;
mod batcher;
mod config;
mod decode;
mod lambda;
mod model;
mod pipeline;
mod preprocess;
mod serve;
mod source;
mod telemetry;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init();
    let settings = config::Settings::from_env()?;
    match cli.command {
        Command::Serve if lambda::is_lambda() => lambda::run(settings).await,
        Command::Serve => serve::run(settings, config::port()?).await,
        Command::Replay { events } => lambda::replay(settings, &events).await,
    }
}
