//! `kiln upgrade`: moving a running cluster to the binaries this kiln would push. `plan`: what
//! runs where, the target, the order and what restarts, refused with the reason when the version skew
//! policy forbids the move ([`skew::RULES`]). `apply` walks that plan host by host ([`steps::STEPS`]),
//! gated, with a rollback per host ([`steps::ROLLBACK`]).

pub mod apply;
pub mod drain;
pub mod gather;
pub mod host_actions;
pub mod plan;
pub mod skew;
pub mod stamp;
pub mod steps;
