//! The `clipfn` command line: `serve` (HTTP or Lambda), `replay`, `backfill` and `openapi`.

use std::{
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::{CommandFactory, Parser, Subcommand};
use clipfn::{
    hosts::{backfill, lambda, openapi, replay, serve},
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
    /// Print the OpenAPI document for these settings as served before a model is loaded (without
    /// the model's dim and label sets), for generating clients; nothing is loaded, but
    /// CLIPFN_MODEL must be set as for serve. docs/openapi.json is it with the default settings.
    Openapi,
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
            // A misspelt variable is a likely cause of a bad configuration (a required one missing).
            for unknown in unknown_variables() {
                eprintln!("clipfn: {unknown}");
            }
            return ExitCode::FAILURE;
        }
    };
    for unknown in unknown_variables() {
        tracing::warn!(variable = %unknown.name, closest = %unknown.closest, "{unknown}");
    }
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

/// The `CLIPFN_*` variables of this process that nothing reads: neither a setting nor the command
/// line (src/settings/unknown.rs says which are left out, and why).
fn unknown_variables() -> Vec<settings::UnknownVariable> {
    let command_line = command_line_variables();
    let command_line: Vec<&str> = command_line.iter().map(String::as_str).collect();
    settings::unknown_variables(std::env::vars_os().filter_map(|(name, _)| name.into_string().ok()), &command_line)
}

/// The variables the command line reads through clap's `env` (`clipfn backfill --chunk` from
/// `CLIPFN_BACKFILL_CHUNK`), every subcommand's.
fn command_line_variables() -> Vec<String> {
    fn walk(command: &clap::Command, out: &mut Vec<String>) {
        let envs = command.get_arguments().filter_map(|arg| arg.get_env()?.to_str().map(String::from));
        out.extend(envs);
        command.get_subcommands().for_each(|subcommand| walk(subcommand, out));
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &mut out);
    out
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
        Command::Openapi => openapi::print(&settings).map(|()| None).map_err(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_command_lines_variables_are_known() {
        let command_line = command_line_variables();
        assert_eq!(command_line, ["CLIPFN_BACKFILL_CHUNK"]);
        let command_line: Vec<&str> = command_line.iter().map(String::as_str).collect();
        let mut read: Vec<&str> = settings::variables().collect();
        read.extend(&command_line);
        assert_eq!(settings::unknown_variables(&read, &command_line), []);
        let misspelt = settings::unknown_variables(["CLIPFN_BACKFILL_CHUNKS"], &command_line);
        assert_eq!(misspelt[0].closest, "CLIPFN_BACKFILL_CHUNK");
    }

    /// Every `CLIPFN_*` name in `text`; a prefix written as such (`CLIPFN_MAX_*`, `CLIPFN_TEST_`)
    /// is not a name.
    fn names_in(text: &str, out: &mut std::collections::BTreeSet<String>) {
        for (at, _) in text.match_indices("CLIPFN_") {
            if text[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &text[at..];
            let end =
                rest.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(rest.len());
            let name = &rest[..end];
            if !name.ends_with('_') && !rest[end..].starts_with('*') {
                out.insert(name.to_string());
            }
        }
    }

    /// Names misspelt on purpose: the check's own tests (src/settings/unknown.rs, here) and
    /// README's example of it. `CLIPFN_B` is `CLIPFN_Batch_Size` read up to its first lower case.
    const MISSPELT_ON_PURPOSE: &[&str] = &[
        "CLIPFN_B",
        "CLIPFN_BACKFILL_CHUNKS",
        "CLIPFN_BATCH_SIZ",
        "CLIPFN_BTACH_WAIT_MS",
        "CLIPFN_CLIPFN_MODEL",
        "CLIPFN_VERBOSE",
    ];

    fn read_tree(path: &Path, out: &mut std::collections::BTreeSet<String>) {
        if path.is_dir() {
            let skip = ["target", "__pycache__", "node_modules", ".terraform"];
            if path.file_name().is_some_and(|name| skip.iter().any(|s| name == *s)) {
                return;
            }
            for entry in std::fs::read_dir(path).unwrap() {
                read_tree(&entry.unwrap().path(), out);
            }
        } else if let Ok(text) = std::fs::read_to_string(path) {
            names_in(&text, out);
        }
    }

    /// A variable that the docs, scripts, tests or terraform name is read by clipfn, or is one of
    /// its tooling's (src/settings/unknown.rs): a new one is a decision, not a warning at start-up.
    #[test]
    fn every_clipfn_variable_the_repository_names_is_read_or_tooling() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut names = std::collections::BTreeSet::new();
        let places = "README.md Dockerfile Dockerfile.cuda .ci src docs tools tests benches examples infra terraform fuzz events";
        for place in places.split(' ') {
            read_tree(&repo.join(place), &mut names);
        }
        assert!(names.contains("CLIPFN_BATCH_WAIT_MS") && names.contains("CLIPFN_TEST_MODEL"), "{names:?}");
        let command_line = command_line_variables();
        let command_line: Vec<&str> = command_line.iter().map(String::as_str).collect();
        let unknown: Vec<String> = settings::unknown_variables(&names, &command_line)
            .iter()
            .filter(|unknown| !MISSPELT_ON_PURPOSE.contains(&unknown.name.as_str()))
            .map(ToString::to_string)
            .collect();
        assert!(unknown.is_empty(), "named in the repository, read by nothing:\n{}", unknown.join("\n"));
        let unused: Vec<&&str> = settings::TOOLING.iter().filter(|name| !names.contains(**name)).collect();
        assert!(unused.is_empty(), "listed as tooling, named nowhere: {unused:?}");
    }
}
