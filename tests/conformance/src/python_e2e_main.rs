//! `kiln-python-e2e`: read the JUnit pytest wrote for the Python client's e2e suite (tests/python-e2e),
//! print `N passed, M failed` with each failure's reason, gate on tests/python-e2e/passing.txt, and write the
//! "Python client e2e" section of docs/conformance.md. Exit 1 when a listed test did not pass.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kiln_conformance::{peer_gate, python_e2e};

#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// pytest's `--junitxml` file.
    #[arg(long)]
    junit: PathBuf,
    /// Fail when a test id listed in this file did not pass (tests/python-e2e/passing.txt).
    #[arg(long)]
    passing: Option<PathBuf>,
    /// Add newly passing tests to --passing.
    #[arg(long, requires = "passing")]
    update_passing: bool,
    /// Replace (or add) the "Python client e2e" section of this Markdown page (docs/conformance.md).
    #[arg(long)]
    report: Option<PathBuf>,
    /// The client's git tag the suite was vendored from, for the report.
    #[arg(long, default_value = "v36.0.3")]
    client: String,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kiln-python-e2e: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let outcomes = python_e2e::read(&args.junit)?;
    print!("{}", python_e2e::summary(&outcomes));
    if let Some(path) = &args.report {
        let kiln_commit = std::env::var("KILN_COMMIT").unwrap_or_else(|_| "(unknown)".into());
        peer_gate::write_report(
            path,
            &python_e2e::section(&outcomes, &args.client, &kiln_commit),
            python_e2e::splice,
        )?;
    }
    match &args.passing {
        Some(file) => peer_gate::gate(file, &outcomes, args.update_passing),
        None => Ok(ExitCode::SUCCESS),
    }
}
