//! clipfn: photo references in, CLIP image embeddings out.

mod api;
mod batcher;
mod config;
mod decode;
mod model;
mod pipeline;
mod preprocess;
mod serve;
mod source;
mod telemetry;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(version, about = "Photo references in, CLIP image embeddings out")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API on 0.0.0.0:$PORT (configuration from CLIPFN_* variables).
    Serve,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init();
    match cli.command {
        Command::Serve => {
            let settings = config::Settings::from_env()?;
            serve::run(settings, config::port()?).await
        }
    }
}
