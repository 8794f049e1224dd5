//! The tail the peer suites' bins share (`kiln-python-e2e`, `kiln-kube-rs-e2e`): write their section of
//! docs/conformance.md, then gate on their passing file — a listed test that did not pass fails the run,
//! newly passing ones are listed or (with `--update-passing`) added, the file only growing.

use std::path::Path;
use std::process::ExitCode;

use crate::python_e2e::{judge, parse_passing, Outcome};

/// Replaces (or adds) a section of the Markdown page at `path`, through a temp file and a rename so an
/// interrupted run never leaves half a page. `splice` is the suite's own (its heading).
pub fn write_report(
    path: &Path,
    section: &str,
    splice: fn(&str, &str) -> String,
) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, splice(&old, section))?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Judges `outcomes` against the passing file `file` and prints the verdict; exit 1 on a regression.
pub fn gate(file: &Path, outcomes: &[Outcome], update_passing: bool) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
    let verdict = judge(&parse_passing(&text), outcomes);
    for r in &verdict.regressed {
        println!("REGRESSED (in passing.txt, did not pass): {r}");
    }
    if !verdict.newly_passing.is_empty() {
        if update_passing {
            // Same rules as the conformance gate's file: header kept, sorted, only grows.
            let tmp = file.with_extension("txt.tmp");
            std::fs::write(&tmp, crate::gate::grown(&text, &verdict.newly_passing))?;
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
