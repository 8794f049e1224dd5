//! A bounded cache of forwarded answers: least recently used entries go first; an entry lives for the
//! smallest TTL of its answers (capped), a negative one (NXDOMAIN, NODATA) for its SOA's minimum
//! (RFC 2308, capped). Time is passed in, so the tests need no clock.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

/// The longest a positive answer is kept, whatever its TTL says (CoreDNS's default too).
pub const MAX_TTL: u32 = 3600;
/// The longest a negative answer is kept.
pub const MAX_NEGATIVE_TTL: u32 = 1800;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Lowercase.
    pub name: Name,
    pub qtype: RecordType,
    pub qclass: DNSClass,
}

impl CacheKey {
    pub fn of(q: &Query) -> Self {
        CacheKey {
            name: q.name().to_lowercase(),
            qtype: q.query_type(),
            qclass: q.query_class(),
        }
    }
}

/// The sections of a cached response, TTLs already reduced by the entry's age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
}

#[derive(Debug)]
struct Entry {
    data: Cached,
    stored: Instant,
    ttl: u32,
    used: u64,
}

#[derive(Debug)]
pub struct Cache {
    capacity: usize,
    entries: HashMap<CacheKey, Entry>,
    /// last-use tick → key: the first entry is the least recently used.
    lru: BTreeMap<u64, CacheKey>,
    tick: u64,
}

/// How long `response` may be cached, if at all: positive answers by their smallest TTL, NXDOMAIN
/// and NODATA by the SOA (the smaller of its TTL and minimum). SERVFAIL, REFUSED, truncated answers
/// and negative answers without a SOA are not cached.
pub fn cache_ttl(response: &Message) -> Option<u32> {
    if response.metadata.truncation {
        return None;
    }
    let rcode = response.metadata.response_code;
    let negative = rcode == ResponseCode::NXDomain
        || (rcode == ResponseCode::NoError && response.answers.is_empty());
    let ttl = if negative {
        let soa = response.authorities.iter().find_map(|r| match &r.data {
            RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
            _ => None,
        })?;
        soa.min(MAX_NEGATIVE_TTL)
    } else if rcode == ResponseCode::NoError {
        response.answers.iter().map(|r| r.ttl).min()?.min(MAX_TTL)
    } else {
        return None;
    };
    (ttl > 0).then_some(ttl)
}

fn aged(records: &[Record], ttl: u32, age: u32) -> Vec<Record> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.ttl = r.ttl.min(ttl).saturating_sub(age);
            r
        })
        .collect()
}

impl Cache {
    pub fn new(capacity: usize) -> Self {
        Cache {
            capacity,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The cached response for `key`, TTLs counted down to `now`; None when absent or expired.
    pub fn get(&mut self, key: &CacheKey, now: Instant) -> Option<Cached> {
        let entry = self.entries.get(key)?;
        let age = now.saturating_duration_since(entry.stored).as_secs();
        if age >= u64::from(entry.ttl) {
            let used = entry.used;
            self.entries.remove(key);
            self.lru.remove(&used);
            return None;
        }
        let tick = self.touch();
        let entry = self.entries.get_mut(key)?;
        self.lru.remove(&entry.used);
        entry.used = tick;
        self.lru.insert(tick, key.clone());
        let age = u32::try_from(age).unwrap_or(u32::MAX);
        let d = &entry.data;
        Some(Cached {
            rcode: d.rcode,
            answers: aged(&d.answers, entry.ttl, age),
            authorities: aged(&d.authorities, entry.ttl, age),
            additionals: aged(&d.additionals, entry.ttl, age),
        })
    }

    /// Stores `response` under `key` if it is cacheable; evicts the least recently used entries
    /// beyond the capacity. Returns whether it was stored.
    pub fn insert(&mut self, key: CacheKey, response: &Message, now: Instant) -> bool {
        if self.capacity == 0 {
            return false;
        }
        let Some(ttl) = cache_ttl(response) else {
            return false;
        };
        let tick = self.touch();
        let data = Cached {
            rcode: response.metadata.response_code,
            answers: response.answers.clone(),
            authorities: response.authorities.clone(),
            // OPT is not a record here (hickory keeps it apart); nothing else to strip
            additionals: response.additionals.clone(),
        };
        let entry = Entry {
            data,
            stored: now,
            ttl,
            used: tick,
        };
        if let Some(old) = self.entries.insert(key.clone(), entry) {
            self.lru.remove(&old.used);
        }
        self.lru.insert(tick, key);
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.lru.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{MessageType, OpCode};
    use hickory_proto::rr::rdata::{A, SOA};
    use std::time::Duration;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn key(s: &str) -> CacheKey {
        CacheKey::of(&Query::query(name(s), RecordType::A))
    }

    fn positive(owner: &str, ttls: &[u32]) -> Message {
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        for (i, ttl) in ttls.iter().enumerate() {
            let ip = std::net::Ipv4Addr::new(192, 0, 2, i as u8 + 1);
            m.answers
                .push(Record::from_rdata(name(owner), *ttl, RData::A(A(ip))));
        }
        m
    }

    fn negative(rcode: ResponseCode, soa_ttl: u32, minimum: u32) -> Message {
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        m.metadata.response_code = rcode;
        let soa = SOA::new(name("ns.example."), name("h.example."), 1, 1, 1, 1, minimum);
        m.authorities.push(Record::from_rdata(
            name("example."),
            soa_ttl,
            RData::SOA(soa),
        ));
        m
    }

    #[test]
    fn ttls_positive_negative_and_uncacheable() {
        assert_eq!(cache_ttl(&positive("a.example.", &[300, 60])), Some(60));
        assert_eq!(cache_ttl(&positive("a.example.", &[86400])), Some(MAX_TTL));
        assert_eq!(
            cache_ttl(&positive("a.example.", &[0])),
            None,
            "TTL 0 is not cached"
        );
        assert_eq!(
            cache_ttl(&negative(ResponseCode::NXDomain, 900, 30)),
            Some(30)
        );
        assert_eq!(
            cache_ttl(&negative(ResponseCode::NoError, 20, 600)),
            Some(20),
            "NODATA"
        );
        assert_eq!(
            cache_ttl(&negative(ResponseCode::NXDomain, 86400, 86400)),
            Some(MAX_NEGATIVE_TTL)
        );
        let mut no_soa = Message::new(1, MessageType::Response, OpCode::Query);
        no_soa.metadata.response_code = ResponseCode::NXDomain;
        assert_eq!(cache_ttl(&no_soa), None);
        let mut fail = positive("a.example.", &[300]);
        fail.metadata.response_code = ResponseCode::ServFail;
        assert_eq!(cache_ttl(&fail), None);
        let mut tc = positive("a.example.", &[300]);
        tc.metadata.truncation = true;
        assert_eq!(cache_ttl(&tc), None);
    }

    #[test]
    fn entries_count_down_and_expire() {
        let t0 = Instant::now();
        let mut c = Cache::new(10);
        assert!(c.insert(key("a.example."), &positive("a.example.", &[60, 300]), t0));
        let hit = c
            .get(&key("A.Example."), t0 + Duration::from_secs(15))
            .unwrap();
        assert_eq!(hit.rcode, ResponseCode::NoError);
        // every record counts down from the entry's TTL (the smallest), never beyond it
        let ttls: Vec<u32> = hit.answers.iter().map(|r| r.ttl).collect();
        assert_eq!(ttls, [45, 45]);
        assert!(c
            .get(&key("a.example."), t0 + Duration::from_secs(60))
            .is_none());
        assert!(c.is_empty(), "expired entries are dropped");
    }

    #[test]
    fn negative_entries_live_for_the_soa_minimum() {
        let t0 = Instant::now();
        let mut c = Cache::new(10);
        assert!(c.insert(
            key("nx.example."),
            &negative(ResponseCode::NXDomain, 900, 30),
            t0
        ));
        let hit = c
            .get(&key("nx.example."), t0 + Duration::from_secs(29))
            .unwrap();
        assert_eq!(hit.rcode, ResponseCode::NXDomain);
        assert_eq!(hit.authorities[0].ttl, 1);
        assert!(c
            .get(&key("nx.example."), t0 + Duration::from_secs(30))
            .is_none());
    }

    #[test]
    fn bounded_least_recently_used_goes_first() {
        let t0 = Instant::now();
        let mut c = Cache::new(2);
        c.insert(key("a.example."), &positive("a.example.", &[300]), t0);
        c.insert(key("b.example."), &positive("b.example.", &[300]), t0);
        assert!(
            c.get(&key("a.example."), t0).is_some(),
            "a is now the most recent"
        );
        c.insert(key("c.example."), &positive("c.example.", &[300]), t0);
        assert_eq!(c.len(), 2);
        assert!(
            c.get(&key("b.example."), t0).is_none(),
            "b was the least recently used"
        );
        assert!(c.get(&key("a.example."), t0).is_some());
        assert!(c.get(&key("c.example."), t0).is_some());
        // replacing an entry keeps one entry per key
        c.insert(key("c.example."), &positive("c.example.", &[100]), t0);
        assert_eq!(c.len(), 2);
        let mut off = Cache::new(0);
        assert!(!off.insert(key("a.example."), &positive("a.example.", &[300]), t0));
        assert!(off.is_empty());
    }
}
