//! Watch service: one task per stream serves all of the stream's watchers.
//!
//! The task subscribes to the store's event feed before reading any history, so a watcher that
//! starts in the past reads history up to the current revision and then continues from the
//! feed without gaps; `next_rev` per watcher drops duplicates. If the task falls behind the
//! feed (lagged), or the member installed a Raft snapshot (an empty batch on the feed: those
//! revisions were never applied one by one here), it re-reads the missing revisions from
//! history.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{
    PbEvent, PbWatchRequest, PbWatchRequestUnion, PbWatchResponse, PbWatchService,
};
use prost::Message as _;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::member::context::StoreContext;
use crate::storage::mvcc::keys::EVENT_PUT;
use crate::storage::mvcc::read::RangeEnd;
use crate::storage::mvcc::{MvccError, RevisionEvents};

const FILTER_NOPUT: i32 = 0;
const FILTER_NODELETE: i32 = 1;
/// Events per response when replaying history.
const HISTORY_CHUNK: usize = 1000;
/// Field number of `events` in etcd's WatchResponse (for sizing fragments exactly).
const WATCH_RESPONSE_EVENTS_TAG: u32 = 11;
/// etcd's progress notification interval.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(600);

pub struct WatchService {
    ctx: Arc<StoreContext>,
}

impl WatchService {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }
}

struct HistoryChunk {
    events: Vec<PbEvent>,
    /// Every revision up to this one has been read.
    complete_to: i64,
}

struct Watcher {
    key: Vec<u8>,
    end: RangeEnd,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
    /// Split responses larger than --max-request-bytes (the client reassembles them).
    fragment: bool,
    /// Next revision this watcher has not been given yet.
    next_rev: i64,
}

impl Watcher {
    fn wants(&self, ev: &PbEvent) -> bool {
        let Some(kv) = &ev.kv else { return false };
        if ev.r#type == EVENT_PUT && self.no_put || ev.r#type != EVENT_PUT && self.no_delete {
            return false;
        }
        self.end.contains(&self.key, &kv.key)
    }

    fn shape(&self, ev: &PbEvent) -> PbEvent {
        let mut ev = ev.clone();
        if !self.prev_kv {
            ev.prev_kv = None;
        }
        ev
    }
}

type Outbound = mpsc::Sender<Result<PbWatchResponse, Status>>;

struct StreamTask {
    ctx: Arc<StoreContext>,
    out: Outbound,
    feed: broadcast::Receiver<Arc<RevisionEvents>>,
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
    /// The stream's caller (`auth`); "" for nobody or while auth is disabled.
    user: String,
}

/// The stream is over (client gone or server stopping).
struct Closed;

impl From<mpsc::error::SendError<Result<PbWatchResponse, Status>>> for Closed {
    fn from(_: mpsc::error::SendError<Result<PbWatchResponse, Status>>) -> Self {
        Closed
    }
}

impl StreamTask {
    fn response(&self, watch_id: i64, revision: i64) -> PbWatchResponse {
        PbWatchResponse {
            header: Some(self.ctx.header(revision)),
            watch_id,
            ..Default::default()
        }
    }

    async fn send(&self, resp: PbWatchResponse) -> Result<(), Closed> {
        self.out.send(Ok(resp)).await?;
        Ok(())
    }

    /// Sends `events` for watcher `id`, split into fragments when it asked for them and one
    /// response would exceed --max-request-bytes (as etcd does: every fragment but the last
    /// has `fragment` set; a single event larger than the limit still goes whole).
    async fn send_events(
        &self,
        id: i64,
        revision: i64,
        events: Vec<PbEvent>,
        fragment: bool,
    ) -> Result<(), Closed> {
        let limit = self.ctx.max_request_bytes;
        let mut whole = self.response(id, revision);
        whole.events = events;
        if !fragment || whole.events.len() < 2 || whole.encoded_len() < limit {
            return self.send(whole).await;
        }
        let events = std::mem::take(&mut whole.events);
        whole.fragment = true;
        let base = whole.encoded_len();
        let mut chunk: Vec<PbEvent> = Vec::new();
        let mut size = base;
        let total = events.len();
        for (i, ev) in events.into_iter().enumerate() {
            let ev_size = prost::encoding::message::encoded_len(WATCH_RESPONSE_EVENTS_TAG, &ev);
            if !chunk.is_empty() && size + ev_size >= limit {
                let mut part = whole.clone();
                part.events = std::mem::take(&mut chunk);
                self.send(part).await?;
                size = base;
            }
            size += ev_size;
            chunk.push(ev);
            if i + 1 == total {
                let mut last = whole.clone();
                last.events = std::mem::take(&mut chunk);
                last.fragment = false;
                self.send(last).await?;
            }
        }
        Ok(())
    }

    async fn run(mut self, mut inbound: Streaming<PbWatchRequest>) {
        let mut shutdown = self.ctx.shutdown.clone();
        let mut progress = tokio::time::interval(PROGRESS_INTERVAL);
        progress.tick().await;
        loop {
            let step = tokio::select! {
                msg = inbound.message() => match msg {
                    Ok(Some(req)) => self.handle_request(req).await,
                    Ok(None) | Err(_) => Err(Closed),
                },
                feed = self.feed.recv() => match feed {
                    // The store jumped (snapshot installed): replay from history.
                    Ok(batch) if batch.events.is_empty() => self.catch_up_all().await,
                    Ok(batch) => self.deliver(&batch).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => self.catch_up_all().await,
                    Err(broadcast::error::RecvError::Closed) => Err(Closed),
                },
                _ = progress.tick() => self.progress_notify().await,
                _ = shutdown.changed() => Err(Closed),
                _ = self.out.closed() => Err(Closed),
            };
            if step.is_err() {
                return;
            }
        }
    }

    async fn handle_request(&mut self, req: PbWatchRequest) -> Result<(), Closed> {
        match req.request_union {
            Some(PbWatchRequestUnion::CreateRequest(c)) => {
                let current = self.ctx.mvcc.revision();
                let permitted = self.ctx.auth.check(
                    &self.user,
                    crate::auth::perm::Access::Read,
                    &c.key,
                    &c.range_end,
                );
                if permitted.is_err() {
                    let mut resp = self.response(c.watch_id, current);
                    resp.created = true;
                    resp.canceled = true;
                    // etcd 3.4 puts the whole gRPC error text here (ErrGRPCPermissionDenied.Error()).
                    resp.cancel_reason = format!(
                        "rpc error: code = PermissionDenied desc = {}",
                        crate::auth::error::AuthError::PermissionDenied
                    );
                    return self.send(resp).await;
                }
                let id = if c.watch_id != 0 {
                    if self.watchers.contains_key(&c.watch_id) {
                        let mut resp = self.response(c.watch_id, current);
                        resp.created = true;
                        resp.canceled = true;
                        resp.cancel_reason =
                            crate::etcd_error::EtcdError::WatchIdExists.to_string();
                        return self.send(resp).await;
                    }
                    c.watch_id
                } else {
                    while self.watchers.contains_key(&self.next_id) {
                        self.next_id += 1;
                    }
                    self.next_id
                };
                let watcher = Watcher {
                    end: RangeEnd::from_request(&c.range_end),
                    key: c.key,
                    prev_kv: c.prev_kv,
                    no_put: c.filters.contains(&FILTER_NOPUT),
                    no_delete: c.filters.contains(&FILTER_NODELETE),
                    progress_notify: c.progress_notify,
                    fragment: c.fragment,
                    next_rev: if c.start_revision > 0 {
                        c.start_revision
                    } else {
                        current + 1
                    },
                };
                let needs_history = watcher.next_rev <= current;
                self.watchers.insert(id, watcher);
                let mut created = self.response(id, current);
                created.created = true;
                self.send(created).await?;
                if needs_history {
                    self.catch_up(id).await?;
                }
                Ok(())
            }
            Some(PbWatchRequestUnion::CancelRequest(c)) => {
                if self.watchers.remove(&c.watch_id).is_some() {
                    let mut resp = self.response(c.watch_id, self.ctx.mvcc.revision());
                    resp.canceled = true;
                    self.send(resp).await?;
                }
                Ok(())
            }
            Some(PbWatchRequestUnion::ProgressRequest(_)) => {
                // Deliver what is already queued so the reported revision is complete.
                while let Ok(batch) = self.feed.try_recv() {
                    self.deliver(&batch).await?;
                }
                let current = self.ctx.mvcc.revision();
                let rev = self
                    .watchers
                    .values()
                    .map(|w| (w.next_rev - 1).min(current))
                    .min()
                    .unwrap_or(current);
                self.send(self.response(-1, rev)).await
            }
            None => Ok(()),
        }
    }

    /// Sends one committed revision to every watcher that has not seen it.
    async fn deliver(&mut self, batch: &RevisionEvents) -> Result<(), Closed> {
        let current = self.ctx.mvcc.revision().max(batch.revision);
        let mut out = Vec::new();
        for (id, w) in self.watchers.iter_mut() {
            if batch.revision < w.next_rev {
                continue;
            }
            w.next_rev = batch.revision + 1;
            let events: Vec<PbEvent> = batch
                .events
                .iter()
                .filter(|ev| w.wants(ev))
                .map(|ev| w.shape(ev))
                .collect();
            if !events.is_empty() {
                out.push((*id, events, w.fragment));
            }
        }
        for (id, events, fragment) in out {
            self.send_events(id, current, events, fragment).await?;
        }
        Ok(())
    }

    async fn catch_up_all(&mut self) -> Result<(), Closed> {
        let ids: Vec<i64> = self.watchers.keys().copied().collect();
        for id in ids {
            self.catch_up(id).await?;
        }
        Ok(())
    }

    /// Replays history for watcher `id` up to the current revision.
    async fn catch_up(&mut self, id: i64) -> Result<(), Closed> {
        loop {
            let Some(w) = self.watchers.get(&id) else {
                return Ok(());
            };
            let current = self.ctx.mvcc.revision();
            if w.next_rev > current {
                return Ok(());
            }
            let compacted = self.ctx.mvcc.compact_revision();
            if w.next_rev < compacted {
                self.watchers.remove(&id);
                let mut resp = self.response(id, current);
                resp.compact_revision = compacted;
                resp.canceled = true;
                return self.send(resp).await;
            }
            let (from, key, end, prev_kv) = (w.next_rev, w.key.clone(), w.end.clone(), w.prev_kv);
            let mvcc = self.ctx.mvcc.clone();
            let read = tokio::task::spawn_blocking(move || -> Result<HistoryChunk, MvccError> {
                let view = mvcc.view();
                let mut events = view.events(from, current, HISTORY_CHUNK)?;
                // A full chunk ends at its last revision; a short one covers the whole span.
                let complete_to = if events.len() >= HISTORY_CHUNK {
                    events
                        .last()
                        .and_then(|ev| ev.kv.as_ref().map(|kv| kv.mod_revision))
                        .unwrap_or(current)
                } else {
                    current
                };
                events.retain(|ev| ev.kv.as_ref().is_some_and(|kv| end.contains(&key, &kv.key)));
                if prev_kv {
                    for ev in &mut events {
                        if let Some(kv) = &ev.kv {
                            ev.prev_kv = view.get(&kv.key, kv.mod_revision - 1)?;
                        }
                    }
                }
                Ok(HistoryChunk {
                    events,
                    complete_to,
                })
            })
            .await;
            let chunk = match read {
                Ok(Ok(chunk)) => chunk,
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "reading watch history");
                    self.out.send(Err(Status::internal(e.to_string()))).await?;
                    return Err(Closed);
                }
                Err(e) => {
                    self.out.send(Err(Status::internal(e.to_string()))).await?;
                    return Err(Closed);
                }
            };
            let Some(w) = self.watchers.get_mut(&id) else {
                return Ok(());
            };
            w.next_rev = chunk.complete_to + 1;
            let events = chunk.events;
            let events: Vec<PbEvent> = events.into_iter().filter(|ev| w.wants(ev)).collect();
            let fragment = w.fragment;
            if !events.is_empty() {
                self.send_events(id, current, events, fragment).await?;
            }
        }
    }

    async fn progress_notify(&mut self) -> Result<(), Closed> {
        let current = self.ctx.mvcc.revision();
        let ids: Vec<i64> = self
            .watchers
            .iter()
            .filter(|(_, w)| w.progress_notify && w.next_rev > current)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.send(self.response(id, current)).await?;
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl PbWatchService for WatchService {
    type WatchStream =
        Pin<Box<dyn Stream<Item = Result<PbWatchResponse, Status>> + Send + 'static>>;

    async fn watch(
        &self,
        request: Request<Streaming<PbWatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        // Who the stream's token or certificate names; an invalid token names nobody, whose
        // watches are then refused like etcd's (isWatchPermitted).
        let user = self.ctx.auth.key_caller(&request).unwrap_or_default();
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(256);
        let task = StreamTask {
            ctx: self.ctx.clone(),
            out: tx,
            feed: self.ctx.mvcc.subscribe(),
            watchers: BTreeMap::new(),
            next_id: 0,
            user,
        };
        tokio::spawn(task.run(inbound));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
