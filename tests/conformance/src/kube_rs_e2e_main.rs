//! `kiln-kube-rs-e2e`: read what kube-rs's cluster-test executables printed (tests/kube-rs-e2e; one
//! `<crate>.txt` per executable), print `N passed, M failed` with each failure's reason, gate on
//! tests/kube-rs-e2e/passing.txt, and write the "kube-rs cluster tests" section of docs/conformance.md.
//! Exit 1 when a listed test did not pass.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kiln_conformance::kube_rs_e2e;

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
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let page = kube_rs_e2e::splice(
            &old,
            &kube_rs_e2e::section(&outcomes, &args.kube, &kiln_commit),
        );
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, page)?;
        std::fs::rename(&tmp, path)?;
    }
    let Some(file) = &args.passing else {
        return Ok(ExitCode::SUCCESS);
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
    let verdict = kube_rs_e2e::judge(&kube_rs_e2e::parse_passing(&text), &outcomes);
    for r in &verdict.regressed {
        println!("REGRESSED (in passing.txt, did not pass): {r}");
    }
    if !verdict.newly_passing.is_empty() {
        if args.update_passing {
            // Same rules as the other gates' files: header kept, sorted, only grows.
            let tmp = file.with_extension("txt.tmp");
            std::fs::write(
                &tmp,
                kiln_conformance::gate::grown(&text, &verdict.newly_passing),
            )?;
            std::fs::rename(&tmp, file)?;
            println!(
                "added {} newly passing tests to {}",
                verdict.newly_passing.len(),
                file.display()
            );
        } else {
            println!(
                "{} tests pass that {} does not list yet (--update-passing adds them):",
                verdict.newly_passing.len(),
                file.display()
            );
            for s in &verdict.newly_passing {
                println!("  {s}");
            }
        }
    }
    Ok(if verdict.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
