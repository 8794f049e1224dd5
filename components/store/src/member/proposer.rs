//! Group commit for client writes, as etcd does it: commands that arrive while earlier ones
//! are still on their way through Raft are proposed together as one Raft entry, so one log
//! append — one fsync, one replication round — carries all of them.
//!
//! openraft 0.9 appends (and fsyncs) every proposal on its own, one after the other, so
//! without this the store does one fsync per write however many clients write at once. The
//! state machine applies a batch's commands in order, each in its own revision, exactly as if
//! each had been an entry of its own; a lone command is proposed as it is.
//!
//! Each caller's answer comes straight from the state machine once the entry is applied (see
//! `waiters`), not through openraft's core, which may be blocked in the next batch's fsync.
//! openraft's own answer still settles a proposal that fails or is never applied here.

use std::sync::Arc;

use openraft::error::RaftError;
use prost::Message as _;
use tokio::sync::{mpsc, oneshot, watch};

use crate::command::{store_request::Op, KilnRaft, StoreBatch, StoreRequest};
use crate::etcd_error::EtcdError;
use crate::member::keep_awake::KeepAwake;
use crate::member::leader;
use crate::member::waiters::{Answer, Callers, Waiters};
use crate::peer::forward::ForwardError;

/// Commands per batch, and the encoded size a batch grows to before it is cut (a command
/// bigger than that still goes, alone). Keeps append-entries messages moderate: openraft
/// sends up to `max_payload_entries` entries in one.
const MAX_BATCH_COMMANDS: usize = 256;
const MAX_BATCH_BYTES: usize = 64 * 1024;
struct Proposal {
    request: StoreRequest,
    size: usize,
    answer: oneshot::Sender<Answer>,
}

/// Handle to the proposer task; cheap to share.
pub struct Proposer {
    tx: mpsc::UnboundedSender<Proposal>,
    /// Keeps the Raft thread and a worker awake while writes come back to back; `None` with
    /// `--keep-awake=false`, so the write path does not follow its writes for nothing.
    awake: Option<Arc<KeepAwake>>,
}

impl Proposer {
    /// Starts the proposer task on `raft_thread` (beside the Raft core it feeds, so handing
    /// it a batch wakes no other thread); it ends when the server shuts down. Call it on the
    /// async runtime whose workers propose: with `keep_awake`, one of them and the Raft thread
    /// stay awake while writes come back to back (see `keep_awake`).
    pub fn start(
        raft: KilnRaft,
        waiters: Arc<Waiters>,
        shutdown: watch::Receiver<bool>,
        raft_thread: &tokio::runtime::Handle,
        keep_awake: bool,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let awake = keep_awake
            .then(|| KeepAwake::start(raft_thread, &tokio::runtime::Handle::current(), &shutdown));
        raft_thread.spawn(run(raft, waiters, rx, shutdown));
        Self { tx, awake }
    }

    /// Proposes `request` (with whatever else is waiting) and returns once it is applied on
    /// this member, if it leads; otherwise fails with "not leader" and nothing was proposed.
    pub async fn propose(&self, request: StoreRequest) -> Answer {
        let stopped = || ForwardError::etcd(EtcdError::Stopped);
        let (answer, answered) = oneshot::channel();
        let size = request.encoded_len();
        let _in_flight = self.awake.as_deref().map(KeepAwake::in_flight);
        self.tx
            .send(Proposal {
                request,
                size,
                answer,
            })
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

async fn run(
    raft: KilnRaft,
    waiters: Arc<Waiters>,
    mut rx: mpsc::UnboundedReceiver<Proposal>,
    mut shutdown: watch::Receiver<bool>,
) {
    // The batch being appended: closes once its log append is synced or it is answered.
    let mut unflushed: Option<oneshot::Receiver<()>> = None;
    let mut carried: Option<Proposal> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => tokio::select! {
                p = rx.recv() => match p {
                    Some(p) => p,
                    None => return,
                },
                _ = shutdown.wait_for(|s| *s) => return,
            },
        };
        // Waiting here for the batch being appended (openraft 0.9 appends one at a time, each
        // with its fsync) is what lets the next one grow: one fsync carries everything that
        // arrived during the previous one. On the Raft thread its apply and answers run
        // while the client side (the async workers) gathers the next batch.
        // A slow sync is the log store's to report ("slow log sync").
        if let Some(previous) = unflushed.take() {
            // Synced, or answered (failed) before that: the sender is gone either way.
            let _ = previous.await;
        }
        let mut bytes = first.size;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_COMMANDS {
            let Ok(p) = rx.try_recv() else { break };
            if bytes + p.size > MAX_BATCH_BYTES {
                carried = Some(p);
                break;
            }
            bytes += p.size;
            batch.push(p);
        }
        let (mut request, callers) = pack(batch);
        let (id, flushed) = waiters.register(callers);
        request.proposal = id;
        unflushed = Some(flushed);
        // Submitted here, in arrival order.
        match raft.client_write_ff(request).await {
            Ok(from_raft) => {
                let waiters = waiters.clone();
                tokio::spawn(async move {
                    // Bounded like every leader request, so a proposal that never gets an
                    // answer (leadership lost on the way) cannot keep its callers for good.
                    let answer: Answer =
                        match tokio::time::timeout(leader::REQUEST_TIMEOUT, from_raft).await {
                            Ok(Ok(Ok(r))) => Ok((r.log_id.index, r.data)),
                            Ok(Ok(Err(e))) => Err(leader::write_err(RaftError::APIError(e))),
                            Ok(Err(_)) => Err(ForwardError::etcd(EtcdError::Stopped)),
                            Err(_) => Err(ForwardError::etcd(EtcdError::Timeout)),
                        };
                    // Still here: not applied on this member (it failed, or the entry came
                    // from before a restart), so openraft's word is the answer.
                    if let Some(callers) = waiters.take(id) {
                        callers.answer(answer);
                    }
                });
            }
            Err(fatal) => {
                if let Some(callers) = waiters.take(id) {
                    callers.answer(Err(leader::write_err(RaftError::Fatal(fatal))));
                }
            }
        }
    }
}

/// One command as it is; several as a batch entry.
fn pack(mut batch: Vec<Proposal>) -> (StoreRequest, Callers) {
    if batch.len() == 1 {
        let p = batch.pop().expect("one proposal");
        return (p.request, Callers::new(true, vec![p.answer]));
    }
    let (requests, answers) = batch.into_iter().map(|p| (p.request, p.answer)).unzip();
    (
        StoreRequest::new(Op::Batch(StoreBatch { requests })),
        Callers::new(false, answers),
    )
}
