//! `kiln upgrade`: moving a running cluster to the binaries this kiln would push. Today `plan`: what
//! runs where, the target, the order and what restarts, refused with the reason when the version skew
//! policy forbids the move ([`skew::RULES`]). `apply` builds on this plan.

pub mod gather;
pub mod plan;
pub mod skew;
pub mod stamp;
