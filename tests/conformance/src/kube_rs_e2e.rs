//! kube-rs's own cluster tests (the `#[ignore = "needs cluster …"]` tests of kube, kube-client and
//! kube-runtime 5.0.0, vendored in tests/kube-rs-e2e/upstream) as a third score beside the conformance list:
//! their libtest executables run with `--ignored` against the lab's cluster; this reads what they printed,
//! prints `N passed, M failed`, gates on tests/kube-rs-e2e/passing.txt (a listed test that fails or does not
//! run fails the gate; the file only grows) and writes the "kube-rs cluster tests" section of
//! docs/conformance.md, every test with its result and one-line reason.

use std::fmt::Write as _;
use std::path::Path;

pub use crate::python_e2e::{judge, parse_passing, tally, Outcome, Status};

/// The section's heading; `doc_section` finds the section by it.
pub const HEADING: &str = "## kube-rs cluster tests";

#[derive(Debug, thiserror::Error)]
pub enum KubeRsE2eError {
    #[error("reading the test output {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0} names no test (did the test executable run?)")]
    Empty(String),
}

/// One line out of a failed test's captured output: a panic's message (an `assert_eq!` spreads it over
/// `left:`/`right:` lines, which are the point) or the `Error: …` a test returned.
pub fn one_line(block: &str) -> String {
    let lines: Vec<&str> = block.lines().map(str::trim).collect();
    let msg: Vec<&str> = match lines.iter().position(|l| l.contains(" panicked at ")) {
        Some(i) => lines[i + 1..]
            .iter()
            .take_while(|l| {
                !l.is_empty() && !l.starts_with("stack backtrace:") && !l.starts_with("note: ")
            })
            .copied()
            .collect(),
        None => lines
            .iter()
            .filter(|l| !l.is_empty())
            .take(1)
            .copied()
            .collect(),
    };
    let mut out = if msg.is_empty() {
        "(no message)".to_string()
    } else {
        msg.join(" ")
    };
    const MAX: usize = 300;
    if out.chars().count() > MAX {
        out = out.chars().take(MAX).collect::<String>() + "…";
    }
    out
}

/// The tests of one executable's libtest output (`test <path> ... ok|FAILED|ignored`), ids prefixed with
/// the crate: `kube-client::test::pod_can_use_core_apis`. A failure's reason comes from its
/// `---- <path> stdout ----` block.
pub fn parse(krate: &str, text: &str) -> Vec<Outcome> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((name, result)) = line
            .strip_prefix("test ")
            .and_then(|rest| rest.split_once(" ... "))
        else {
            continue;
        };
        let status = match result.trim() {
            "ok" => Status::Passed,
            "FAILED" => Status::Failed(one_line(&failure_block(text, name))),
            r if r.starts_with("ignored") => {
                Status::Skipped(r.strip_prefix("ignored, ").unwrap_or("ignored").to_string())
            }
            // A result libtest does not print for these (e.g. `bench`): not a test outcome.
            _ => continue,
        };
        out.push(Outcome {
            id: format!("{krate}::{name}"),
            status,
            secs: 0.0,
        });
    }
    out
}

fn failure_block(text: &str, name: &str) -> String {
    let head = format!("---- {name} stdout ----\n");
    let Some(i) = text.find(&head) else {
        return String::new();
    };
    let rest = &text[i + head.len()..];
    let end = [rest.find("\n---- "), rest.find("\nfailures:\n")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The outcomes of one crate's output file, named `<crate>.txt` by the runner.
pub fn read(path: &Path) -> Result<Vec<Outcome>, KubeRsE2eError> {
    let text = std::fs::read_to_string(path).map_err(|source| KubeRsE2eError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let krate = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("unknown");
    let o = parse(krate, &text);
    if o.is_empty() {
        return Err(KubeRsE2eError::Empty(path.display().to_string()));
    }
    Ok(o)
}

/// `N passed, M failed, K skipped of T tests`, then each test that did not pass with its reason.
pub fn summary(outcomes: &[Outcome]) -> String {
    crate::python_e2e::summary_of("kube-rs cluster", outcomes)
}

/// The "kube-rs cluster tests" section: the score and every test with its result and reason.
pub fn section(outcomes: &[Outcome], kube: &str, kiln_commit: &str) -> String {
    let t = tally(outcomes);
    let mut s = format!("{HEADING}\n\n");
    let _ = writeln!(
        s,
        "kube-rs's own cluster tests (the `#[ignore]`d library tests of kube, kube-client and kube-runtime \
         `{kube}`, the crates.io packages vendored unmodified in tests/kube-rs-e2e/upstream), run with \
         `--ignored` on the same 3-host lab cluster, kiln at `{kiln_commit}` (tests/kube-rs-e2e/README.md).\n"
    );
    let _ = writeln!(
        s,
        "**Score: {} of {} tests pass.** {} fail, {} skipped.\n",
        t.passed,
        outcomes.len(),
        t.failed,
        t.skipped
    );
    s.push_str("| test | result | reason |\n|---|---|---|\n");
    for o in outcomes {
        let (result, why) = match &o.status {
            Status::Passed => ("pass", ""),
            Status::Failed(w) => ("FAIL", w.as_str()),
            Status::Skipped(w) => ("skip", w.as_str()),
        };
        let _ = writeln!(
            s,
            "| {} | {result} | {} |",
            crate::python_e2e::md_cell(&o.id),
            crate::python_e2e::md_cell(why)
        );
    }
    s
}

/// `doc` with its kube-rs section replaced by `section` (added before the first `## ` when it has none).
pub fn splice(doc: &str, section: &str) -> String {
    crate::doc_section::splice(doc, HEADING, section)
}

/// The kube-rs section of `doc`, if it has one (kept when the conformance part of the page is rewritten).
pub fn existing_section(doc: &str) -> Option<&str> {
    crate::doc_section::existing(doc, HEADING)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shaped like what a kube-client test executable prints with `--ignored` (trimmed).
    const OUT: &str = "
running 4 tests
test api::entry::tests::entry_create_missing_object ... ok
test client::client_ext::test::fetch_fails ... FAILED
test test::pod_can_use_core_apis ... ok
test test::slow ... ignored, needs a slow cluster
test events::test::no_namespace ... FAILED

failures:

---- client::client_ext::test::fetch_fails stdout ----

thread 'client::client_ext::test::fetch_fails' (3689) panicked at kube-client/src/client/client_ext.rs:512:9:
assertion `left == right` failed
  left: \"column 35\"
 right: \"column 17\"
stack backtrace:
   0: __rustc::rust_begin_unwind
---- events::test::no_namespace stdout ----
Error: Api(Status { code: 404, message: \"the server could not find the requested resource\" })


failures:
    client::client_ext::test::fetch_fails
    events::test::no_namespace

test result: FAILED. 2 passed; 2 failed; 1 ignored; 0 measured; 156 filtered out; finished in 6.54s
";

    #[test]
    fn reads_libtest_output_with_one_line_reasons() {
        let o = parse("kube-client", OUT);
        assert_eq!(o.len(), 5);
        assert_eq!(
            o[0].id,
            "kube-client::api::entry::tests::entry_create_missing_object"
        );
        assert!(o[0].passed() && o[2].passed());
        assert_eq!(
            o[1].status,
            Status::Failed(
                "assertion `left == right` failed left: \"column 35\" right: \"column 17\"".into()
            )
        );
        assert_eq!(o[3].status, Status::Skipped("needs a slow cluster".into()));
        assert_eq!(
            o[4].status,
            Status::Failed(
                "Error: Api(Status { code: 404, message: \"the server could not find the requested resource\" })"
                    .into()
            )
        );
        let s = summary(&o);
        assert!(
            s.starts_with("2 passed, 2 failed, 1 skipped of 5 kube-rs cluster tests\n"),
            "{s}"
        );
        assert!(parse("kube", "running 0 tests\n\ntest result: ok.").is_empty());
    }

    #[test]
    fn a_listed_test_that_fails_or_does_not_run_fails_the_gate() {
        let o = parse("kube-client", OUT);
        let v = judge(
            &parse_passing(
                "# header\nkube-client::test::pod_can_use_core_apis\nkube-client::client::client_ext::test::fetch_fails\nkube::test::gone\n",
            ),
            &o,
        );
        assert_eq!(v.regressed.len(), 2, "{:?}", v.regressed);
        assert!(v.regressed[0]
            .starts_with("kube-client::client::client_ext::test::fetch_fails (assertion"));
        assert_eq!(v.regressed[1], "kube::test::gone (did not run)");
        assert_eq!(
            v.newly_passing,
            ["kube-client::api::entry::tests::entry_create_missing_object"]
        );
    }

    #[test]
    fn the_section_lists_every_test_and_sits_beside_the_python_one() {
        let o = parse("kube-client", OUT);
        let sec = section(&o, "5.0.0", "abc");
        assert!(
            sec.contains("**Score: 2 of 5 tests pass.** 2 fail, 1 skipped."),
            "{sec}"
        );
        assert_eq!(sec.matches("\n| kube-client::").count(), 5);
        let doc =
            "# Conformance\n\nscore\n\n## Python client e2e\n\npy\n\n## Entries that pass\n\n- a\n";
        let page = splice(doc, &sec);
        assert_eq!(existing_section(&page), Some(sec.trim_end()));
        // The Python section and the entry lists stay; a second splice replaces, not adds.
        assert_eq!(
            crate::python_e2e::existing_section(&page),
            Some("## Python client e2e\n\npy")
        );
        let again = splice(&page, &section(&o[..1], "5.0.0", "def"));
        assert_eq!(again.matches(HEADING).count(), 1);
        assert!(again.contains("`def`") && !again.contains("`abc`"));
        assert!(
            again.ends_with("\n\n## Entries that pass\n\n- a\n"),
            "{again}"
        );
    }
}
