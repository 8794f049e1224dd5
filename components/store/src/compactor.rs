//! --auto-compaction-retention: compact history through Raft, like etcd's compactor.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::proto::PbCompactionRequest;
use tokio::sync::watch;

use crate::command::{store_request::Op, KilnRaft, StoreRequest};
use crate::config::Retention;
use crate::storage::mvcc::Mvcc;

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
