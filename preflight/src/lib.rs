//! kiln-preflight: host checks as data. Facts are gathered from a host (by the CLI, over its transport);
//! each check is a pure function from facts to findings, named like kubeadm's so that
//! `--ignore-preflight-errors=NAME` means the same thing to operators.

mod checks;
mod facts;

pub use checks::{run_checks, Check, Finding, Severity, CHECKS};
pub use facts::{parse_listening_ports, Facts, Role};
