//! --auto-compaction-retention: compact history through Raft, like etcd's compactor.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::proto::PbCompactionRequest;
use tokio::sync::watch;

use crate::config::{CompactionMode, ConfigError};
use crate::mvcc::Mvcc;
use crate::raft::types::{store_request::Op, KilnRaft, StoreRequest};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    Disabled,
    /// Keep this much wall-clock history.
    Periodic(Duration),
    /// Keep this many revisions.
    Revisions(i64),
}

impl Retention {
    pub fn parse(mode: CompactionMode, text: &str) -> Result<Self, ConfigError> {
        let bad = || ConfigError::Retention(text.to_string());
        let text = text.trim();
        match mode {
            CompactionMode::Revision => {
                let n: i64 = text.parse().map_err(|_| bad())?;
                Ok(if n <= 0 {
                    Retention::Disabled
                } else {
                    Retention::Revisions(n)
                })
            }
            CompactionMode::Periodic => {
                // A bare number means hours, as in etcd.
                let d = if let Ok(hours) = text.parse::<f64>() {
                    Duration::from_secs_f64((hours * 3600.0).max(0.0))
                } else {
                    parse_duration(text).ok_or_else(bad)?
                };
                Ok(if d.is_zero() {
                    Retention::Disabled
                } else {
                    Retention::Periodic(d)
                })
            }
        }
    }
}

fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (num, unit) = text.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

const REVISION_MODE_INTERVAL: Duration = Duration::from_secs(300);

pub async fn run(
    retention: Retention,
    raft: KilnRaft,
    mvcc: Arc<Mvcc>,
    mut shutdown: watch::Receiver<bool>,
) {
    let step = match retention {
        Retention::Disabled => return,
        Retention::Periodic(d) => (d / 10).max(Duration::from_secs(1)),
        Retention::Revisions(_) => REVISION_MODE_INTERVAL,
    };
    let mut samples: VecDeque<(Instant, i64)> = VecDeque::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(step) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        let now = Instant::now();
        let target = match retention {
            Retention::Disabled => return,
            Retention::Periodic(keep) => {
                samples.push_back((now, mvcc.revision()));
                let mut target = None;
                while let Some(&(at, rev)) = samples.front() {
                    if now.duration_since(at) < keep {
                        break;
                    }
                    target = Some(rev);
                    samples.pop_front();
                }
                target
            }
            Retention::Revisions(keep) => Some(mvcc.revision() - keep),
        };
        let Some(target) = target else { continue };
        let metrics = raft.metrics().borrow().clone();
        if metrics.current_leader != Some(metrics.id) || target <= mvcc.compact_revision() {
            continue;
        }
        let req = StoreRequest::new(Op::Compact(PbCompactionRequest {
            revision: target,
            physical: false,
        }));
        match raft.client_write(req).await {
            Ok(r) if r.data.error_code == 0 => tracing::info!(revision = target, "auto compaction"),
            Ok(r) => {
                tracing::debug!(revision = target, error = %r.data.error_message, "auto compaction skipped")
            }
            Err(e) => tracing::warn!(error = %e, "auto compaction"),
        }
    }
}
