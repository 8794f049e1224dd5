//! `kiln apply -f cluster.yaml`: make the cluster match the file. What differs between the file and
//! the running cluster ([`plan::Live`]: the cluster.yaml last applied, registered nodes, recorded store
//! members, and what `kiln init` would change on each host now) becomes an ordered list of actions
//! ([`plan::plan`]), each a list of steps as data ([`steps`]) run by a walker that decides order and
//! gating only; the side effects go through [`steps::Executor`] (the command's real one, a recording
//! double in the tests). Nothing is remembered between runs: a re-run computes the plan again from the
//! cluster, so an interrupted apply converges, and a converged cluster plans nothing.

pub mod plan;
pub mod steps;
