//! Runs the selected entries, several at once (each in its own namespace, as upstream's parallel
//! e2e runs do), each under a timeout, and records one outcome per entry of the list.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use regex::Regex;
use tokio::sync::Semaphore;

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
    /// Passed on a later attempt (`--flake-attempts`): why the earlier one failed. Reported as a flake.
    pub flaky: Option<String>,
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

/// Pod-heavy entries (each makes half the pods the nodes allow) run one at a time: two at once fill
/// every node and leave the other entries' pods Pending ("Too many pods") until their waits run out.
const POD_HEAVY_SLOTS: usize = 1;

/// How long a pod-heavy entry's namespace may take to go before the next heavy entry starts anyway.
const HEAVY_NAMESPACE_GONE: Duration = Duration::from_secs(300);

/// Entries that spend minutes in upstream's fixed waits while the cluster does little for them (a
/// probe watched for 4 minutes, a CronJob watched over several schedule minutes). They get a pool
/// of `parallel` slots of their own beside the others', so they neither hold the busy entries'
/// slots nor run alone at the end. Substrings of the codename.
const LONG_WAITS: &[&str] = &["Probing container", "[Slow]", "CronJob"];

fn waits_long(codename: &str) -> bool {
    LONG_WAITS.iter().any(|w| codename.contains(w))
}

pub struct Options {
    pub parallel: usize,
    pub case_timeout: Duration,
    /// Runs of a failing case before it counts as failed (ginkgo's `--flake-attempts`; 1: no retry).
    /// A case that passes on a later run is a pass that the summary and the JUnit file call flaky.
    pub attempts: usize,
}

/// Run `entries`; outcomes come back in the list's order.
pub async fn run(
    cluster: Arc<Cluster>,
    entries: &[&'static Listed],
    opts: &Options,
) -> Vec<Outcome> {
    let by_name: HashMap<&str, &'static Case> =
        cases::all().into_iter().map(|c| (c.codename, c)).collect();
    let heavy = Arc::new(Semaphore::new(POD_HEAVY_SLOTS));
    let attempts = opts.attempts.max(1);
    let jobs = entries.iter().enumerate().map(|(i, l)| {
        let case = by_name.get(l.codename).copied();
        let cluster = cluster.clone();
        let heavy = heavy.clone();
        async move {
            // The slot is held from before the case starts until its namespace is gone, so the
            // clock of an entry waiting for it does not start early.
            let _slot = match cases::pod_heavy(l.codename) {
                true => Some(
                    heavy
                        .acquire_owned()
                        .await
                        .expect("the semaphore is never closed"),
                ),
                false => None,
            };
            let start = Instant::now();
            let (status, flaky) = match case {
                None => (Status::Unwritten(reasons::unwritten(l.codename)), None),
                Some(c) => {
                    let gone = cases::pod_heavy(l.codename).then_some(HEAVY_NAMESPACE_GONE);
                    run_attempts(&cluster, c, opts.case_timeout, gone, attempts).await
                }
            };
            let outcome = Outcome {
                codename: l.codename,
                slug: slug::slug(l.codename),
                sig: slug::sig(l.codename),
                status,
                took: start.elapsed(),
                flaky,
            };
            if case.is_some() {
                let mark = match &outcome.status {
                    Status::Passed if outcome.flaky.is_some() => {
                        "PASS (flaky: passed on retry)".to_string()
                    }
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
    let (long, busy): (Vec<_>, Vec<_>) = parallel
        .into_iter()
        .partition(|(i, _)| waits_long(entries[*i].codename));
    let slots = opts.parallel.max(1);
    let pool = |jobs: Vec<(usize, _)>| {
        stream::iter(jobs.into_iter().map(|(_, j)| j))
            .buffer_unordered(slots)
            .collect::<Vec<(usize, Outcome)>>()
    };
    let (mut done, more) = futures::join!(pool(busy), pool(long));
    done.extend(more);
    for (_, job) in serial {
        done.push(job.await);
    }
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, o)| o).collect()
}

/// Runs `case` up to `attempts` times until it passes. A pass after a failure comes back with the first
/// failure (a flake); a last failure, or a pass at once, with none.
async fn run_attempts(
    cluster: &Arc<Cluster>,
    case: &'static Case,
    timeout: Duration,
    gone: Option<Duration>,
    attempts: usize,
) -> (Status, Option<String>) {
    let mut first_failure = None;
    let mut attempt = 1;
    loop {
        match run_one(cluster.clone(), case, timeout, gone).await {
            Status::Passed => return (Status::Passed, first_failure),
            Status::Failed(why) if attempt < attempts => {
                eprintln!(
                    "[retry] {} failed on attempt {attempt}: {why}",
                    case.codename
                );
                first_failure.get_or_insert(why);
                attempt += 1;
            }
            other => return (other, None),
        }
    }
}

/// Run one case in a fresh namespace; with `wait_gone`, wait (up to that long) for the namespace
/// to be deleted before returning.
async fn run_one(
    cluster: Arc<Cluster>,
    case: &'static Case,
    timeout: Duration,
    wait_gone: Option<Duration>,
) -> Status {
    let ctx = match Ctx::new(cluster, case.namespace).await {
        Ok(c) => c,
        Err(e) => return Status::Failed(format!("making the test namespace: {e}")),
    };
    let result = tokio::time::timeout(timeout, (case.run)(&ctx)).await;
    ctx.cleanup().await;
    if let Some(limit) = wait_gone {
        ctx.wait_namespace_gone(limit).await;
    }
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
    fn long_waits_have_their_own_pool_and_heavy_entries_are_written_cases() {
        let probe = "[sig-node] Probing container should *not* be restarted with a tcp:8080 liveness probe [NodeConformance] [Conformance]";
        let quick = "[sig-node] ConfigMap should be consumable via the environment [NodeConformance] [Conformance]";
        assert!(waits_long(probe) && !waits_long(quick));
        let written: Vec<&str> = cases::all().iter().map(|c| c.codename).collect();
        for heavy in crate::cases::garbage_collector_pod_heavy() {
            assert!(written.contains(heavy), "{heavy} is not a written case");
            assert!(cases::pod_heavy(heavy));
        }
        assert!(!cases::pod_heavy(quick));
    }

    #[test]
    fn failures_print_on_one_line() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        assert_eq!(one_line(&"x".repeat(500)).chars().count(), 401);
    }
}
