//! Why a pod fits nowhere: upstream's FitError (how many nodes gave each reason, what the PreFilter
//! and the PostFilter said) and its FailedScheduling message. The algorithm fills it in, preemption
//! reads it and adds its verdict.

use std::collections::BTreeMap;

use crate::filters::{Code, Rejection};
use crate::preemption_verdict::Nomination;

/// upstream's ErrNoNodesAvailable.
pub const NO_NODES_MESSAGE: &str = "no nodes available to schedule pods";

#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleError {
    NoNodes,
    Unfit(FitError),
    /// A plugin failed (not a verdict about nodes): the attempt is retried after backoff.
    Internal(String),
}

impl ScheduleError {
    /// The FailedScheduling message, word for word as kube-scheduler writes it.
    pub fn message(&self) -> String {
        match self {
            ScheduleError::NoNodes => NO_NODES_MESSAGE.to_string(),
            ScheduleError::Unfit(e) => e.message(),
            ScheduleError::Internal(e) => e.clone(),
        }
    }
}

/// How many nodes gave each reason, and what the PreFilter and PostFilter (preemption) said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FitError {
    pub num_all_nodes: usize,
    pub reasons: BTreeMap<String, usize>,
    /// A PreFilter rejection: it stands for every node, so no per-node reasons are shown.
    pub pre_filter: Option<String>,
    /// Nodes whose rejection preemption could resolve (code Unschedulable).
    pub preemptable: Vec<String>,
    pub post_filter: Option<String>,
    /// What preemption decided about the pod's nominated node.
    pub nomination: Nomination,
}

/// "<count> <reason>" strings sorted as strings (Go's sort.Strings), joined by ", ".
pub(crate) fn histogram<'a>(counts: impl Iterator<Item = (&'a str, usize)>) -> String {
    let mut parts: Vec<String> = counts
        .filter(|(_, n)| *n > 0)
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    parts.sort();
    parts.join(", ")
}

impl FitError {
    pub fn record(&mut self, node: &str, rejection: &Rejection) {
        for r in &rejection.reasons {
            *self.reasons.entry(r.clone()).or_insert(0) += 1;
        }
        if rejection.code == Code::Unschedulable {
            self.preemptable.push(node.to_string());
        }
    }

    /// "0/3 nodes are available: 1 node(s) had untolerated taint {…}, 2 Insufficient cpu.
    /// preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No
    /// preemption victims found for incoming pod."
    pub fn message(&self) -> String {
        let mut msg = format!("0/{} nodes are available:", self.num_all_nodes);
        if let Some(pre) = &self.pre_filter {
            msg.push_str(&format!(" {pre}."));
        } else {
            let parts = histogram(self.reasons.iter().map(|(r, n)| (r.as_str(), *n)));
            if !parts.is_empty() {
                msg.push_str(&format!(" {parts}."));
            }
        }
        if let Some(post) = &self.post_filter {
            msg.push_str(&format!(" {post}"));
        }
        msg
    }
}
