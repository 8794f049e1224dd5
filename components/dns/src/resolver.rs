//! One request, start to end: the pure answer from the index, or the cache and the upstreams for
//! forwarded names and ExternalName targets; metrics for every reply.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use hickory_proto::op::{Message, Query, ResponseCode};

use crate::answer::response_to;
use crate::cache::{Cache, CacheKey, Cached};
use crate::forward::Forwarder;
use crate::health::Health;
use crate::index::Index;
use crate::reply_cache::{ReplyCache, DEFAULT_CAPACITY};
use crate::wire::{answer_bytes, finish, Pending, Reply, Sent, Transport};

/// The index shared between the watchers (writers) and the DNS loops (readers).
pub type SharedIndex = Arc<RwLock<Index>>;

#[derive(Debug)]
pub struct Resolver {
    pub index: SharedIndex,
    cache: Mutex<Cache>,
    /// Encoded UDP replies of the index's answers (not of forwarded names).
    replies: ReplyCache,
    forwarder: Forwarder,
    health: Arc<Health>,
}

impl Resolver {
    pub fn new(
        index: SharedIndex,
        cache: Cache,
        forwarder: Forwarder,
        health: Arc<Health>,
    ) -> Self {
        Resolver {
            index,
            cache: Mutex::new(cache),
            replies: ReplyCache::new(DEFAULT_CAPACITY),
            forwarder,
            health,
        }
    }

    /// The reply to one packet, or None when it is dropped.
    pub async fn handle(&self, bytes: &[u8], transport: Transport) -> Option<Vec<u8>> {
        match self.answer_now(bytes, transport) {
            Step::Done(reply) => reply,
            Step::Network(p) => self.answer_from_network(*p).await,
        }
    }

    /// Everything that needs no network: the index, and forwarded names fresh in the cache. The UDP
    /// loop answers these on the thread that read the packet (no task per packet: a hand-off
    /// between threads costs more than the answer itself); only [`Step::Network`] gets a task.
    pub fn answer_now(&self, bytes: &[u8], transport: Transport) -> Step {
        let start = Instant::now();
        let reply = {
            let index = self.index.read().unwrap_or_else(|e| e.into_inner());
            let generation = index.generation();
            // UDP only: over TCP the size limit differs, and TCP is rare enough not to matter
            let udp = transport == Transport::Udp;
            if let Some(hit) = udp.then(|| self.replies.get(generation, bytes)).flatten() {
                drop(index);
                return Step::Done(self.sent(hit, transport, start));
            }
            let reply = answer_bytes(&index, bytes, transport);
            if let (true, Reply::Send(sent)) = (udp, &reply) {
                self.replies.insert(generation, bytes, sent);
            }
            reply
        };
        let sent = match reply {
            Reply::Send(s) => s,
            Reply::Drop => {
                self.health.metrics.dropped();
                return Step::Done(None);
            }
            Reply::Forward(p) => {
                let cached = needed_query(&p).and_then(|q| {
                    let hit = self.lock_cache().get(&CacheKey::of(&q), Instant::now());
                    // a miss is counted once, by `upstream`, which looks again
                    hit.inspect(|_| self.health.metrics.cache_lookup(true))
                });
                match cached {
                    Some(c) => assemble(*p, Some(c)),
                    None => return Step::Network(Box::new(Network { pending: *p, start })),
                }
            }
        };
        Step::Done(self.sent(sent, transport, start))
    }

    /// The rest of a [`Step::Network`]: the upstreams (through the cache), then the reply.
    pub async fn answer_from_network(&self, n: Network) -> Option<Vec<u8>> {
        let up = match needed_query(&n.pending) {
            Some(q) => self.upstream(&q).await,
            None => None,
        };
        let transport = n.pending.transport;
        self.sent(assemble(n.pending, up), transport, n.start)
    }

    fn sent(&self, sent: Sent, transport: Transport, start: Instant) -> Option<Vec<u8>> {
        let m = &self.health.metrics;
        m.request(transport, sent.qtype, sent.rcode, start.elapsed());
        (!sent.bytes.is_empty()).then_some(sent.bytes)
    }

    /// The upstream answer for `q`, from the cache when fresh; None when every upstream failed.
    async fn upstream(&self, q: &Query) -> Option<Cached> {
        let key = CacheKey::of(q);
        let metrics = &self.health.metrics;
        let hit = self.lock_cache().get(&key, Instant::now());
        metrics.cache_lookup(hit.is_some());
        if hit.is_some() {
            return hit;
        }
        match self.forwarder.resolve(q).await {
            Ok(m) => {
                let mut cache = self.lock_cache();
                cache.insert(key, &m, Instant::now());
                metrics.set_cache_entries(cache.len());
                Some(cached(m))
            }
            Err(e) => {
                tracing::warn!(name = %q.name(), qtype = %q.query_type(), error = %e, "forwarding failed; SERVFAIL");
                None
            }
        }
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What [`Resolver::answer_now`] could not finish: a name to ask the upstreams.
#[derive(Debug)]
pub struct Network {
    pending: Pending,
    start: Instant,
}

/// [`Resolver::answer_now`]'s outcome.
#[derive(Debug)]
pub enum Step {
    /// The reply (None: nothing is sent).
    Done(Option<Vec<u8>>),
    /// Boxed: a request is much bigger than a reply.
    Network(Box<Network>),
}

/// The question a forwarded request needs the upstreams for: the request's own, or for an
/// ExternalName the CNAME target (same type and class). None for a request without a question.
fn needed_query(p: &Pending) -> Option<Query> {
    let q = p.request.queries.first()?;
    Some(match &p.chase {
        None => q.clone(),
        Some((_, target)) => {
            let mut tq = Query::query(target.clone(), q.query_type());
            tq.set_query_class(q.query_class());
            tq
        }
    })
}

/// The reply to a forwarded request, given the upstreams' answer to [`needed_query`] (None: every
/// upstream failed).
fn assemble(p: Pending, up: Option<Cached>) -> Sent {
    if p.request.queries.is_empty() {
        let mut resp = response_to(&p.request);
        resp.metadata.response_code = ResponseCode::FormErr;
        return finish(&p.request, &resp, p.transport);
    }
    let resp = match p.chase {
        None => {
            let mut resp = response_to(&p.request);
            match up {
                Some(c) => {
                    resp.metadata.response_code = c.rcode;
                    resp.answers = c.answers;
                    resp.authorities = c.authorities;
                    resp.additionals = c.additionals;
                }
                None => resp.metadata.response_code = ResponseCode::ServFail,
            }
            resp
        }
        Some((mut resp, _)) => {
            // on failure the CNAME alone is still a correct answer; the client may chase it
            if let Some(c) = up {
                resp.answers.extend(c.answers);
                if matches!(c.rcode, ResponseCode::NoError | ResponseCode::NXDomain) {
                    resp.metadata.response_code = c.rcode;
                    resp.authorities = c.authorities;
                }
            }
            resp
        }
    };
    finish(&p.request, &resp, p.transport)
}

fn cached(m: Message) -> Cached {
    Cached {
        rcode: m.metadata.response_code,
        answers: m.answers,
        authorities: m.authorities,
        additionals: m.additionals,
    }
}

#[cfg(test)]
#[path = "resolver_tests.rs"]
mod tests;
