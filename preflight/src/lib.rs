//! kiln-preflight: host checks as data. Facts are gathered from a host (by the CLI, over its transport,
//! with [`GATHER_SCRIPT`]); each check is a pure function from facts to findings, named like kubeadm's so
//! that `--ignore-preflight-errors=NAME` means the same thing to operators. [`CLUSTER_CHECKS`] look at
//! every host's facts at once, and [`fix_plan`] turns findings into the remedies of `--fix`.

mod checks;
mod cluster;
mod facts;
mod firewall;
mod fix;
mod gather;

pub use checks::{is_ignored, run_checks, Check, Finding, Outcome, Severity, CHECKS};
pub use cluster::{
    run_cluster_checks, ClockSample, ClusterCheck, HostFacts, CLOCK_SKEW_ERROR_SECS,
    CLOCK_SKEW_WARNING_SECS, CLUSTER_CHECKS,
};
pub use facts::{parse_listening_ports, Facts, Role};
pub use firewall::{needed_ports, Needed};
pub use fix::{fix_plan, fixable, Remediation, Step, REMEDIATIONS};
pub use gather::{parse_gathered, EXECUTABLES, GATHER_SCRIPT};
