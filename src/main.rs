//! The `clipfn` command line: `serve` (HTTP or Lambda) and `replay`.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use clipfn::{config, lambda, memory, serve, telemetry};

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
    memory::return_large_blocks_to_the_system();
    let cli = Cli::parse();
    // The log format is a setting, so settings are read before logging starts; an error in them
    // is printed plainly.
    let (settings, telemetry) = match config::Settings::from_env().map_err(anyhow::Error::from).and_then(|settings| {
        let telemetry = telemetry::Telemetry::init(settings.log_format(), config::gcp_project())?;
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
    // Exporters flush with blocking calls; do that once the runtime is gone. A blocking task stuck
    // on a read must not hold the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, causes included, whatever RUST_BACKTRACE says: start-up errors are read in
            // a Cloud Run log viewer.
            tracing::error!("{e:#}");
            eprintln!("clipfn: {e:#}");
            ExitCode::FAILURE
        }
    };
    telemetry.shutdown();
    code
}

async fn run(cli: Cli, settings: config::Settings, telemetry: &telemetry::Telemetry) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve if lambda::is_lambda() => lambda::run(settings, telemetry).await,
        Command::Serve => serve::run(settings, config::port()?, telemetry).await,
        Command::Replay { events } => lambda::replay(settings, &events, telemetry).await,
    }
}
