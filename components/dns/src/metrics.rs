//! Prometheus text for /metrics, hand-rendered like the other kiln components, with CoreDNS's series
//! under the `kiln_dns_` prefix. Label values come from a fixed list, so hostile qtypes cannot grow
//! the series without bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::index::IndexStats;
use crate::wire::Transport;

/// Upper bounds (seconds) of the request-duration histogram.
const BUCKETS: [f64; 12] = [
    0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.512, 2.048,
];

#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests answered by (proto, qtype label, rcode label), as indices into [`TYPES`] and
    /// [`RCODES`]: one relaxed add per request, no lock shared by the receive loops.
    requests: [[[AtomicU64; RCODES.len()]; TYPES.len()]; 2],
    /// Requests per histogram bucket alone (the first bound ≥ the duration; the last: above
    /// all bounds); made cumulative when rendered, so a request costs one add, not one per bucket.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    duration_micros: AtomicU64,
    dropped: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    cache_entries: AtomicU64,
    forward_requests: AtomicU64,
    forward_errors: AtomicU64,
    services: AtomicU64,
    slices: AtomicU64,
    records: AtomicU64,
}

/// The qtype labels: the common types by name, everything else `other`.
const TYPES: [&str; 17] = [
    "none", "A", "AAAA", "CNAME", "MX", "NS", "PTR", "SOA", "SRV", "TXT", "ANY", "HTTPS", "SVCB",
    "CAA", "AXFR", "IXFR", "other",
];

fn type_index(t: Option<RecordType>) -> usize {
    use RecordType::*;
    match t {
        None => 0,
        Some(A) => 1,
        Some(AAAA) => 2,
        Some(CNAME) => 3,
        Some(MX) => 4,
        Some(NS) => 5,
        Some(PTR) => 6,
        Some(SOA) => 7,
        Some(SRV) => 8,
        Some(TXT) => 9,
        Some(ANY) => 10,
        Some(HTTPS) => 11,
        Some(SVCB) => 12,
        Some(CAA) => 13,
        Some(AXFR) => 14,
        Some(IXFR) => 15,
        Some(_) => 16,
    }
}

/// The qtype label: the common types by name, everything else `other`.
pub fn type_label(t: Option<RecordType>) -> &'static str {
    TYPES[type_index(t)]
}

/// The rcode labels as dig prints them.
const RCODES: [&str; 8] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "other",
];

fn rcode_index(r: ResponseCode) -> usize {
    match r {
        ResponseCode::NoError => 0,
        ResponseCode::FormErr => 1,
        ResponseCode::ServFail => 2,
        ResponseCode::NXDomain => 3,
        ResponseCode::NotImp => 4,
        ResponseCode::Refused => 5,
        ResponseCode::BADVERS => 6,
        _ => 7,
    }
}

/// The rcode label as dig prints it.
pub fn rcode_label(r: ResponseCode) -> &'static str {
    RCODES[rcode_index(r)]
}

const PROTOS: [Transport; 2] = [Transport::Udp, Transport::Tcp];

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Metrics {
    pub fn request(
        &self,
        proto: Transport,
        qtype: Option<RecordType>,
        rcode: ResponseCode,
        took: Duration,
    ) {
        let p = usize::from(proto == Transport::Tcp);
        self.requests[p][type_index(qtype)][rcode_index(rcode)].fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.duration_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn cache_lookup(&self, hit: bool) {
        let c = if hit {
            &self.cache_hits
        } else {
            &self.cache_misses
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_cache_entries(&self, n: usize) {
        self.cache_entries.store(n as u64, Ordering::Relaxed);
    }

    pub fn forward_attempt(&self, ok: bool) {
        self.forward_requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.forward_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn set_index(&self, s: IndexStats) {
        self.services.store(s.services as u64, Ordering::Relaxed);
        self.slices.store(s.slices as u64, Ordering::Relaxed);
        self.records.store(s.records as u64, Ordering::Relaxed);
    }

    pub fn render(&self, ready: bool) -> String {
        let mut out = String::new();
        let mut head = |name: &str, kind: &str, help: &str| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        };
        head(
            "kiln_dns_requests_total",
            "counter",
            "DNS requests answered, by transport, question type and response code.",
        );
        // sorted by label text, as the series always were
        let mut requests = BTreeMap::new();
        for (p, proto) in PROTOS.iter().enumerate() {
            for (t, qtype) in TYPES.iter().enumerate() {
                for (r, rcode) in RCODES.iter().enumerate() {
                    let n = get(&self.requests[p][t][r]);
                    if n > 0 {
                        requests.insert((proto.as_str(), *qtype, *rcode), n);
                    }
                }
            }
        }
        let mut body = String::new();
        for ((proto, qtype, rcode), n) in &requests {
            body.push_str(&format!(
                "kiln_dns_requests_total{{proto=\"{proto}\",type=\"{qtype}\",rcode=\"{rcode}\"}} {n}\n"
            ));
        }
        out.push_str(&body);
        let total: u64 = self.buckets.iter().map(get).sum();
        let hist = "kiln_dns_request_duration_seconds";
        out.push_str(&format!(
            "# HELP {hist} Time from receiving a request to having its answer.\n# TYPE {hist} histogram\n"
        ));
        let mut below = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            below += get(bucket);
            out.push_str(&format!("{hist}_bucket{{le=\"{bound}\"}} {below}\n"));
        }
        out.push_str(&format!("{hist}_bucket{{le=\"+Inf\"}} {total}\n"));
        out.push_str(&format!(
            "{hist}_sum {}\n{hist}_count {total}\n",
            get(&self.duration_micros) as f64 / 1e6
        ));
        let simple: [(&str, &str, &str, u64); 11] = [
            ("kiln_dns_dropped_total", "counter", "Packets dropped unanswered (no readable query header, or a response).", get(&self.dropped)),
            ("kiln_dns_cache_hits_total", "counter", "Forwarded questions answered from the cache.", get(&self.cache_hits)),
            ("kiln_dns_cache_misses_total", "counter", "Forwarded questions not in the cache.", get(&self.cache_misses)),
            ("kiln_dns_cache_entries", "gauge", "Entries in the cache.", get(&self.cache_entries)),
            ("kiln_dns_forward_requests_total", "counter", "Queries sent to upstream resolvers (each attempt).", get(&self.forward_requests)),
            ("kiln_dns_forward_errors_total", "counter", "Upstream attempts that failed (timeout, network error, SERVFAIL/REFUSED, bad answer).", get(&self.forward_errors)),
            ("kiln_dns_services", "gauge", "Services with records in the cluster zone.", get(&self.services)),
            ("kiln_dns_endpointslices", "gauge", "EndpointSlices in the index.", get(&self.slices)),
            ("kiln_dns_records", "gauge", "Resource records the cluster zone serves (A/AAAA, CNAME, SRV, PTR).", get(&self.records)),
            ("kiln_dns_ready", "gauge", "1 once the first lists of Services and EndpointSlices are in the index.", u64::from(ready)),
            ("kiln_dns_up", "gauge", "Always 1 while the server runs.", 1),
        ];
        for (name, kind, help, v) in simple {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_requests_histogram_and_counters() {
        let m = Metrics::default();
        m.request(
            Transport::Udp,
            Some(RecordType::A),
            ResponseCode::NoError,
            Duration::from_micros(300),
        );
        m.request(
            Transport::Udp,
            Some(RecordType::A),
            ResponseCode::NoError,
            Duration::from_millis(3),
        );
        m.request(
            Transport::Tcp,
            Some(RecordType::Unknown(65000)),
            ResponseCode::NXDomain,
            Duration::from_secs(3),
        );
        m.cache_lookup(true);
        m.cache_lookup(false);
        m.cache_lookup(false);
        m.forward_attempt(true);
        m.forward_attempt(false);
        m.set_index(IndexStats {
            services: 3,
            slices: 2,
            records: 11,
        });
        let t = m.render(true);
        assert!(
            t.contains("\nkiln_dns_requests_total{proto=\"udp\",type=\"A\",rcode=\"NOERROR\"} 2\n"),
            "{t}"
        );
        assert!(t.contains(
            "\nkiln_dns_requests_total{proto=\"tcp\",type=\"other\",rcode=\"NXDOMAIN\"} 1\n"
        ));
        assert!(t.contains("\nkiln_dns_request_duration_seconds_bucket{le=\"0.00025\"} 0\n"));
        assert!(t.contains("\nkiln_dns_request_duration_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(t.contains("\nkiln_dns_request_duration_seconds_bucket{le=\"0.004\"} 2\n"));
        assert!(t.contains("\nkiln_dns_request_duration_seconds_bucket{le=\"2.048\"} 2\n"));
        assert!(t.contains("\nkiln_dns_request_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(t.contains("\nkiln_dns_request_duration_seconds_count 3\n"));
        assert!(t.contains("\nkiln_dns_cache_hits_total 1\n"));
        assert!(t.contains("\nkiln_dns_cache_misses_total 2\n"));
        assert!(t.contains("\nkiln_dns_forward_requests_total 2\n"));
        assert!(t.contains("\nkiln_dns_forward_errors_total 1\n"));
        assert!(t.contains("\nkiln_dns_services 3\n"));
        assert!(t.contains("\nkiln_dns_records 11\n"));
        assert!(t.contains("\nkiln_dns_ready 1\n"));
        assert!(m.render(false).contains("\nkiln_dns_ready 0\n"));
    }

    #[test]
    fn labels_are_bounded() {
        assert_eq!(type_label(Some(RecordType::SRV)), "SRV");
        assert_eq!(type_label(Some(RecordType::Unknown(4242))), "other");
        assert_eq!(type_label(None), "none");
        assert_eq!(rcode_label(ResponseCode::Unknown(3000)), "other");
        assert_eq!(rcode_label(ResponseCode::NXDomain), "NXDOMAIN");
    }
}
