//! kiln's conformance harness: every entry of upstream's conformance list (`list.rs`) as a test of its
//! own (`cases/`), written from the entry's description and its e2e source, run against a live cluster
//! through real clients (kube-rs, kubectl) by `kiln-conformance`, which prints JUnit, a score by SIG and
//! `docs/conformance.md`, and gates on `passing.txt` (entries that passed once must keep passing).
//!
//! An entry without a kiln test fails with a one-line reason (`reasons.rs`): nothing is skipped silently.

pub mod cases;
pub mod ctx;
pub mod doc_section;
pub mod error;
pub mod gate;
pub mod kube_rs_e2e;
pub mod list;
pub mod peer_gate;
pub mod python_e2e;
pub mod reasons;
pub mod report;
pub mod runner;
pub mod slug;
