//! Runs the selected entries, several at once (each in its own namespace, as upstream's parallel
//! e2e runs do), each under a timeout, and records one outcome per entry of the list.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use regex::Regex;

use crate::cases::{self, Case};
use crate::ctx::{Cluster, Ctx};
use crate::list::{Listed, LIST};
use crate::{reasons, slug};

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Passed,
    /// A written case whose MUST did not hold (or that errored or ran out of time).
    Failed(String),
    /// No case written for the entry yet: the reason says what kiln lacks.
    Unwritten(String),
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub codename: &'static str,
    pub slug: String,
    pub sig: &'static str,
    pub status: Status,
    pub took: Duration,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.status == Status::Passed
    }
}

/// Which entries a run covers: `focus` and `skip` are regexes over the codename, as ginkgo's.
pub struct Selection {
    pub focus: Option<Regex>,
    pub skip: Option<Regex>,
}

impl Selection {
    pub fn includes(&self, codename: &str) -> bool {
        self.focus.as_ref().is_none_or(|f| f.is_match(codename))
            && !self.skip.as_ref().is_some_and(|s| s.is_match(codename))
    }

    pub fn entries(&self) -> Vec<&'static Listed> {
        LIST.iter().filter(|l| self.includes(l.codename)).collect()
    }
}

pub struct Options {
    pub parallel: usize,
    pub case_timeout: Duration,
}

/// Run `entries`; outcomes come back in the list's order.
pub async fn run(
    cluster: Arc<Cluster>,
    entries: &[&'static Listed],
    opts: &Options,
) -> Vec<Outcome> {
    let by_name: HashMap<&str, &'static Case> =
        cases::all().into_iter().map(|c| (c.codename, c)).collect();
    let jobs = entries.iter().enumerate().map(|(i, l)| {
        let case = by_name.get(l.codename).copied();
        let cluster = cluster.clone();
        async move {
            let start = Instant::now();
            let status = match case {
                None => Status::Unwritten(reasons::unwritten(l.codename)),
                Some(c) => run_one(cluster, c, opts.case_timeout).await,
            };
            let outcome = Outcome {
                codename: l.codename,
                slug: slug::slug(l.codename),
                sig: slug::sig(l.codename),
                status,
                took: start.elapsed(),
            };
            if case.is_some() {
                let mark = match &outcome.status {
                    Status::Passed => "PASS".to_string(),
                    Status::Failed(why) => format!("FAIL: {why}"),
                    Status::Unwritten(_) => unreachable!("a written case is never unwritten"),
                };
                eprintln!(
                    "[{:>5.1}s] {} {mark}",
                    outcome.took.as_secs_f64(),
                    l.codename
                );
            }
            (i, outcome)
        }
    });
    // [Serial] entries run alone after the others, as upstream runs them: they touch cluster-wide state.
    let (serial, parallel): (Vec<_>, Vec<_>) = jobs
        .enumerate()
        .partition(|(i, _)| entries[*i].codename.contains("[Serial]"));
    let mut done: Vec<(usize, Outcome)> = stream::iter(parallel.into_iter().map(|(_, j)| j))
        .buffer_unordered(opts.parallel.max(1))
        .collect()
        .await;
    for (_, job) in serial {
        done.push(job.await);
    }
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, o)| o).collect()
}

async fn run_one(cluster: Arc<Cluster>, case: &'static Case, timeout: Duration) -> Status {
    let ctx = match Ctx::new(cluster, case.namespace).await {
        Ok(c) => c,
        Err(e) => return Status::Failed(format!("making the test namespace: {e}")),
    };
    let result = tokio::time::timeout(timeout, (case.run)(&ctx)).await;
    ctx.cleanup().await;
    match result {
        Ok(Ok(())) => Status::Passed,
        Ok(Err(e)) => Status::Failed(one_line(&e.to_string())),
        Err(_) => Status::Failed(format!("the case ran over its {}s", timeout.as_secs())),
    }
}

/// Reports hold one line per failure: newlines folded, long messages cut.
fn one_line(s: &str) -> String {
    let joined: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() > 400 {
        let cut: String = joined.chars().take(400).collect();
        format!("{cut}…")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn focus_and_skip_select_by_codename() {
        let sel = Selection {
            focus: Some(Regex::new(r"\[sig-node\]").unwrap()),
            skip: Some(Regex::new("Probing").unwrap()),
        };
        let picked = sel.entries();
        assert!(!picked.is_empty());
        assert!(picked.iter().all(|l| l.codename.starts_with("[sig-node]")));
        assert!(picked.iter().all(|l| !l.codename.contains("Probing")));
        let all = Selection {
            focus: None,
            skip: None,
        };
        assert_eq!(all.entries().len(), LIST.len());
    }

    #[test]
    fn failures_print_on_one_line() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        assert_eq!(one_line(&"x".repeat(500)).chars().count(), 401);
    }
}
