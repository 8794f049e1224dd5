//! Group commit for client writes, as etcd does it: commands that arrive while earlier ones
//! are still on their way through Raft are proposed together as one Raft entry, so one log
//! append — one fsync, one replication round — carries all of them.
//!
//! openraft 0.9 appends (and fsyncs) every proposal on its own, one after the other, so
//! without this the store does one fsync per write however many clients write at once. The
//! state machine applies a batch's commands in order, each in its own revision, exactly as if
//! each had been an entry of its own; a lone command is proposed as it is.
//!
//! A batch's answer comes straight from the state machine once it is applied (see
//! `waiters`), not through openraft's core, which may be blocked in the next batch's fsync.

use std::future::Future;
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt as _, Shared};
use openraft::error::RaftError;
use prost::Message as _;
use std::collections::VecDeque;

use tokio::sync::{mpsc, oneshot, watch};

use crate::etcd_error::EtcdError;
use crate::leader::{self, ForwardError};
use crate::raft::types::{
    store_request::Op, store_response, KilnRaft, StoreBatch, StoreRequest, StoreResponse,
};
use crate::waiters::{Answer, Waiters};

/// Batches proposed but not yet in the log on disk. While one is being appended (openraft 0.9
/// appends one at a time, each with its fsync), new commands queue up here and form the next
/// batch, so one fsync carries everything that arrived during the previous one. A batch
/// leaves this count once its log append is synced, not once it is answered: its apply and
/// answers overlap the next batch's append.
const MAX_UNFLUSHED: usize = 1;
/// Commands per batch, and the encoded size a batch grows to before it is cut (a command
/// bigger than that still goes, alone). Keeps append-entries messages moderate: openraft
/// sends up to `max_payload_entries` entries in one.
const MAX_BATCH_COMMANDS: usize = 256;
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// Applied at Raft log `index`, with the command's own response.
pub type Proposed = Result<(u64, StoreResponse), ForwardError>;

/// A batch's outcome as Raft reports it, shared by everyone waiting on the batch.
type Outcome = Arc<Result<(u64, StoreResponse), ForwardError>>;
type SharedOutcome = Shared<BoxFuture<'static, Outcome>>;

struct Proposal {
    request: StoreRequest,
    size: usize,
    ticket: oneshot::Sender<Ticket>,
}

/// What a caller waits on once its command is proposed: the batch's outcome (every waiter
/// wakes straight from the state machine's answer) and its place in the batch.
struct Ticket {
    outcome: SharedOutcome,
    /// None: the command went alone, not as a batch.
    position: Option<usize>,
}

/// Handle to the proposer task; cheap to share.
pub struct Proposer {
    tx: mpsc::UnboundedSender<Proposal>,
}

impl Proposer {
    /// Starts the proposer task; it ends when the server shuts down.
    pub fn start(raft: KilnRaft, waiters: Arc<Waiters>, shutdown: watch::Receiver<bool>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, waiters, rx, shutdown));
        Self { tx }
    }

    /// Proposes `request` (with whatever else is waiting) and returns once it is applied on
    /// this member, if it leads; otherwise fails with "not leader" and nothing was proposed.
    pub async fn propose(&self, request: StoreRequest) -> Proposed {
        let stopped = || ForwardError::etcd(EtcdError::Stopped);
        let (ticket, issued) = oneshot::channel();
        let size = request.encoded_len();
        self.tx
            .send(Proposal {
                request,
                size,
                ticket,
            })
            .map_err(|_| stopped())?;
        let ticket = issued.await.map_err(|_| stopped())?;
        let outcome = ticket.outcome.clone().await;
        let (index, response) = match outcome.as_ref() {
            Ok(r) => r,
            Err(e) => return Err(e.clone()),
        };
        let Some(i) = ticket.position else {
            return Ok((*index, response.clone()));
        };
        match &response.result {
            Some(store_response::Result::Batch(b)) => match b.responses.get(i) {
                Some(mine) => Ok((*index, mine.clone())),
                None => Err(not_a_batch()),
            },
            _ => Err(not_a_batch()),
        }
    }
}

fn not_a_batch() -> ForwardError {
    ForwardError::status(
        tonic::Code::Internal,
        "state machine answered a command batch with something else",
    )
}

/// Unregisters a proposal when its outcome is dropped, answered or not.
struct Forget(Arc<Waiters>, u64);

impl Drop for Forget {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}

/// The state machine's direct answer, or openraft's if that comes first: an error (nothing
/// applied here), or — if the state machine did not find the waiter — the response itself.
async fn first_answer(
    mut direct: oneshot::Receiver<Answer>,
    raft: impl Future<Output = Result<Answer, ForwardError>> + Send + 'static,
) -> Result<Answer, ForwardError> {
    let mut raft = Box::pin(raft);
    tokio::select! {
        biased;
        answer = &mut direct => match answer {
            Ok(a) => {
                // openraft still sends its (empty) copy; it logs a warning for every answer
                // nobody receives, so someone stays to receive it.
                tokio::spawn(async move {
                    let _ = raft.await;
                });
                Ok(a)
            }
            // The state machine dropped it (failed applying): openraft reports why.
            Err(_) => raft.await,
        },
        answer = &mut raft => match answer {
            // The state machine sends its answer before openraft hears of the apply.
            Ok(fallback) => Ok(direct.try_recv().unwrap_or(fallback)),
            Err(e) => Err(e),
        },
    }
}

async fn run(
    raft: KilnRaft,
    waiters: Arc<Waiters>,
    mut rx: mpsc::UnboundedReceiver<Proposal>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Per unflushed batch: done once it is synced in the log or has its outcome (failed).
    let mut unflushed: VecDeque<BoxFuture<'static, ()>> = VecDeque::new();
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
        // Waiting here for the batch being appended is what lets the next one grow.
        while unflushed.len() >= MAX_UNFLUSHED {
            if let Some(flushed) = unflushed.pop_front() {
                flushed.await;
            }
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
        let lone = batch.len() == 1;
        let (mut request, tickets) = pack(batch);
        let (proposal, direct, flushed) = waiters.register();
        request.proposal = proposal;
        let forget = Forget(waiters.clone(), proposal);
        // Submitted here, in arrival order.
        let outcome: BoxFuture<'static, Outcome> = match raft.client_write_ff(request).await {
            Ok(answer) => async move {
                let _forget = forget;
                // Bounded like every leader request, so a batch that never gets an answer
                // (leadership lost on the way) cannot hold its slot for good.
                let from_raft = async move {
                    match tokio::time::timeout(leader::REQUEST_TIMEOUT, answer).await {
                        Ok(Ok(Ok(r))) => Ok((r.log_id.index, r.data)),
                        Ok(Ok(Err(e))) => Err(leader::write_err(RaftError::APIError(e))),
                        Ok(Err(_)) => Err(ForwardError::etcd(EtcdError::Stopped)),
                        Err(_) => Err(ForwardError::etcd(EtcdError::Timeout)),
                    }
                };
                Arc::new(first_answer(direct, from_raft).await)
            }
            .boxed(),
            Err(fatal) => {
                drop(forget);
                let e = leader::write_err(RaftError::Fatal(fatal));
                async move { Arc::new(Err(e)) }.boxed()
            }
        };
        let outcome = outcome.shared();
        for (i, ticket) in tickets.into_iter().enumerate() {
            // A caller that gave up (client gone, timeout) is fine to miss.
            let _ = ticket.send(Ticket {
                outcome: outcome.clone(),
                position: (!lone).then_some(i),
            });
        }
        let answered = outcome.map(|_| ());
        unflushed.push_back(
            async move {
                // Synced (or forgotten: the outcome is in), or failed before that.
                tokio::select! {
                    _ = flushed => {}
                    _ = answered => {}
                }
            }
            .boxed(),
        );
    }
}

/// One command as it is; several as a batch entry.
fn pack(mut batch: Vec<Proposal>) -> (StoreRequest, Vec<oneshot::Sender<Ticket>>) {
    if batch.len() == 1 {
        let p = batch.pop().expect("one proposal");
        return (p.request, vec![p.ticket]);
    }
    let (requests, tickets) = batch.into_iter().map(|p| (p.request, p.ticket)).unzip();
    (
        StoreRequest::new(Op::Batch(StoreBatch { requests })),
        tickets,
    )
}
