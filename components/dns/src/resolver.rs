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
use crate::wire::{answer_bytes, finish, Pending, Reply, Sent, Transport};

/// The index shared between the watchers (writers) and the DNS loops (readers).
pub type SharedIndex = Arc<RwLock<Index>>;

#[derive(Debug)]
pub struct Resolver {
    pub index: SharedIndex,
    cache: Mutex<Cache>,
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
            forwarder,
            health,
        }
    }

    /// The reply to one packet, or None when it is dropped.
    pub async fn handle(&self, bytes: &[u8], transport: Transport) -> Option<Vec<u8>> {
        let start = Instant::now();
        let reply = {
            let index = self.index.read().unwrap_or_else(|e| e.into_inner());
            answer_bytes(&index, bytes, transport)
        };
        let sent = match reply {
            Reply::Send(s) => s,
            Reply::Drop => {
                self.health.metrics.dropped();
                return None;
            }
            Reply::Forward(p) => self.complete(*p).await,
        };
        let m = &self.health.metrics;
        m.request(transport, sent.qtype, sent.rcode, start.elapsed());
        (!sent.bytes.is_empty()).then_some(sent.bytes)
    }

    async fn complete(&self, p: Pending) -> Sent {
        let Some(q) = p.request.queries.first() else {
            let mut resp = response_to(&p.request);
            resp.metadata.response_code = ResponseCode::FormErr;
            return finish(&p.request, &resp, p.transport);
        };
        let resp = match p.chase.clone() {
            None => {
                let mut resp = response_to(&p.request);
                match self.upstream(q).await {
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
            Some((mut resp, target)) => {
                let mut tq = Query::query(target, q.query_type());
                tq.set_query_class(q.query_class());
                // on failure the CNAME alone is still a correct answer; the client may chase it
                if let Some(c) = self.upstream(&tq).await {
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
