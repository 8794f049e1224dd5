//! What the PostFilter (preemption) decides for a pod that fits nowhere: the node it chose with the
//! victims to evict, and what becomes of the pod's nomination. Plain data: [`crate::preemption`]
//! produces it, the FitError carries it, the scheduling loop acts on it.

use crate::pod_info::PodInfo;

/// A node the preemptor fits on once its victims (most important first) are gone.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub node: String,
    pub victims: Vec<PodInfo>,
    pub pdb_violations: usize,
}

/// What becomes of the pod's nomination.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Nomination {
    /// Left as it is (the pod may not preempt now, or preemption did not run).
    #[default]
    Unchanged,
    /// Preemption cannot help anywhere: the pod is nominated nowhere.
    Clear,
    /// Evict the victims and nominate the pod to the candidate's node.
    Preempt(Box<Candidate>),
}

/// The PostFilter's verdict: its message for the FitError (none when it found a candidate, as
/// upstream's Success status carries none) and the nomination.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PostFilterResult {
    pub message: Option<String>,
    pub nomination: Nomination,
}
