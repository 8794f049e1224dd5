use super::*;
use crate::index::tests::{cluster_ip, ep, headless, port, slice};
use crate::index::ZoneSettings;
use crate::model::{ServiceInfo, ServiceKey, ServiceKind};
use hickory_proto::op::{Edns, OpCode, Query};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

/// web (ClusterIP), big (headless, 100 endpoints: 1.6 kB of A records), srv8 (headless, 8
/// endpoints with SRV: their answers fit in 512 bytes, with the additional A records they do not —
/// SRV targets are never compressed, RFC 2782), ext (ExternalName).
fn fixture() -> Index {
    let mut idx = Index::new(ZoneSettings::default());
    idx.upsert_service(cluster_ip("default", "web", &["10.96.0.10"], vec![]));
    idx.upsert_service(headless("default", "big", vec![]));
    let eps = (0..100)
        .map(|i| ep(&format!("10.244.{}.{}", i / 200, i % 200 + 1), None, true))
        .collect();
    idx.upsert_slice(slice("default", "big-1", "big", eps, vec![]));
    idx.upsert_service(headless("default", "srv8", vec![]));
    let eps = (0..8)
        .map(|i| {
            ep(
                &format!("10.244.9.{}", i + 1),
                Some(&format!("h{i:02}")),
                true,
            )
        })
        .collect();
    let ports = vec![port("p", "tcp", 80)];
    idx.upsert_slice(slice("default", "srv8-1", "srv8", eps, ports));
    idx.upsert_service(ServiceInfo {
        key: ServiceKey::new("default", "ext"),
        kind: ServiceKind::ExternalName(name("www.example.com.")),
        ports: vec![],
        publish_not_ready: false,
    });
    idx
}

fn query(qname: &str, qtype: RecordType, payload: Option<u16>) -> Message {
    let mut m = Message::new(0xbeef, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name(qname), qtype));
    if let Some(p) = payload {
        let mut e = Edns::new();
        e.set_max_payload(p);
        m.set_edns(e);
    }
    m
}

fn bytes(m: &Message) -> Vec<u8> {
    m.to_vec().unwrap()
}

fn sent(r: Reply) -> (Message, usize) {
    match r {
        Reply::Send(s) => (Message::from_vec(&s.bytes).unwrap(), s.bytes.len()),
        other => panic!("expected a reply, got {other:?}"),
    }
}

#[test]
fn round_trip_and_metrics_fields() {
    let idx = fixture();
    let q = query("web.default.svc.cluster.local.", RecordType::A, None);
    let Reply::Send(s) = answer_bytes(&idx, &bytes(&q), Transport::Udp) else {
        panic!()
    };
    assert_eq!(s.qtype, Some(RecordType::A));
    assert_eq!(s.rcode, ResponseCode::NoError);
    let m = Message::from_vec(&s.bytes).unwrap();
    assert_eq!(m.metadata.id, 0xbeef);
    assert_eq!(m.answers.len(), 1);
}

#[test]
fn udp_replies_fit_the_client_payload_size_or_are_truncated() {
    let idx = fixture();
    let big = "big.default.svc.cluster.local.";
    // no EDNS0: 512 bytes, so TC with only the question
    let (m, len) = sent(answer_bytes(
        &idx,
        &bytes(&query(big, RecordType::A, None)),
        Transport::Udp,
    ));
    assert!(m.metadata.truncation && len <= 512);
    assert!(m.answers.is_empty() && m.additionals.is_empty());
    assert_eq!(m.queries.len(), 1, "the question stays");
    // the client's 1232 is still too small; its 4096 is enough
    let (m, len) = sent(answer_bytes(
        &idx,
        &bytes(&query(big, RecordType::A, Some(1232))),
        Transport::Udp,
    ));
    assert!(m.metadata.truncation && len <= 1232);
    assert!(m.edns.is_some(), "OPT stays in a truncated reply");
    let (m, len) = sent(answer_bytes(
        &idx,
        &bytes(&query(big, RecordType::A, Some(4096))),
        Transport::Udp,
    ));
    assert!(!m.metadata.truncation && len > 1232);
    assert_eq!(m.answers.len(), 100);
    // more than we ever send over UDP is capped at MAX_UDP_PAYLOAD; TCP carries it all
    let (m, _) = sent(answer_bytes(
        &idx,
        &bytes(&query(big, RecordType::A, None)),
        Transport::Tcp,
    ));
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 100);
}

#[test]
fn additional_records_are_dropped_before_truncating() {
    let idx = fixture();
    let q = query(
        "_p._tcp.srv8.default.svc.cluster.local.",
        RecordType::SRV,
        None,
    );
    let (full, full_len) = sent(answer_bytes(&idx, &bytes(&q), Transport::Tcp));
    assert_eq!(full.additionals.len(), 8);
    assert!(
        full_len > 512,
        "the fixture must not fit in 512 bytes ({full_len})"
    );
    let (m, len) = sent(answer_bytes(&idx, &bytes(&q), Transport::Udp));
    assert!(len <= 512);
    assert!(!m.metadata.truncation, "the answers fit: no TC");
    assert_eq!(m.answers.len(), 8);
    assert!(m.additionals.is_empty());
}

#[test]
fn size_limits() {
    let tcp = query("x.", RecordType::A, Some(1232));
    assert_eq!(size_limit(&tcp, Transport::Tcp), 65535);
    assert_eq!(
        size_limit(&query("x.", RecordType::A, None), Transport::Udp),
        512
    );
    assert_eq!(
        size_limit(&query("x.", RecordType::A, Some(100)), Transport::Udp),
        512
    );
    assert_eq!(
        size_limit(&query("x.", RecordType::A, Some(1232)), Transport::Udp),
        1232
    );
    assert_eq!(
        size_limit(&query("x.", RecordType::A, Some(65000)), Transport::Udp),
        usize::from(MAX_UDP_PAYLOAD)
    );
}

#[test]
fn formerr_when_only_the_header_parses_and_drop_otherwise() {
    let idx = fixture();
    // id 0x0102, RD, one question announced but none present
    let header = [0x01, 0x02, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    let Reply::Send(s) = answer_bytes(&idx, &header, Transport::Udp) else {
        panic!()
    };
    assert_eq!(s.rcode, ResponseCode::FormErr);
    let m = Message::from_vec(&s.bytes).unwrap();
    assert_eq!(m.metadata.id, 0x0102);
    assert!(m.metadata.recursion_desired);
    assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
    assert!(matches!(
        answer_bytes(&idx, &header[..11], Transport::Udp),
        Reply::Drop
    ));
    assert!(matches!(
        answer_bytes(&idx, &[], Transport::Tcp),
        Reply::Drop
    ));
    // responses are never answered (no loops between servers, no reflection)
    let mut resp = query("web.default.svc.cluster.local.", RecordType::A, None);
    resp.metadata.message_type = MessageType::Response;
    assert!(matches!(
        answer_bytes(&idx, &bytes(&resp), Transport::Udp),
        Reply::Drop
    ));
    let mut broken = header;
    broken[2] |= 0x80;
    assert!(matches!(
        answer_bytes(&idx, &broken, Transport::Udp),
        Reply::Drop
    ));
    // two OPT records: FORMERR (RFC 6891)
    let mut two_opt = bytes(&query(
        "web.default.svc.cluster.local.",
        RecordType::A,
        Some(1232),
    ));
    let opt = two_opt[two_opt.len() - 11..].to_vec();
    two_opt.extend_from_slice(&opt);
    two_opt[11] = 2;
    let Reply::Send(s) = answer_bytes(&idx, &two_opt, Transport::Udp) else {
        panic!()
    };
    assert_eq!(s.rcode, ResponseCode::FormErr);
}

#[test]
fn forwarded_and_chased_requests() {
    let idx = fixture();
    let q = query("example.com.", RecordType::A, Some(1232));
    match answer_bytes(&idx, &bytes(&q), Transport::Udp) {
        Reply::Forward(p) => {
            assert!(p.chase.is_none());
            assert_eq!(p.request, q);
            assert_eq!(p.transport, Transport::Udp);
        }
        other => panic!("{other:?}"),
    }
    let q = query("ext.default.svc.cluster.local.", RecordType::A, None);
    match answer_bytes(&idx, &bytes(&q), Transport::Tcp) {
        Reply::Forward(p) => {
            let (resp, target) = p.chase.expect("a chase");
            assert_eq!(target, name("www.example.com."));
            assert_eq!(resp.answers.len(), 1);
        }
        other => panic!("{other:?}"),
    }
}

/// Inputs built from a valid query: cut short, bits flipped, counts inflated, pointers looped.
fn mangled(rng: &mut StdRng, valid: &[Vec<u8>]) -> Vec<u8> {
    let base = &valid[rng.random_range(0..valid.len())];
    match rng.random_range(0..6) {
        0 => {
            let len = rng.random_range(0..600);
            (0..len).map(|_| rng.random()).collect()
        }
        1 => base[..rng.random_range(0..base.len())].to_vec(),
        2 => {
            let mut b = base.clone();
            for _ in 0..rng.random_range(1..8) {
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
            }
            b
        }
        3 => {
            // header counts of 65535, or random ones, over a real body
            let mut b = base.clone();
            for byte in &mut b[4..12] {
                *byte = if rng.random() { 0xff } else { rng.random() };
            }
            b
        }
        4 => {
            // a header, then a name that is a compression pointer to itself or past the end
            let mut b = base[..12].to_vec();
            b[2] &= 0x7f;
            b[5] = 1;
            let target: u16 = if rng.random() { 12 } else { rng.random() };
            b.extend_from_slice(&(0xc000 | (target & 0x3fff)).to_be_bytes());
            b.extend_from_slice(&[0, 1, 0, 1]);
            b
        }
        _ => {
            let mut b = base.clone();
            let extra = rng.random_range(1..300);
            b.extend((0..extra).map(|_| rng.random::<u8>()));
            b
        }
    }
}

/// The property the fuzz target checks, on a few thousand seeded inputs: never a panic; a packet
/// with a query header always gets a well-formed reply (or goes upstream); replies fit the limit.
#[test]
fn malformed_truncated_and_random_packets_never_crash() {
    let idx = fixture();
    let valid: Vec<Vec<u8>> = [
        ("web.default.svc.cluster.local.", RecordType::A, None),
        ("big.default.svc.cluster.local.", RecordType::A, Some(1232)),
        (
            "_p._tcp.srv8.default.svc.cluster.local.",
            RecordType::SRV,
            None,
        ),
        (
            "ext.default.svc.cluster.local.",
            RecordType::AAAA,
            Some(4096),
        ),
        ("10.0.96.10.in-addr.arpa.", RecordType::PTR, None),
        ("example.com.", RecordType::MX, None),
    ]
    .iter()
    .map(|(n, t, p)| bytes(&query(n, *t, *p)))
    .collect();
    let mut rng = StdRng::seed_from_u64(0x6b696c6e);
    let mut inputs: Vec<Vec<u8>> = (0..4000).map(|_| mangled(&mut rng, &valid)).collect();
    inputs.push(vec![0u8; 70_000]);
    inputs.push((0..u16::MAX as usize + 10).map(|i| i as u8).collect());
    let mut replied = 0;
    for input in &inputs {
        for t in [Transport::Udp, Transport::Tcp] {
            let query_header = input.len() >= 12 && input[2] & 0x80 == 0;
            match answer_bytes(&idx, input, t) {
                Reply::Send(s) => {
                    replied += 1;
                    let m = Message::from_vec(&s.bytes)
                        .unwrap_or_else(|e| panic!("unparsable reply to {input:02x?}: {e}"));
                    assert_eq!(m.metadata.message_type, MessageType::Response);
                    assert_eq!(m.metadata.id.to_be_bytes(), input[..2]);
                    let cap = match t {
                        Transport::Udp => usize::from(MAX_UDP_PAYLOAD),
                        Transport::Tcp => 65535,
                    };
                    assert!(s.bytes.len() <= cap);
                }
                Reply::Drop => assert!(
                    !query_header,
                    "a query header must be answered: {input:02x?}"
                ),
                Reply::Forward(p) => assert_eq!(p.request.queries.len(), 1),
            }
        }
    }
    assert!(
        replied > 1000,
        "the corpus must reach the answering code ({replied})"
    );
}
