//! What a run prints: a summary by SIG, a JUnit file (one testcase per entry, failures and unwritten
//! entries with their one-line reason) and the Markdown score page, docs/conformance.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::runner::{Outcome, Status};

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Tally {
    pub passed: usize,
    pub failed: usize,
    pub unwritten: usize,
}

impl Tally {
    pub fn total(&self) -> usize {
        self.passed + self.failed + self.unwritten
    }
    fn add(&mut self, o: &Outcome) {
        match o.status {
            Status::Passed => self.passed += 1,
            Status::Failed(_) => self.failed += 1,
            Status::Unwritten(_) => self.unwritten += 1,
        }
    }
}

pub fn by_sig(outcomes: &[Outcome]) -> (Tally, BTreeMap<&'static str, Tally>) {
    let mut total = Tally::default();
    let mut sigs: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for o in outcomes {
        total.add(o);
        sigs.entry(o.sig).or_default().add(o);
    }
    (total, sigs)
}

fn pct(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// `N passed, M failed` (failed counts unwritten entries too: they do not pass), then one line per SIG.
pub fn summary(outcomes: &[Outcome]) -> String {
    let (t, sigs) = by_sig(outcomes);
    let mut s = format!(
        "{} passed, {} failed ({} of them without a kiln test yet) of {} entries: {:.1}%\n",
        t.passed,
        t.failed + t.unwritten,
        t.unwritten,
        t.total(),
        pct(t.passed, t.total())
    );
    for (sig, x) in &sigs {
        let _ = writeln!(
            s,
            "  {sig:<24} {:>4} passed {:>4} failed {:>4} unwritten  of {:>4}",
            x.passed,
            x.failed,
            x.unwritten,
            x.total()
        );
    }
    // Flakes pass the gate but are named, so they get fixed rather than hidden.
    for o in outcomes {
        if let Some(why) = &o.flaky {
            let _ = writeln!(
                s,
                "FLAKY (failed, then passed on retry): {} ({why})",
                o.codename
            );
        }
    }
    s
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML as ginkgo writes it for the e2e suite: one testsuite, a testcase per entry named by its
/// codename with its SIG as classname; unwritten entries are failures too (they do not pass).
pub fn junit(outcomes: &[Outcome]) -> String {
    let (t, _) = by_sig(outcomes);
    let secs: f64 = outcomes.iter().map(|o| o.took.as_secs_f64()).sum();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuite name=\"kiln-conformance\" tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"{secs:.3}\">",
        t.total(),
        t.failed + t.unwritten
    );
    for o in outcomes {
        let _ = write!(
            s,
            "  <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
            xml_escape(o.codename),
            o.sig,
            o.took.as_secs_f64()
        );
        match &o.status {
            Status::Passed => match &o.flaky {
                None => s.push_str("/>\n"),
                Some(why) => {
                    let _ = writeln!(
                        s,
                        ">\n    <system-out>flaky: passed on retry; the earlier attempt: {}</system-out>\n  </testcase>",
                        xml_escape(why)
                    );
                }
            },
            Status::Failed(why) => {
                let _ = writeln!(
                    s,
                    ">\n    <failure type=\"Failed\" message=\"{}\"/>\n  </testcase>",
                    xml_escape(why)
                );
            }
            Status::Unwritten(why) => {
                let _ = writeln!(
                    s,
                    ">\n    <failure type=\"Unwritten\" message=\"{}\"/>\n  </testcase>",
                    xml_escape(why)
                );
            }
        }
    }
    s.push_str("</testsuite>\n");
    s
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// docs/conformance.md: the score, the table by SIG, and every entry that does not pass with its reason.
pub fn markdown(outcomes: &[Outcome], list_commit: &str, kiln_commit: &str) -> String {
    let (t, sigs) = by_sig(outcomes);
    let mut s = String::from("# Conformance\n\n");
    let _ = writeln!(
        s,
        "Written by `kiln-conformance --report docs/conformance.md` (see tests/conformance/README.md) on a \
         3-host lab cluster, kiln at `{kiln_commit}`. The list is upstream's \
         test/conformance/testdata/conformance.yaml (kubernetes/kubernetes at `{list_commit}`): every entry \
         is a kiln test of its own, named by its codename; an entry without one counts as failed.\n"
    );
    let _ = writeln!(
        s,
        "**Score: {} of {} entries pass ({:.1}%).** {} fail, {} of which have no kiln test yet.\n",
        t.passed,
        t.total(),
        pct(t.passed, t.total()),
        t.failed + t.unwritten,
        t.unwritten
    );
    s.push_str("| SIG | passed | failed | no test yet | entries | score |\n|---|---:|---:|---:|---:|---:|\n");
    for (sig, x) in &sigs {
        let _ = writeln!(
            s,
            "| {sig} | {} | {} | {} | {} | {:.0}% |",
            x.passed,
            x.failed,
            x.unwritten,
            x.total(),
            pct(x.passed, x.total())
        );
    }
    s.push_str("\n## Entries that do not pass\n\n| entry | reason |\n|---|---|\n");
    for o in outcomes {
        let why = match &o.status {
            Status::Passed => continue,
            Status::Failed(w) => format!("FAILED: {w}"),
            Status::Unwritten(w) => w.clone(),
        };
        let _ = writeln!(s, "| {} | {} |", md_cell(o.codename), md_cell(&why));
    }
    s.push_str("\n## Entries that pass\n\n");
    for o in outcomes.iter().filter(|o| o.passed()) {
        let _ = writeln!(s, "- {}", md_cell(o.codename));
    }
    s
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn outcome(codename: &'static str, status: Status) -> Outcome {
        Outcome {
            codename,
            slug: crate::slug::slug(codename),
            sig: crate::slug::sig(codename),
            status,
            took: Duration::from_millis(1500),
            flaky: None,
        }
    }

    fn sample() -> Vec<Outcome> {
        vec![
            outcome("[sig-node] A <b> & 'c' [Conformance]", Status::Passed),
            outcome(
                "[sig-node] B [Conformance]",
                Status::Failed("want \"x\"\u{1}".into()),
            ),
            outcome(
                "[sig-apps] C | D [Conformance]",
                Status::Unwritten("no kiln test yet".into()),
            ),
        ]
    }

    #[test]
    fn summary_counts_unwritten_entries_as_failed() {
        let s = summary(&sample());
        assert!(
            s.starts_with(
                "1 passed, 2 failed (1 of them without a kiln test yet) of 3 entries: 33.3%"
            ),
            "{s}"
        );
        assert!(s.contains("sig-apps") && s.contains("sig-node"), "{s}");
    }

    #[test]
    fn a_pass_on_retry_counts_as_passed_and_is_named_flaky() {
        let mut o = outcome("[sig-node] E [Conformance]", Status::Passed);
        o.flaky = Some("timed out <waiting>".into());
        let all = vec![o, outcome("[sig-node] F [Conformance]", Status::Passed)];
        let s = summary(&all);
        assert!(s.starts_with("2 passed, 0 failed"), "{s}");
        assert_eq!(s.matches("FLAKY").count(), 1, "{s}");
        assert!(
            s.contains("FLAKY (failed, then passed on retry): [sig-node] E [Conformance] (timed out <waiting>)"),
            "{s}"
        );
        let x = junit(&all);
        assert!(x.contains("failures=\"0\""), "{x}");
        assert!(x.contains("<system-out>flaky: passed on retry; the earlier attempt: timed out &lt;waiting&gt;</system-out>"), "{x}");
    }

    #[test]
    fn junit_escapes_names_and_reasons() {
        let x = junit(&sample());
        assert!(x.contains("tests=\"3\" failures=\"2\""), "{x}");
        assert!(
            x.contains("name=\"[sig-node] A &lt;b&gt; &amp; &apos;c&apos; [Conformance]\""),
            "{x}"
        );
        assert!(x.contains("message=\"want &quot;x&quot; \""), "{x}");
        assert!(x.contains("type=\"Unwritten\""), "{x}");
        assert_eq!(x.matches("<testcase").count(), 3);
    }

    #[test]
    fn markdown_lists_every_entry_that_does_not_pass() {
        let m = markdown(&sample(), "abc", "def");
        assert!(m.contains("**Score: 1 of 3 entries pass (33.3%).**"), "{m}");
        assert!(
            m.contains("| [sig-apps] C \\| D [Conformance] | no kiln test yet |"),
            "{m}"
        );
        assert!(m.contains("FAILED: want"), "{m}");
        assert!(m.contains("- [sig-node] A <b>"), "{m}");
    }
}
