//! Group commit for client writes, as etcd does it: commands that arrive while earlier ones
//! are still on their way through Raft are proposed together as one Raft entry, so one log
//! append — one fsync, one replication round — carries all of them.
//!
//! openraft 0.9 appends (and fsyncs) every proposal on its own, one after the other, so
//! without this the store does one fsync per write however many clients write at once. The
//! state machine applies a batch's commands in order, each in its own revision, exactly as if
//! each had been an entry of its own; a lone command is proposed as it is.

use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt as _, Shared};
use openraft::error::RaftError;
use prost::Message as _;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::etcd_error::EtcdError;
use crate::leader::{self, ForwardError};
use crate::raft::types::{
    store_request::Op, store_response, KilnRaft, StoreBatch, StoreRequest, StoreResponse,
};

/// Batches on their way through Raft at once. While they are, new commands queue up and form
/// the next batch; more than one in flight lets the next append overlap the previous apply.
const MAX_IN_FLIGHT: usize = 2;
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
/// wakes straight from Raft's answer) and its place in the batch. The batch keeps its
/// in-flight slot until every ticket is gone.
struct Ticket {
    outcome: SharedOutcome,
    /// None: the command went alone, not as a batch.
    position: Option<usize>,
    _slot: Arc<OwnedSemaphorePermit>,
}

/// Handle to the proposer task; cheap to share.
pub struct Proposer {
    tx: mpsc::UnboundedSender<Proposal>,
}

impl Proposer {
    /// Starts the proposer task; it ends when the server shuts down.
    pub fn start(raft: KilnRaft, shutdown: watch::Receiver<bool>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, rx, shutdown));
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

async fn run(
    raft: KilnRaft,
    mut rx: mpsc::UnboundedReceiver<Proposal>,
    mut shutdown: watch::Receiver<bool>,
) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
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
        // Waiting here for a batch to finish is what lets the next one grow.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
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
        let (request, tickets) = pack(batch);
        // Submitted here, in arrival order.
        let outcome: BoxFuture<'static, Outcome> = match raft.client_write_ff(request).await {
            Ok(answer) => async move {
                // Bounded like every leader request, so a batch that never gets an answer
                // (leadership lost on the way) cannot hold its slot for good.
                let answer = tokio::time::timeout(leader::REQUEST_TIMEOUT, answer).await;
                Arc::new(match answer {
                    Ok(Ok(Ok(r))) => Ok((r.log_id.index, r.data)),
                    Ok(Ok(Err(e))) => Err(leader::write_err(RaftError::APIError(e))),
                    Ok(Err(_)) => Err(ForwardError::etcd(EtcdError::Stopped)),
                    Err(_) => Err(ForwardError::etcd(EtcdError::Timeout)),
                })
            }
            .boxed(),
            Err(fatal) => {
                let e = leader::write_err(RaftError::Fatal(fatal));
                async move { Arc::new(Err(e)) }.boxed()
            }
        };
        let outcome = outcome.shared();
        let slot = Arc::new(permit);
        for (i, ticket) in tickets.into_iter().enumerate() {
            // A caller that gave up (client gone, timeout) is fine to miss.
            let _ = ticket.send(Ticket {
                outcome: outcome.clone(),
                position: (!lone).then_some(i),
                _slot: slot.clone(),
            });
        }
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
