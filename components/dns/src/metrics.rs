//! Prometheus text for /metrics, hand-rendered like the other kiln components, with CoreDNS's series
//! under the `kiln_dns_` prefix. Label values come from a fixed list, so hostile qtypes cannot grow
//! the series without bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
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
    /// (proto, qtype, rcode) → requests answered.
    requests: Mutex<BTreeMap<(&'static str, &'static str, &'static str), u64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    duration_micros: AtomicU64,
    answered: AtomicU64,
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

/// The qtype label: the common types by name, everything else `other`.
pub fn type_label(t: Option<RecordType>) -> &'static str {
    use RecordType::*;
    match t {
        None => "none",
        Some(A) => "A",
        Some(AAAA) => "AAAA",
        Some(CNAME) => "CNAME",
        Some(MX) => "MX",
        Some(NS) => "NS",
        Some(PTR) => "PTR",
        Some(SOA) => "SOA",
        Some(SRV) => "SRV",
        Some(TXT) => "TXT",
        Some(ANY) => "ANY",
        Some(HTTPS) => "HTTPS",
        Some(SVCB) => "SVCB",
        Some(CAA) => "CAA",
        Some(AXFR) => "AXFR",
        Some(IXFR) => "IXFR",
        Some(_) => "other",
    }
}

/// The rcode label as dig prints it.
pub fn rcode_label(r: ResponseCode) -> &'static str {
    match r {
        ResponseCode::NoError => "NOERROR",
        ResponseCode::FormErr => "FORMERR",
        ResponseCode::ServFail => "SERVFAIL",
        ResponseCode::NXDomain => "NXDOMAIN",
        ResponseCode::NotImp => "NOTIMP",
        ResponseCode::Refused => "REFUSED",
        ResponseCode::BADVERS => "BADVERS",
        _ => "other",
    }
}

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
        let key = (proto.as_str(), type_label(qtype), rcode_label(rcode));
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
        let secs = took.as_secs_f64();
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.duration_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.answered.fetch_add(1, Ordering::Relaxed);
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
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut body = String::new();
        for ((proto, qtype, rcode), n) in &requests {
            body.push_str(&format!(
                "kiln_dns_requests_total{{proto=\"{proto}\",type=\"{qtype}\",rcode=\"{rcode}\"}} {n}\n"
            ));
        }
        out.push_str(&body);
        let total = get(&self.answered);
        let hist = "kiln_dns_request_duration_seconds";
        out.push_str(&format!(
            "# HELP {hist} Time from receiving a request to having its answer.\n# TYPE {hist} histogram\n"
        ));
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            out.push_str(&format!(
                "{hist}_bucket{{le=\"{bound}\"}} {}\n",
                get(bucket)
            ));
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
