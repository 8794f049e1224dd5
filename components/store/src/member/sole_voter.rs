//! Linearizable reads on a cluster of one voter, without a trip through the Raft core.
//!
//! A read index has to cover every write acknowledged before the read began. On a leader that
//! is the only voter, nothing can be committed without this member, and no other member can be
//! elected without its vote. Every write it acknowledges is applied here before the answer
//! goes out (see `waiters`), so once the leader's first entry of its term is applied — which
//! brings in everything committed under earlier terms, such as writes acknowledged before a
//! restart that the state machine lost with its unsynced tail — the state as it stands covers
//! every acknowledged write. openraft's read index would ask the core for the same answer; on
//! the Raft thread that is a wakeup there and one back, which doubled a 1-client range's time.
//!
//! Anything else (more voters, a membership change in flight, a fresh term not yet applied)
//! goes through the core.

use openraft::{RaftMetrics, ServerState};

use crate::command::MemberNode;

/// Whether `m` shows a leader that is the only voter and has applied an entry of its own term.
pub fn reads_locally(m: &RaftMetrics<u64, MemberNode>) -> bool {
    let membership = m.membership_config.membership();
    let sole_voter = match membership.get_joint_config().as_slice() {
        [only] => only.len() == 1 && only.contains(&m.id),
        _ => false,
    };
    m.state == ServerState::Leader
        && m.current_leader == Some(m.id)
        && sole_voter
        && m.last_applied
            .is_some_and(|l| l.leader_id.term == m.current_term)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use openraft::{CommittedLeaderId, LogId, Membership, StoredMembership};

    fn metrics(
        voters: &[&[u64]],
        state: ServerState,
        term: u64,
        applied_term: u64,
    ) -> RaftMetrics<u64, MemberNode> {
        let configs: Vec<BTreeSet<u64>> =
            voters.iter().map(|c| c.iter().copied().collect()).collect();
        let nodes: BTreeMap<u64, MemberNode> = configs
            .iter()
            .flatten()
            .map(|id| (*id, MemberNode::default()))
            .collect();
        let mut m = RaftMetrics::new_initial(1);
        m.state = state;
        m.current_leader = (state == ServerState::Leader).then_some(1);
        m.current_term = term;
        m.last_applied = Some(LogId::new(CommittedLeaderId::new(applied_term, 1), 7));
        m.membership_config =
            Arc::new(StoredMembership::new(None, Membership::new(configs, nodes)));
        m
    }

    #[test]
    fn only_a_sole_voter_leader_that_applied_its_term_reads_locally() {
        assert!(reads_locally(&metrics(&[&[1]], ServerState::Leader, 3, 3)));
        // Its term's first entry not applied yet: what earlier terms committed may be missing.
        assert!(!reads_locally(&metrics(&[&[1]], ServerState::Leader, 3, 2)));
        // More voters, or a change to more in flight: a quorum has to confirm the leader.
        assert!(!reads_locally(&metrics(
            &[&[1, 2, 3]],
            ServerState::Leader,
            3,
            3
        )));
        assert!(!reads_locally(&metrics(
            &[&[1], &[1, 2]],
            ServerState::Leader,
            3,
            3
        )));
        // Not the leader, or some other member is the sole voter.
        assert!(!reads_locally(&metrics(
            &[&[1]],
            ServerState::Follower,
            3,
            3
        )));
        assert!(!reads_locally(&metrics(&[&[2]], ServerState::Leader, 3, 3)));
    }
}
