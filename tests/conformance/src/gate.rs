//! The CI gate: `passing.txt` holds the slugs of entries that passed on main. It only grows; a run in
//! which one of them does not pass fails, and an entry may leave the file only with a reason in the
//! commit that removes it. Newly passing entries are named so they can be added (`--update-passing`).

use std::collections::BTreeSet;
use std::path::Path;

use crate::list::LIST;
use crate::runner::Outcome;
use crate::slug::slug;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {slug:?} is no entry of the conformance list")]
    Unknown {
        path: String,
        line: usize,
        slug: String,
    },
}

/// The ids of a passing file with their line numbers (from 1): `#` comments and blank lines left out.
/// Conformance slugs here, pytest node ids in tests/python-e2e/passing.txt.
pub fn ids(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, raw)| (i + 1, raw.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
}

/// The slugs in a passing file (`#` comments and blank lines ignored); each must name an entry.
pub fn parse(path: &str, text: &str) -> Result<BTreeSet<String>, GateError> {
    let known: BTreeSet<String> = LIST.iter().map(|l| slug(l.codename)).collect();
    let mut out = BTreeSet::new();
    for (n, line) in ids(text) {
        if !known.contains(line) {
            return Err(GateError::Unknown {
                path: path.to_string(),
                line: n,
                slug: line.to_string(),
            });
        }
        out.insert(line.to_string());
    }
    Ok(out)
}

pub fn read(path: &Path) -> Result<BTreeSet<String>, GateError> {
    let text = std::fs::read_to_string(path).map_err(|source| GateError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&path.display().to_string(), &text)
}

#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    /// In the passing file and not passed (for the Python suite, also: not run): these fail the gate.
    pub regressed: Vec<String>,
    /// Passed but not in the file yet.
    pub newly_passing: Vec<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.regressed.is_empty()
    }
}

/// Compare a run with the passing set; entries the run did not select are not judged.
pub fn judge(passing: &BTreeSet<String>, outcomes: &[Outcome]) -> Verdict {
    let mut v = Verdict::default();
    for o in outcomes {
        match (passing.contains(&o.slug), o.passed()) {
            (true, false) => v.regressed.push(format!("{} ({})", o.codename, reason(o))),
            (false, true) => v.newly_passing.push(o.slug.clone()),
            _ => {}
        }
    }
    v
}

fn reason(o: &Outcome) -> String {
    match &o.status {
        crate::runner::Status::Passed => String::new(),
        crate::runner::Status::Failed(w) | crate::runner::Status::Unwritten(w) => w.clone(),
    }
}

/// The file with `add` merged in, sorted, its header comment kept: it only grows.
pub fn grown(text: &str, add: &[String]) -> String {
    let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
    let mut slugs: BTreeSet<String> = ids(text).map(|(_, l)| l.to_string()).collect();
    slugs.extend(add.iter().cloned());
    let mut out = String::new();
    for h in header {
        out.push_str(h);
        out.push('\n');
    }
    for s in slugs {
        out.push_str(&s);
        out.push('\n');
    }
    out
}

/// Write `grown` through a temporary file and a rename, so an interrupted run leaves the old file.
pub fn write_grown(path: &Path, add: &[String]) -> Result<(), GateError> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tmp = path.with_extension("txt.tmp");
    let err = |source| GateError::Write {
        path: path.display().to_string(),
        source,
    };
    std::fs::write(&tmp, grown(&text, add)).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runner::Status;

    fn outcome(i: usize, status: Status) -> Outcome {
        let codename = LIST[i].codename;
        Outcome {
            codename,
            slug: slug(codename),
            sig: crate::slug::sig(codename),
            status,
            took: Duration::ZERO,
            flaky: None,
        }
    }

    #[test]
    fn a_listed_entry_that_fails_fails_the_gate() {
        let passing: BTreeSet<String> = [slug(LIST[0].codename), slug(LIST[1].codename)].into();
        let outcomes = vec![
            outcome(0, Status::Passed),
            outcome(1, Status::Failed("boom".into())),
            outcome(2, Status::Passed),
            outcome(3, Status::Unwritten("no kiln test yet".into())),
        ];
        let v = judge(&passing, &outcomes);
        assert!(!v.ok());
        assert_eq!(v.regressed, [format!("{} (boom)", LIST[1].codename)]);
        assert_eq!(v.newly_passing, [slug(LIST[2].codename)]);
        // Entries the run did not select are not judged.
        assert!(judge(&passing, &outcomes[2..]).ok());
    }

    #[test]
    fn the_file_names_only_entries_and_only_grows() {
        let first = slug(LIST[0].codename);
        let text = format!("# header\n{first}\n\n");
        assert_eq!(parse("p.txt", &text).unwrap().len(), 1);
        let bad = parse("p.txt", "# h\nnot-an-entry\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            bad,
            "p.txt:2: \"not-an-entry\" is no entry of the conformance list"
        );
        let second = slug(LIST[1].codename);
        let grown = grown(&text, std::slice::from_ref(&second));
        let mut want = [first.clone(), second];
        want.sort();
        assert_eq!(grown, format!("# header\n{}\n", want.join("\n")));
    }
}
