//! The official Python client's own e2e suite (kubernetes-client/python `kubernetes/e2e_test`, vendored in
//! tests/python-e2e/upstream) as a second score beside the conformance list: pytest runs it and writes JUnit;
//! this reads that file, prints `N passed, M failed`, gates on tests/python-e2e/passing.txt (ids that passed
//! once must keep passing; the file only grows) and writes the "Python client e2e" section of
//! docs/conformance.md. Every test is listed with its result and one-line reason: nothing is left out.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

pub use crate::gate::Verdict;

/// The section's heading; `splice` finds the section by it.
pub const HEADING: &str = "## Python client e2e";

#[derive(Debug, thiserror::Error)]
pub enum PythonE2eError {
    #[error("reading pytest's JUnit {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("pytest's JUnit is not XML: {0}")]
    Xml(#[from] quick_xml::Error),
    #[error("pytest's JUnit has a bad attribute: {0}")]
    Attr(#[from] quick_xml::events::attributes::AttrError),
    #[error("pytest's JUnit names no testcase (did pytest collect the suite?)")]
    Empty,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Passed,
    /// An assertion or an exception in the test (pytest's `failure`) or in its setup (`error`).
    Failed(String),
    /// pytest skipped it (upstream's own skips, e.g. a feature flag): listed, never hidden.
    Skipped(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// pytest's node id below the suite directory: `test_client.py::TestClient::test_pod_apis`.
    pub id: String,
    pub status: Status,
    pub secs: f64,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.status == Status::Passed
    }
}

/// `e2e_test.test_client.TestClient` + `test_pod_apis` → `test_client.py::TestClient::test_pod_apis`:
/// pytest's node id, so an id from passing.txt can be handed back to pytest as is.
fn node_id(classname: &str, name: &str) -> String {
    let rest = classname
        .rsplit_once("e2e_test.")
        .map_or(classname, |(_, r)| r);
    let mut parts = rest.split('.');
    let module = parts.next().unwrap_or(rest);
    let mut id = format!("{module}.py");
    for p in parts {
        id.push_str("::");
        id.push_str(p);
    }
    id.push_str("::");
    id.push_str(name);
    id
}

/// One line out of pytest's crash message. The client's ApiException spreads over lines (`(404)`,
/// `Reason: Not Found`, headers, body): the status, the reason and the body's `message` say what happened.
pub fn one_line(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines.next().unwrap_or("(no message)").to_string();
    for l in lines {
        if let Some(r) = l.strip_prefix("Reason: ") {
            let _ = write!(out, " {r}");
        } else if let Some(body) = l.strip_prefix("HTTP response body: ") {
            let msg = serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("message")?.as_str().map(str::to_string));
            if let Some(m) = msg {
                let _ = write!(out, ": {m}");
            }
        }
    }
    const MAX: usize = 300;
    if out.chars().count() > MAX {
        out = out.chars().take(MAX).collect::<String>() + "…";
    }
    out
}

fn attr(e: &BytesStart, key: &[u8]) -> Result<Option<String>, PythonE2eError> {
    for a in e.attributes() {
        let a = a?;
        if a.key.as_ref() == key {
            return Ok(Some(a.unescape_value()?.into_owned()));
        }
    }
    Ok(None)
}

/// The testcases of a pytest JUnit file, in file order.
pub fn parse(xml: &str) -> Result<Vec<Outcome>, PythonE2eError> {
    let mut reader = Reader::from_str(xml);
    let mut out: Vec<Outcome> = Vec::new();
    // Inside a `<testcase>`: its outcome so far (a `failure`/`error`/`skipped` child changes it).
    let mut open: Option<Outcome> = None;
    loop {
        let ev = reader.read_event()?;
        let (e, empty) = match &ev {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(e) if e.name().as_ref() == b"testcase" => {
                out.extend(open.take());
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        match e.name().as_ref() {
            b"testcase" => {
                let classname = attr(e, b"classname")?.unwrap_or_default();
                let name = attr(e, b"name")?.unwrap_or_default();
                let secs = attr(e, b"time")?
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0.0);
                let o = Outcome {
                    id: node_id(&classname, &name),
                    status: Status::Passed,
                    secs,
                };
                if empty {
                    out.push(o);
                } else {
                    open = Some(o);
                }
            }
            kind @ (b"failure" | b"error" | b"skipped") => {
                let Some(o) = open.as_mut() else { continue };
                let why = one_line(&attr(e, b"message")?.unwrap_or_default());
                // A teardown error after a failure keeps the failure's reason: it came first.
                if matches!(o.status, Status::Failed(_)) {
                    continue;
                }
                o.status = match kind {
                    b"skipped" => Status::Skipped(why),
                    b"error" => Status::Failed(format!("error: {why}")),
                    _ => Status::Failed(why),
                };
            }
            _ => {}
        }
    }
    if out.is_empty() {
        return Err(PythonE2eError::Empty);
    }
    Ok(out)
}

pub fn read(path: &std::path::Path) -> Result<Vec<Outcome>, PythonE2eError> {
    let xml = std::fs::read_to_string(path).map_err(|source| PythonE2eError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&xml)
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Tally {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

pub fn tally(outcomes: &[Outcome]) -> Tally {
    let mut t = Tally::default();
    for o in outcomes {
        match o.status {
            Status::Passed => t.passed += 1,
            Status::Failed(_) => t.failed += 1,
            Status::Skipped(_) => t.skipped += 1,
        }
    }
    t
}

/// `N passed, M failed, K skipped of T tests`, then each test that did not pass with its reason.
pub fn summary(outcomes: &[Outcome]) -> String {
    summary_of("Python client e2e", outcomes)
}

/// [`summary`] for any peer suite, named by `suite` (kube-rs's uses it too).
pub fn summary_of(suite: &str, outcomes: &[Outcome]) -> String {
    let t = tally(outcomes);
    let mut s = format!(
        "{} passed, {} failed, {} skipped of {} {suite} tests\n",
        t.passed,
        t.failed,
        t.skipped,
        outcomes.len()
    );
    for o in outcomes {
        match &o.status {
            Status::Passed => {}
            Status::Failed(w) => {
                let _ = writeln!(s, "  FAILED  {}: {w}", o.id);
            }
            Status::Skipped(w) => {
                let _ = writeln!(s, "  SKIPPED {}: {w}", o.id);
            }
        }
    }
    s
}

/// The ids in a passing file (`#` comments and blank lines ignored).
pub fn parse_passing(text: &str) -> BTreeSet<String> {
    crate::gate::ids(text).map(|(_, l)| l.to_string()).collect()
}

/// Unlike the conformance gate, a listed test that did not run fails too (a renamed or lost test must
/// not pass the gate by vanishing).
pub fn judge(passing: &BTreeSet<String>, outcomes: &[Outcome]) -> Verdict {
    let mut v = Verdict::default();
    for id in passing {
        match outcomes.iter().find(|o| &o.id == id) {
            None => v.regressed.push(format!("{id} (did not run)")),
            Some(o) => match &o.status {
                Status::Passed => {}
                Status::Failed(w) | Status::Skipped(w) => v.regressed.push(format!("{id} ({w})")),
            },
        }
    }
    for o in outcomes {
        if o.passed() && !passing.contains(&o.id) {
            v.newly_passing.push(o.id.clone());
        }
    }
    v
}

pub(crate) fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The "Python client e2e" section: the score and every test with its result and reason.
pub fn section(outcomes: &[Outcome], client: &str, kiln_commit: &str) -> String {
    let t = tally(outcomes);
    let mut s = format!("{HEADING}\n\n");
    let _ = writeln!(
        s,
        "The official Python client's own e2e tests (kubernetes-client/python `kubernetes/e2e_test` at \
         `{client}`, vendored unmodified in tests/python-e2e/upstream) run by pytest on the same 3-host lab \
         cluster, kiln at `{kiln_commit}` (tests/python-e2e/README.md). Docker Hub images the suite names are \
         served by the lab registry as a docker.io mirror; the ones the lab does not have fail with their reason.\n"
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
        let _ = writeln!(s, "| {} | {result} | {} |", md_cell(&o.id), md_cell(why));
    }
    s
}

/// `doc` with its Python section replaced by `section` (put before the first `## ` heading when it has
/// none). The section runs from its heading to the next `## ` heading or the end.
pub fn splice(doc: &str, section: &str) -> String {
    crate::doc_section::splice(doc, HEADING, section)
}

/// The Python section of `doc`, if it has one (kept when the conformance part of the page is rewritten).
pub fn existing_section(doc: &str) -> Option<&str> {
    crate::doc_section::existing(doc, HEADING)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JUNIT: &str = r#"<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="e2e_test.test_client.TestClient" name="test_pod_apis" time="3.5" />
<testcase classname="e2e_test.test_client.TestClient" name="test_exit_code" time="1.0"><failure message="kubernetes.client.exceptions.ApiException: (404)&#10;Reason: Not Found&#10;HTTP response headers: HTTPHeaderDict({})&#10;HTTP response body: {&quot;kind&quot;:&quot;Status&quot;,&quot;message&quot;:&quot;pods \&quot;x\&quot; not found&quot;}&#10;">trace</failure></testcase>
<testcase classname="e2e_test.test_watch.TestWatch" name="test_watch" time="0"><skipped type="pytest.skip" message="no | watch">skip</skipped></testcase>
<testcase classname="e2e_test.test_apps.TestApps" name="test_x" time="0"><error message="failed on setup with &quot;boom&quot;">e</error></testcase>
</testsuite></testsuites>"#;

    #[test]
    fn reads_pytest_junit_with_one_line_reasons() {
        let o = parse(JUNIT).unwrap();
        assert_eq!(o.len(), 4);
        assert_eq!(o[0].id, "test_client.py::TestClient::test_pod_apis");
        assert!(o[0].passed());
        assert_eq!(
            o[1].status,
            Status::Failed(
                "kubernetes.client.exceptions.ApiException: (404) Not Found: pods \"x\" not found"
                    .into()
            )
        );
        assert_eq!(o[2].status, Status::Skipped("no | watch".into()));
        assert_eq!(
            o[3].status,
            Status::Failed("error: failed on setup with \"boom\"".into())
        );
        let s = summary(&o);
        assert!(
            s.starts_with("1 passed, 2 failed, 1 skipped of 4 Python client e2e tests\n"),
            "{s}"
        );
        assert!(s.contains("  FAILED  test_client.py::TestClient::test_exit_code: kubernetes"));
        assert!(matches!(
            parse("<testsuites/>").unwrap_err(),
            PythonE2eError::Empty
        ));
    }

    #[test]
    fn a_listed_test_that_fails_or_vanishes_fails_the_gate() {
        let o = parse(JUNIT).unwrap();
        let passing = parse_passing(
            "# header\ntest_client.py::TestClient::test_pod_apis\ntest_watch.py::TestWatch::test_watch\n",
        );
        let v = judge(&passing, &o);
        assert_eq!(
            v.regressed,
            ["test_watch.py::TestWatch::test_watch (no | watch)"]
        );
        assert!(v.newly_passing.is_empty());
        let v = judge(&parse_passing("test_gone.py::T::t"), &o);
        assert_eq!(v.regressed, ["test_gone.py::T::t (did not run)"]);
        assert_eq!(
            v.newly_passing,
            ["test_client.py::TestClient::test_pod_apis"]
        );
        assert!(judge(
            &parse_passing("test_client.py::TestClient::test_pod_apis"),
            &o
        )
        .ok());
    }

    #[test]
    fn the_section_lists_every_test_and_is_spliced_in_place() {
        let o = parse(JUNIT).unwrap();
        let sec = section(&o, "v36.0.3", "abc");
        assert!(
            sec.contains("**Score: 1 of 4 tests pass.** 2 fail, 1 skipped."),
            "{sec}"
        );
        assert!(sec.contains("| test_watch.py::TestWatch::test_watch | skip | no \\| watch |"));
        assert_eq!(sec.matches("\n| test_").count(), 4);
        let doc = "# Conformance\n\nscore\n\n## Entries that pass\n\n- a\n";
        let once = splice(doc, &sec);
        assert_eq!(
            once,
            format!(
                "# Conformance\n\nscore\n\n{}\n\n## Entries that pass\n\n- a\n",
                sec.trim_end()
            )
        );
        assert_eq!(existing_section(&once), Some(sec.trim_end()));
        // Replaced in place, not added twice; what follows the section stays.
        let again = splice(&once, &section(&o[..1], "v36.0.3", "def"));
        assert_eq!(again.matches(HEADING).count(), 1);
        assert!(again.contains("`def`") && !again.contains("`abc`"));
        assert!(
            again.ends_with("\n\n## Entries that pass\n\n- a\n"),
            "{again}"
        );
        // A page without headings gets it at the end.
        assert!(splice("# T\n", &sec).ends_with(&format!("{}\n", sec.trim_end())));
    }
}
