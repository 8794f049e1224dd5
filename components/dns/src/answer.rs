//! The answering logic, pure: `(index, request) → response` for the cluster zone and the PTRs of the
//! index's addresses, or "forward it" for everything else. No I/O, no clock.
//!
//! Rcode rules (the Kubernetes DNS spec plus RFC 2308 / RFC 8020): a name that exists but has no
//! record of the asked type is NOERROR with no answers and the zone's SOA in the authority section
//! (NODATA); a name that does not exist is NXDOMAIN with the SOA. Empty non-terminals (`svc.<zone>`,
//! `<ns>.svc.<zone>` of a namespace with Services, `_<proto>.<service>…`) exist. A headless Service
//! without ready endpoints is NXDOMAIN, as the spec says. Until the index has its first full lists,
//! a name it lacks is SERVFAIL instead of NXDOMAIN (CoreDNS's kubernetes plugin does the same).

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

use crate::index::{reverse_ip, Index, Kind, ServiceView};

/// The schema version of the Kubernetes DNS spec this implements (`dns-version.<zone>` TXT).
pub const SCHEMA_VERSION: &str = "1.1.0";
/// The UDP payload size we advertise in OPT and the most we send over UDP, whatever a client asks.
pub const MAX_UDP_PAYLOAD: u16 = 4096;
/// CNAMEs followed inside the zone before giving up (ExternalName → ExternalName → …).
const MAX_CNAME_CHAIN: usize = 8;

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The complete response.
    Answer(Message),
    /// Not ours: resolve the question upstream.
    Forward,
    /// An ExternalName points outside the zone: `response` holds the CNAME chain so far; the caller
    /// appends the upstream answers for `target` (with the question's type).
    Chase { response: Message, target: Name },
}

/// The response skeleton: same id, opcode, RD and CD, the question echoed, RA set (we forward), and
/// an OPT when the request had one.
pub fn response_to(request: &Message) -> Message {
    let mut resp = Message::response(request.metadata.id, request.metadata.op_code);
    resp.metadata.recursion_desired = request.metadata.recursion_desired;
    resp.metadata.checking_disabled = request.metadata.checking_disabled;
    resp.metadata.recursion_available = true;
    resp.queries = request.queries.clone();
    if request.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_UDP_PAYLOAD).set_version(0);
        resp.edns = Some(edns);
    }
    resp
}

fn with_rcode(mut resp: Message, rcode: ResponseCode) -> Outcome {
    resp.metadata.response_code = rcode;
    Outcome::Answer(resp)
}

/// Answers `request` from `index`, or says it must be forwarded.
pub fn answer(index: &Index, request: &Message) -> Outcome {
    let resp = response_to(request);
    if request.metadata.op_code != OpCode::Query {
        return with_rcode(resp, ResponseCode::NotImp);
    }
    if request.queries.len() != 1 {
        // not echoed: many questions could make even the error too big for 512 bytes
        let mut resp = resp;
        resp.queries.clear();
        return with_rcode(resp, ResponseCode::FormErr);
    }
    if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
        return with_rcode(resp, ResponseCode::BADVERS);
    }
    let q = &request.queries[0];
    let class_ok = matches!(q.query_class(), DNSClass::IN | DNSClass::ANY);
    if index.settings().zone.zone_of(q.name()) {
        if !class_ok || matches!(q.query_type(), RecordType::AXFR | RecordType::IXFR) {
            return with_rcode(resp, ResponseCode::Refused);
        }
        return in_zone(index, q, resp);
    }
    if class_ok && matches!(q.query_type(), RecordType::PTR | RecordType::ANY) {
        if let Some(out) = reverse(index, q, resp.clone()) {
            return out;
        }
    }
    if q.query_class() != DNSClass::IN {
        return with_rcode(resp, ResponseCode::Refused);
    }
    Outcome::Forward
}

/// PTR of an address in the index; None (forward it) for any other reverse name, like CoreDNS's
/// `fallthrough in-addr.arpa ip6.arpa`: the reverse zones of the rest of the world are upstream's.
fn reverse(index: &Index, q: &Query, mut resp: Message) -> Option<Outcome> {
    let ip = reverse_ip(q.name())?;
    let ttl = index.settings().ttl;
    let answers: Vec<Record> = index
        .ptr(ip)
        .map(|n| Record::from_rdata(q.name().clone(), ttl, RData::PTR(PTR(n))))
        .collect();
    if answers.is_empty() {
        return None;
    }
    resp.metadata.authoritative = true;
    resp.answers = answers;
    Some(Outcome::Answer(resp))
}

/// What one name holds for one type.
#[derive(Debug)]
enum Lookup {
    Records {
        answers: Vec<Record>,
        additionals: Vec<Record>,
    },
    NoData,
    NxDomain,
    Cname(Name),
}

fn in_zone(index: &Index, q: &Query, mut resp: Message) -> Outcome {
    resp.metadata.authoritative = true;
    let qtype = q.query_type();
    let zone = &index.settings().zone;
    let ttl = index.settings().ttl;
    let mut name = q.name().clone();
    for _ in 0..=MAX_CNAME_CHAIN {
        match lookup(index, &name, qtype) {
            Lookup::Records {
                answers,
                additionals,
            } => {
                resp.answers.extend(answers);
                resp.additionals.extend(additionals);
                return Outcome::Answer(resp);
            }
            Lookup::NoData => {
                resp.authorities.push(soa(index));
                return Outcome::Answer(resp);
            }
            Lookup::NxDomain => {
                // RFC 6604: after a CNAME the rcode is the last name's. Before the first lists
                // are in, "not in the index" does not mean "does not exist": SERVFAIL, which
                // clients retry (elsewhere) instead of caching.
                resp.metadata.response_code = if index.synced() {
                    ResponseCode::NXDomain
                } else {
                    ResponseCode::ServFail
                };
                resp.authorities.push(soa(index));
                return Outcome::Answer(resp);
            }
            Lookup::Cname(target) => {
                let cname = RData::CNAME(CNAME(target.clone()));
                resp.answers
                    .push(Record::from_rdata(name.clone(), ttl, cname));
                if qtype == RecordType::CNAME {
                    return Outcome::Answer(resp);
                }
                if !zone.zone_of(&target) {
                    return Outcome::Chase {
                        response: resp,
                        target,
                    };
                }
                name = target;
            }
        }
    }
    tracing::debug!(name = %q.name(), "CNAME chain too long inside the zone");
    with_rcode(resp, ResponseCode::ServFail)
}

/// The zone's SOA (the authority of every negative answer; its minimum is the negative TTL).
pub fn soa(index: &Index) -> Record {
    let s = index.settings();
    let mname = child(&s.zone, &["ns", "dns"]);
    let rname = child(&s.zone, &["hostmaster"]);
    let data = SOA::new(mname, rname, index.serial(), 7200, 1800, 86400, s.ttl);
    Record::from_rdata(s.zone.clone(), s.ttl, RData::SOA(data))
}

/// `labels…` prepended to `zone` (labels are our own constants, so they always fit).
fn child(zone: &Name, labels: &[&str]) -> Name {
    Name::from_labels(labels.iter().map(|l| l.as_bytes()))
        .and_then(|n| n.append_domain(zone))
        .unwrap_or_else(|_| zone.clone())
}

/// A/AAAA records of `owner` for the asked type (both for ANY).
fn addr_records(owner: &Name, addrs: &[IpAddr], qtype: RecordType, ttl: u32) -> Vec<Record> {
    addrs
        .iter()
        .filter_map(|ip| match (ip, qtype) {
            (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => Some(RData::A(A(*v4))),
            (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => Some(RData::AAAA(AAAA(*v6))),
            _ => None,
        })
        .map(|data| Record::from_rdata(owner.clone(), ttl, data))
        .collect()
}

fn records_or_nodata(answers: Vec<Record>, additionals: Vec<Record>) -> Lookup {
    if answers.is_empty() {
        Lookup::NoData
    } else {
        Lookup::Records {
            answers,
            additionals,
        }
    }
}

/// The labels of `name` below the zone, lowercase (the spec compares case-insensitively).
fn relative_labels(zone: &Name, name: &Name) -> Vec<String> {
    let below = usize::from(name.num_labels().saturating_sub(zone.num_labels()));
    name.iter()
        .take(below)
        .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
        .collect()
}

fn lookup(index: &Index, name: &Name, qtype: RecordType) -> Lookup {
    let s = index.settings();
    let labels = relative_labels(&s.zone, name);
    let l: Vec<&str> = labels.iter().map(String::as_str).collect();
    match l.as_slice() {
        [] => apex(index, name, qtype),
        ["dns-version"] => {
            let answers = match qtype {
                RecordType::TXT | RecordType::ANY => {
                    let txt = RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_string()]));
                    vec![Record::from_rdata(name.clone(), s.ttl, txt)]
                }
                _ => Vec::new(),
            };
            records_or_nodata(answers, Vec::new())
        }
        ["svc"] | ["dns"] => Lookup::NoData,
        ["ns", "dns"] => records_or_nodata(
            addr_records(name, &s.ns_addresses, qtype, s.ttl),
            Vec::new(),
        ),
        [ns, "svc"] if index.has_namespace(ns) => Lookup::NoData,
        [svc, ns, "svc"] => match index.service(ns, svc) {
            Some(view) => service(view, name, qtype, s.ttl),
            None => Lookup::NxDomain,
        },
        [proto, svc, ns, "svc"] if proto.starts_with('_') => match index.service(ns, svc) {
            Some(view) if view.has_protocol(&proto[1..]) => Lookup::NoData,
            _ => Lookup::NxDomain,
        },
        [host, svc, ns, "svc"] => match index.service(ns, svc).and_then(|v| v.host(host)) {
            Some(h) => {
                records_or_nodata(addr_records(name, &h.addresses, qtype, s.ttl), Vec::new())
            }
            None => Lookup::NxDomain,
        },
        [port, proto, svc, ns, "svc"] if port.starts_with('_') && proto.starts_with('_') => {
            match index.service(ns, svc) {
                Some(view) => srv(view, name, &port[1..], &proto[1..], qtype, s.ttl),
                None => Lookup::NxDomain,
            }
        }
        _ => Lookup::NxDomain,
    }
}

fn apex(index: &Index, name: &Name, qtype: RecordType) -> Lookup {
    let s = index.settings();
    let ns_name = child(&s.zone, &["ns", "dns"]);
    let mut answers = Vec::new();
    let mut additionals = Vec::new();
    if matches!(qtype, RecordType::SOA | RecordType::ANY) {
        let mut rec = soa(index);
        rec.name = name.clone();
        answers.push(rec);
    }
    if matches!(qtype, RecordType::NS | RecordType::ANY) {
        let ns = RData::NS(NS(ns_name.clone()));
        answers.push(Record::from_rdata(name.clone(), s.ttl, ns));
        additionals = addr_records(&ns_name, &s.ns_addresses, RecordType::ANY, s.ttl);
    }
    records_or_nodata(answers, additionals)
}

fn service(view: ServiceView<'_>, name: &Name, qtype: RecordType, ttl: u32) -> Lookup {
    match view.kind() {
        Kind::ExternalName(target) => Lookup::Cname(Name::clone(target)),
        Kind::Headless if view.addresses().is_empty() => Lookup::NxDomain,
        _ => records_or_nodata(addr_records(name, view.addresses(), qtype, ttl), Vec::new()),
    }
}

fn srv(
    view: ServiceView<'_>,
    name: &Name,
    port: &str,
    proto: &str,
    qtype: RecordType,
    ttl: u32,
) -> Lookup {
    let targets = view.srv_targets(port, proto);
    if targets.is_empty() {
        return Lookup::NxDomain;
    }
    if !matches!(qtype, RecordType::SRV | RecordType::ANY) {
        return Lookup::NoData;
    }
    // equal shares of 100, as CoreDNS weighs them; priority is not prescribed
    let weight = u16::try_from((100 / targets.len()).max(1)).unwrap_or(1);
    let mut answers = Vec::new();
    let mut additionals: Vec<Record> = Vec::new();
    for (target, port, addrs) in targets {
        let data = RData::SRV(SRV::new(0, weight, port, target.clone()));
        answers.push(Record::from_rdata(name.clone(), ttl, data));
        if !additionals.iter().any(|r| r.name == target) {
            additionals.extend(addr_records(&target, &addrs, RecordType::ANY, ttl));
        }
    }
    Lookup::Records {
        answers,
        additionals,
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
