//! Encoded replies to recent UDP requests, so a repeated question is one hash lookup and a copy
//! instead of a parse, an answer built from the index and an encode (which cost more than the
//! kernel's share of a query; see docs/benchmarks.md "Cluster DNS").
//!
//! Exact by construction: [`crate::wire::answer_bytes`] is a pure function of the request bytes and
//! the index, and a reply differs between requests that differ only in their ID by the ID alone. So
//! an entry is keyed by the request's bytes after the ID, is valid only for the index generation it
//! was computed at ([`crate::index::Index::generation`]), and a hit is the stored reply with the
//! request's ID written in. Forwarded names are not kept here (their TTLs count down; the forward
//! cache serves them).
//!
//! Sharded so the receive loops seldom meet on one lock; bounded: a full shard is emptied, which
//! keeps the memory at most [`SHARDS`] × the per-shard capacity whatever the traffic.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::wire::Sent;

/// Lock shards; a power of two.
pub const SHARDS: usize = 16;
/// Requests longer than this are answered but not kept (a normal question is well under 100 bytes;
/// long ones carry EDNS options such as cookies that make every request unique anyway).
pub const MAX_KEY: usize = 255;
/// The default number of replies kept (all shards together): enough for every name of a
/// 10 000-Service cluster, a few MiB at most.
pub const DEFAULT_CAPACITY: usize = 16 * 1024;

#[derive(Debug)]
struct Entry {
    reply: Box<[u8]>,
    qtype: Option<RecordType>,
    rcode: ResponseCode,
}

#[derive(Debug, Default)]
struct Shard {
    generation: u64,
    entries: HashMap<Box<[u8]>, Entry>,
}

#[derive(Debug)]
pub struct ReplyCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
}

/// The part of a request its reply depends on: everything after the 2-byte ID.
fn key(request: &[u8]) -> Option<&[u8]> {
    (request.len() >= 12 && request.len() <= MAX_KEY + 2).then(|| &request[2..])
}

impl ReplyCache {
    /// Keeps up to `capacity` replies (0: keeps none).
    pub fn new(capacity: usize) -> Self {
        ReplyCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: capacity.div_ceil(SHARDS),
        }
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        let i = (h.finish() as usize) & (SHARDS - 1);
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The reply to `request` computed at index `generation`, with the request's ID; None when not
    /// kept (or kept for an older generation).
    pub fn get(&self, generation: u64, request: &[u8]) -> Option<Sent> {
        let key = key(request)?;
        if self.per_shard == 0 {
            return None;
        }
        let shard = self.shard(key);
        if shard.generation != generation {
            return None;
        }
        let e = shard.entries.get(key)?;
        let mut bytes = e.reply.to_vec();
        bytes[..2].copy_from_slice(&request[..2]);
        Some(Sent {
            bytes,
            qtype: e.qtype,
            rcode: e.rcode,
        })
    }

    /// Keeps `sent`, the reply to `request` at index `generation`.
    pub fn insert(&self, generation: u64, request: &[u8], sent: &Sent) {
        let Some(key) = key(request) else {
            return;
        };
        if self.per_shard == 0 || sent.bytes.len() < 2 {
            return;
        }
        let mut shard = self.shard(key);
        if shard.generation != generation {
            // a newer index: every reply kept is stale (an older one: this reply is; skip it)
            if shard.generation > generation {
                return;
            }
            shard.entries.clear();
            shard.generation = generation;
        }
        if shard.entries.len() >= self.per_shard {
            shard.entries.clear();
        }
        shard.entries.insert(
            key.into(),
            Entry {
                reply: sent.bytes.as_slice().into(),
                qtype: sent.qtype,
                rcode: sent.rcode,
            },
        );
    }

    /// Replies kept (for tests and /metrics-style checks).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).entries.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "reply_cache_tests.rs"]
mod tests;
