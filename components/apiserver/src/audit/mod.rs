//! Audit logging, as upstream's `k8s.io/apiserver/pkg/audit` with the log backend: a policy
//! (`policy.rs`) decides per request how much is recorded, the pipeline hooks (`filter.rs`) build
//! `audit.k8s.io/v1` Events (`event.rs`) stage by stage, and a non-blocking writer puts them in a
//! size-rotated JSON-lines file or on stdout (`sink.rs`).
//!
//! Admission and other late stages add annotations with [`annotate`].

pub mod event;
pub mod filter;
pub mod policy;
pub mod sink;

use std::sync::Arc;

pub use filter::{annotate, authorization, begin, impersonated, SourceIp};
pub use policy::{Policy, PolicyError};
pub use sink::{Rotation, Sink, SinkError};

use crate::config::Options;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit policy: {0}")]
    Policy(#[from] PolicyError),
    #[error("{0}")]
    Sink(#[from] SinkError),
}

/// The policy and the backend of a server that audits.
pub struct Auditor {
    pub policy: Policy,
    pub sink: Sink,
}

impl Auditor {
    /// From `--audit-policy-file` and `--audit-log-*`. A policy is loaded (and a bad one refused)
    /// whenever it is given; without a log path there is no backend, so nothing is audited, as
    /// upstream.
    pub fn from_options(o: &Options) -> Result<Option<Arc<Auditor>>, AuditError> {
        let Some(policy_file) = o.audit_policy_file.as_deref().filter(|p| !p.is_empty()) else {
            if o.audit_log_path.is_some() {
                tracing::warn!("no audit policy file provided, no events will be recorded");
            }
            return Ok(None);
        };
        let policy = Policy::load(policy_file)?;
        let Some(log) = o.audit_log_path.as_deref().filter(|p| !p.is_empty()) else {
            tracing::warn!("audit policy given without --audit-log-path: no audit backend");
            return Ok(None);
        };
        let sink = Sink::open(
            log,
            Rotation {
                max_size_mb: o.audit_log_maxsize,
                max_backups: o.audit_log_maxbackup,
                max_age_days: o.audit_log_maxage,
            },
        )?;
        tracing::info!(policy = policy_file, log, "audit logging on");
        Ok(Some(Arc::new(Auditor { policy, sink })))
    }
}

/// Wraps the API router with the audit filter (always: every response carries its Audit-Id).
pub fn layer(app: axum::Router, auditor: Option<Arc<Auditor>>) -> axum::Router {
    app.layer(axum::middleware::from_fn_with_state(
        auditor,
        filter::filter,
    ))
}
