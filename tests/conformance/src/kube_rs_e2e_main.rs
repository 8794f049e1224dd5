//! `kiln-kube-rs-e2e`: read what kube-rs's cluster-test executables printed (tests/kube-rs-e2e; one
//! `<crate>.txt` per executable), print `N passed, M failed` with each failure's reason, gate on
//! tests/kube-rs-e2e/passing.txt, and write the "kube-rs cluster tests" section of docs/conformance.md.
//! Exit 1 when a listed test did not pass.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kiln_conformance::{kube_rs_e2e, peer_gate};

#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// libtest's output of one test executable, named after its crate (`kube-client.txt`).
    #[arg(long = "output", required = true)]
    outputs: Vec<PathBuf>,
    /// Fail when a test id listed in this file did not pass (tests/kube-rs-e2e/passing.txt).
    #[arg(long)]
    passing: Option<PathBuf>,
    /// Add newly passing tests to --passing.
    #[arg(long, requires = "passing")]
    update_passing: bool,
    /// Replace (or add) the "kube-rs cluster tests" section of this Markdown page (docs/conformance.md).
    #[arg(long)]
    report: Option<PathBuf>,
    /// The kube-rs release the tests were vendored from, for the report.
    #[arg(long, default_value = "5.0.0")]
    kube: String,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kiln-kube-rs-e2e: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut outcomes = Vec::new();
    for path in &args.outputs {
        outcomes.extend(kube_rs_e2e::read(path)?);
    }
    print!("{}", kube_rs_e2e::summary(&outcomes));
    if let Some(path) = &args.report {
        let kiln_commit = std::env::var("KILN_COMMIT").unwrap_or_else(|_| "(unknown)".into());
        peer_gate::write_report(
            path,
            &kube_rs_e2e::section(&outcomes, &args.kube, &kiln_commit),
            kube_rs_e2e::splice,
        )?;
    }
    match &args.passing {
        Some(file) => peer_gate::gate(file, &outcomes, args.update_passing),
        None => Ok(ExitCode::SUCCESS),
    }
}
