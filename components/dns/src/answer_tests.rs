use super::*;
use crate::index::tests::{cluster_ip, ep, headless, ip, port, slice};
use crate::index::ZoneSettings;
use crate::model::{ServiceInfo, ServiceKey, ServiceKind};
use hickory_proto::op::MessageType;

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

/// default/web (ClusterIP, dual-stack, ports http + unnamed), default/v4only, db/pg (headless,
/// StatefulSet-style hostnames + one without, one not ready), db/empty (headless, no endpoints),
/// default/ext (ExternalName outside), default/alias (ExternalName to web).
fn fixture() -> Index {
    let mut idx = Index::new(ZoneSettings {
        ns_addresses: vec![ip("10.250.0.11")],
        ..ZoneSettings::default()
    });
    idx.upsert_service(cluster_ip(
        "default",
        "web",
        &["10.96.0.10", "fd00::10"],
        vec![port("http", "tcp", 80), port("dns", "udp", 53)],
    ));
    idx.upsert_service(cluster_ip("default", "v4only", &["10.96.0.11"], vec![]));
    idx.upsert_service(headless("db", "pg", vec![port("pg", "tcp", 5432)]));
    idx.upsert_slice(slice(
        "db",
        "pg-1",
        "pg",
        vec![
            ep("10.244.1.5", Some("pg-0"), true),
            ep("10.244.1.6", Some("pg-1"), true),
            ep("10.244.2.7", None, true),
            ep("10.244.2.8", Some("pg-3"), false),
        ],
        vec![port("pg", "tcp", 15432)],
    ));
    idx.upsert_service(headless("db", "empty", vec![]));
    for (n, target) in [
        ("ext", "www.example.com."),
        ("alias", "web.default.svc.cluster.local."),
    ] {
        idx.upsert_service(ServiceInfo {
            key: ServiceKey::new("default", n),
            kind: ServiceKind::ExternalName(name(target)),
            ports: vec![],
            publish_not_ready: false,
        });
    }
    idx
}

fn request(qname: &str, qtype: RecordType) -> Message {
    let mut m = Message::new(0x1234, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name(qname), qtype));
    m
}

fn ask(idx: &Index, qname: &str, qtype: RecordType) -> Message {
    match answer(idx, &request(qname, qtype)) {
        Outcome::Answer(m) => m,
        other => panic!("{qname} {qtype}: expected an answer, got {other:?}"),
    }
}

/// Answer section as `owner TYPE rdata` lines.
fn lines(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| format!("{} {} {}", r.name, r.record_type(), r.data))
        .collect()
}

fn assert_nodata(m: &Message) {
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.answers.is_empty(), "{:?}", lines(&m.answers));
    assert_eq!(lines(&m.authorities).len(), 1);
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    assert_eq!(m.authorities[0].name, name("cluster.local."));
}

fn assert_nxdomain(m: &Message) {
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert!(m.answers.is_empty());
    assert_eq!(m.authorities.len(), 1);
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
}

#[test]
fn cluster_ip_a_and_aaaa() {
    let idx = fixture();
    let m = ask(&idx, "web.default.svc.cluster.local.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        lines(&m.answers),
        ["web.default.svc.cluster.local. A 10.96.0.10"]
    );
    assert_eq!(m.answers[0].ttl, 5);
    assert!(m.metadata.authoritative && m.metadata.recursion_available);
    assert!(m.metadata.recursion_desired, "RD is copied");
    assert_eq!(m.metadata.id, 0x1234);
    assert_eq!(m.metadata.message_type, MessageType::Response);
    assert_eq!(
        m.queries,
        request("web.default.svc.cluster.local.", RecordType::A).queries
    );
    let m = ask(&idx, "web.default.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(
        lines(&m.answers),
        ["web.default.svc.cluster.local. AAAA fd00::10"]
    );
    // case-insensitive, and the owner is the question as asked
    let m = ask(&idx, "WEB.Default.SVC.cluster.LOCAL.", RecordType::A);
    assert_eq!(
        lines(&m.answers),
        ["WEB.Default.SVC.cluster.LOCAL. A 10.96.0.10"]
    );
    let any = ask(&idx, "web.default.svc.cluster.local.", RecordType::ANY);
    assert_eq!(any.answers.len(), 2);
}

#[test]
fn nodata_for_an_existing_name_without_the_type() {
    let idx = fixture();
    assert_nodata(&ask(
        &idx,
        "v4only.default.svc.cluster.local.",
        RecordType::AAAA,
    ));
    assert_nodata(&ask(&idx, "web.default.svc.cluster.local.", RecordType::MX));
    assert_nodata(&ask(
        &idx,
        "web.default.svc.cluster.local.",
        RecordType::SRV,
    ));
    assert_nodata(&ask(&idx, "svc.cluster.local.", RecordType::A));
    assert_nodata(&ask(&idx, "default.svc.cluster.local.", RecordType::A));
    assert_nodata(&ask(
        &idx,
        "_tcp.web.default.svc.cluster.local.",
        RecordType::A,
    ));
    assert_nodata(&ask(&idx, "cluster.local.", RecordType::A));
    assert_nodata(&ask(&idx, "dns-version.cluster.local.", RecordType::A));
    assert_nodata(&ask(
        &idx,
        "pg-0.pg.db.svc.cluster.local.",
        RecordType::AAAA,
    ));
    assert_nodata(&ask(
        &idx,
        "_http._tcp.web.default.svc.cluster.local.",
        RecordType::A,
    ));
}

#[test]
fn nxdomain_for_names_that_do_not_exist() {
    let idx = fixture();
    for q in [
        "missing.default.svc.cluster.local.",
        "web.other.svc.cluster.local.",
        "other.svc.cluster.local.",
        "pod.cluster.local.",
        "nope.cluster.local.",
        "_https._tcp.web.default.svc.cluster.local.",
        "_http._udp.web.default.svc.cluster.local.",
        "_udp.v4only.default.svc.cluster.local.",
        "pg-9.pg.db.svc.cluster.local.",
        "pg-3.pg.db.svc.cluster.local.",
        "a.b.c.d.e.f.svc.cluster.local.",
        "10-244-1-5.web.default.svc.cluster.local.",
    ] {
        assert_nxdomain(&ask(&idx, q, RecordType::A));
    }
    // the spec: a headless Service without ready endpoints is NXDOMAIN
    assert_nxdomain(&ask(&idx, "empty.db.svc.cluster.local.", RecordType::A));
}

#[test]
fn servfail_not_nxdomain_before_the_first_lists() {
    // CoreDNS's kubernetes plugin: a name error before its informers synced is SERVFAIL (with the
    // SOA), so no client caches "kubernetes.default does not exist" from a starting instance.
    let mut idx = Index::awaiting_sync(ZoneSettings::default());
    assert!(!idx.synced());
    let m = ask(&idx, "kubernetes.default.svc.cluster.local.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert!(m.answers.is_empty());
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    // what the index holds already answers, and existing names without the type stay NODATA
    idx.upsert_service(cluster_ip(
        "default",
        "kubernetes",
        &["10.96.0.1"],
        vec![port("https", "tcp", 443)],
    ));
    let m = ask(&idx, "kubernetes.default.svc.cluster.local.", RecordType::A);
    assert_eq!(
        lines(&m.answers),
        ["kubernetes.default.svc.cluster.local. A 10.96.0.1"]
    );
    assert_nodata(&ask(
        &idx,
        "kubernetes.default.svc.cluster.local.",
        RecordType::AAAA,
    ));
    assert_eq!(
        ask(&idx, "dns-version.cluster.local.", RecordType::TXT)
            .metadata
            .response_code,
        ResponseCode::NoError
    );
    let m = ask(&idx, "missing.default.svc.cluster.local.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    // after the first lists: NXDOMAIN as the spec says
    idx.mark_synced();
    assert_nxdomain(&ask(
        &idx,
        "missing.default.svc.cluster.local.",
        RecordType::A,
    ));
    assert!(
        Index::new(ZoneSettings::default()).synced(),
        "a built index is complete"
    );
}

#[test]
fn headless_answers_with_ready_endpoints() {
    let idx = fixture();
    let m = ask(&idx, "pg.db.svc.cluster.local.", RecordType::A);
    assert_eq!(
        lines(&m.answers),
        [
            "pg.db.svc.cluster.local. A 10.244.1.5",
            "pg.db.svc.cluster.local. A 10.244.1.6",
            "pg.db.svc.cluster.local. A 10.244.2.7",
        ]
    );
    assert_nodata(&ask(&idx, "pg.db.svc.cluster.local.", RecordType::AAAA));
}

#[test]
fn endpoint_hostnames() {
    let idx = fixture();
    let m = ask(&idx, "pg-0.pg.db.svc.cluster.local.", RecordType::A);
    assert_eq!(
        lines(&m.answers),
        ["pg-0.pg.db.svc.cluster.local. A 10.244.1.5"]
    );
    let m = ask(&idx, "10-244-2-7.pg.db.svc.cluster.local.", RecordType::A);
    assert_eq!(
        lines(&m.answers),
        ["10-244-2-7.pg.db.svc.cluster.local. A 10.244.2.7"]
    );
}

#[test]
fn srv_for_cluster_ip_targets_the_service() {
    let idx = fixture();
    let m = ask(
        &idx,
        "_http._tcp.web.default.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(
        lines(&m.answers),
        ["_http._tcp.web.default.svc.cluster.local. SRV 0 100 80 web.default.svc.cluster.local."]
    );
    assert_eq!(
        lines(&m.additionals),
        [
            "web.default.svc.cluster.local. A 10.96.0.10",
            "web.default.svc.cluster.local. AAAA fd00::10"
        ]
    );
    let m = ask(
        &idx,
        "_DNS._UDP.web.default.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(m.answers.len(), 1);
}

#[test]
fn srv_for_headless_has_one_record_per_endpoint() {
    let idx = fixture();
    let m = ask(&idx, "_pg._tcp.pg.db.svc.cluster.local.", RecordType::SRV);
    // the endpoint (slice) port, 33 = 100 / 3
    assert_eq!(
        lines(&m.answers),
        [
            "_pg._tcp.pg.db.svc.cluster.local. SRV 0 33 15432 10-244-2-7.pg.db.svc.cluster.local.",
            "_pg._tcp.pg.db.svc.cluster.local. SRV 0 33 15432 pg-0.pg.db.svc.cluster.local.",
            "_pg._tcp.pg.db.svc.cluster.local. SRV 0 33 15432 pg-1.pg.db.svc.cluster.local.",
        ]
    );
    assert_eq!(
        lines(&m.additionals),
        [
            "10-244-2-7.pg.db.svc.cluster.local. A 10.244.2.7",
            "pg-0.pg.db.svc.cluster.local. A 10.244.1.5",
            "pg-1.pg.db.svc.cluster.local. A 10.244.1.6",
        ]
    );
}

#[test]
fn external_name_is_a_cname() {
    let idx = fixture();
    match answer(
        &idx,
        &request("ext.default.svc.cluster.local.", RecordType::A),
    ) {
        Outcome::Chase { response, target } => {
            assert_eq!(target, name("www.example.com."));
            assert_eq!(
                lines(&response.answers),
                ["ext.default.svc.cluster.local. CNAME www.example.com."]
            );
            assert!(response.metadata.authoritative);
        }
        other => panic!("expected a chase, got {other:?}"),
    }
    // asked for the CNAME itself: nothing to chase
    let m = ask(&idx, "ext.default.svc.cluster.local.", RecordType::CNAME);
    assert_eq!(
        lines(&m.answers),
        ["ext.default.svc.cluster.local. CNAME www.example.com."]
    );
    // a target inside the zone is followed here
    let m = ask(&idx, "alias.default.svc.cluster.local.", RecordType::A);
    assert_eq!(
        lines(&m.answers),
        [
            "alias.default.svc.cluster.local. CNAME web.default.svc.cluster.local.",
            "web.default.svc.cluster.local. A 10.96.0.10",
        ]
    );
}

#[test]
fn cname_loops_inside_the_zone_end() {
    let mut idx = Index::new(ZoneSettings::default());
    for (n, t) in [("a", "b"), ("b", "a")] {
        idx.upsert_service(ServiceInfo {
            key: ServiceKey::new("default", n),
            kind: ServiceKind::ExternalName(name(&format!("{t}.default.svc.cluster.local."))),
            ports: vec![],
            publish_not_ready: false,
        });
    }
    let m = ask(&idx, "a.default.svc.cluster.local.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
}

#[test]
fn ptr_for_service_and_endpoint_ips() {
    let idx = fixture();
    let m = ask(&idx, "10.0.96.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(
        lines(&m.answers),
        ["10.0.96.10.in-addr.arpa. PTR web.default.svc.cluster.local."]
    );
    assert!(m.metadata.authoritative);
    let m = ask(&idx, "5.1.244.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(
        lines(&m.answers),
        ["5.1.244.10.in-addr.arpa. PTR pg-0.pg.db.svc.cluster.local."]
    );
    let v6 = "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.";
    let m = ask(&idx, v6, RecordType::PTR);
    assert_eq!(
        lines(&m.answers),
        [format!("{v6} PTR web.default.svc.cluster.local.")]
    );
    // not ours (not ready, or unknown): upstream's reverse zones
    for q in [
        "8.2.244.10.in-addr.arpa.",
        "1.2.0.192.in-addr.arpa.",
        "96.10.in-addr.arpa.",
    ] {
        assert_eq!(
            answer(&idx, &request(q, RecordType::PTR)),
            Outcome::Forward,
            "{q}"
        );
    }
}

#[test]
fn schema_version_apex_soa_and_ns() {
    let idx = fixture();
    let m = ask(&idx, "dns-version.cluster.local.", RecordType::TXT);
    assert_eq!(lines(&m.answers), ["dns-version.cluster.local. TXT 1.1.0"]);
    let m = ask(&idx, "cluster.local.", RecordType::SOA);
    assert_eq!(m.answers.len(), 1);
    let RData::SOA(soa) = &m.answers[0].data else {
        panic!("{:?}", m.answers)
    };
    assert_eq!(soa.mname, name("ns.dns.cluster.local."));
    assert_eq!(soa.rname, name("hostmaster.cluster.local."));
    assert_eq!(soa.minimum, 5, "the negative TTL is the record TTL");
    assert_eq!(soa.serial, idx.serial());
    let m = ask(&idx, "cluster.local.", RecordType::NS);
    assert_eq!(
        lines(&m.answers),
        ["cluster.local. NS ns.dns.cluster.local."]
    );
    assert_eq!(
        lines(&m.additionals),
        ["ns.dns.cluster.local. A 10.250.0.11"]
    );
    let m = ask(&idx, "ns.dns.cluster.local.", RecordType::A);
    assert_eq!(lines(&m.answers), ["ns.dns.cluster.local. A 10.250.0.11"]);
    assert_nodata(&ask(&idx, "ns.dns.cluster.local.", RecordType::AAAA));
}

#[test]
fn ttl_and_zone_come_from_the_settings() {
    let mut idx = Index::new(ZoneSettings {
        zone: name("kiln.test."),
        ttl: 30,
        ns_addresses: vec![],
    });
    idx.upsert_service(cluster_ip("default", "web", &["10.96.0.10"], vec![]));
    let m = ask(&idx, "web.default.svc.kiln.test.", RecordType::A);
    assert_eq!(m.answers[0].ttl, 30);
    let m = ask(&idx, "nope.kiln.test.", RecordType::A);
    assert_eq!(m.authorities[0].ttl, 30);
    assert_eq!(
        answer(
            &idx,
            &request("web.default.svc.cluster.local.", RecordType::A)
        ),
        Outcome::Forward,
        "another zone is forwarded"
    );
}

#[test]
fn outside_the_zone_is_forwarded() {
    let idx = fixture();
    for q in ["example.com.", "local.", "cluster.local.example.com.", "."] {
        assert_eq!(
            answer(&idx, &request(q, RecordType::A)),
            Outcome::Forward,
            "{q}"
        );
    }
    let mut chaos = request("version.bind.", RecordType::TXT);
    chaos.queries[0].set_query_class(DNSClass::CH);
    let Outcome::Answer(m) = answer(&idx, &chaos) else {
        panic!()
    };
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn request_errors() {
    let idx = fixture();
    let mut notify = request("cluster.local.", RecordType::SOA);
    notify.metadata.op_code = OpCode::Notify;
    let Outcome::Answer(m) = answer(&idx, &notify) else {
        panic!()
    };
    assert_eq!(m.metadata.response_code, ResponseCode::NotImp);

    let mut two = request("web.default.svc.cluster.local.", RecordType::A);
    two.add_query(Query::query(name("example.com."), RecordType::A));
    let Outcome::Answer(m) = answer(&idx, &two) else {
        panic!()
    };
    assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
    let mut none = request("x.", RecordType::A);
    none.queries.clear();
    let Outcome::Answer(m) = answer(&idx, &none) else {
        panic!()
    };
    assert_eq!(m.metadata.response_code, ResponseCode::FormErr);

    let mut v1 = request("web.default.svc.cluster.local.", RecordType::A);
    let mut edns = Edns::new();
    edns.set_version(1);
    v1.set_edns(edns);
    let Outcome::Answer(m) = answer(&idx, &v1) else {
        panic!()
    };
    assert_eq!(m.metadata.response_code, ResponseCode::BADVERS);
    assert_eq!(m.edns.as_ref().map(|e| e.version()), Some(0));

    let Outcome::Answer(m) = answer(&idx, &request("cluster.local.", RecordType::AXFR)) else {
        panic!()
    };
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn edns_is_answered_with_opt() {
    let idx = fixture();
    let plain = ask(&idx, "web.default.svc.cluster.local.", RecordType::A);
    assert!(plain.edns.is_none(), "no OPT without one in the request");
    let mut req = request("web.default.svc.cluster.local.", RecordType::A);
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    req.set_edns(edns);
    let Outcome::Answer(m) = answer(&idx, &req) else {
        panic!()
    };
    let opt = m.edns.expect("OPT in the response");
    assert_eq!(opt.max_payload(), MAX_UDP_PAYLOAD);
    assert_eq!(opt.version(), 0);
}
