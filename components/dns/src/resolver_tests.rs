use super::*;
use crate::fake_upstream::FakeUpstream;
use crate::index::ZoneSettings;
use crate::model::{ServiceInfo, ServiceKey, ServiceKind};
use hickory_proto::op::{Edns, MessageType, OpCode};
use hickory_proto::rr::{Name, RecordType};
use std::time::Duration;

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

fn resolver(upstreams: Vec<std::net::SocketAddr>) -> (Resolver, Arc<Health>) {
    let mut index = Index::new(ZoneSettings::default());
    index.upsert_service(ServiceInfo {
        key: ServiceKey::new("default", "ext"),
        kind: ServiceKind::ExternalName(name("www.example.com.")),
        ports: vec![],
        publish_not_ready: false,
    });
    let health = Health::new();
    let f = Forwarder::new(
        upstreams,
        Duration::from_millis(300),
        health.metrics.clone(),
    );
    let r = Resolver::new(
        Arc::new(RwLock::new(index)),
        Cache::new(100),
        f,
        health.clone(),
    );
    (r, health)
}

fn query(id: u16, qname: &str, qtype: RecordType, edns: bool) -> Vec<u8> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(name(qname), qtype));
    if edns {
        let mut e = Edns::new();
        e.set_max_payload(1232);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

async fn ask(r: &Resolver, id: u16, qname: &str, t: Transport, edns: bool) -> Message {
    let reply = r
        .handle(&query(id, qname, RecordType::A, edns), t)
        .await
        .unwrap();
    let m = Message::from_vec(&reply).unwrap();
    assert_eq!(m.metadata.id, id);
    m
}

#[tokio::test]
async fn forwarded_answers_are_cached() {
    let up = FakeUpstream::start().await;
    let (r, health) = resolver(vec![up.addr]);
    let m = ask(&r, 1, "a.example.", Transport::Udp, true).await;
    assert_eq!(m.answers.len(), 1);
    assert!(!m.metadata.authoritative, "forwarded answers are not ours");
    assert!(m.edns.is_some());
    let m = ask(&r, 2, "A.EXAMPLE.", Transport::Udp, false).await;
    assert_eq!(m.answers.len(), 1);
    assert!(m.answers[0].ttl <= 300);
    assert_eq!(up.count(), 1, "the second answer came from the cache");
    // negative answers are cached too
    let nx = ask(&r, 3, "nx.example.", Transport::Udp, false).await;
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
    ask(&r, 4, "nx.example.", Transport::Udp, false).await;
    assert_eq!(up.count(), 2);
    let text = health.metrics.render(false);
    assert!(text.contains("\nkiln_dns_cache_hits_total 2\n"), "{text}");
    assert!(text.contains("\nkiln_dns_cache_misses_total 2\n"), "{text}");
    assert!(text.contains("\nkiln_dns_cache_entries 2\n"), "{text}");
    assert!(text.contains("kiln_dns_requests_total{proto=\"udp\",type=\"A\",rcode=\"NXDOMAIN\"} 2"));
}

#[tokio::test]
async fn big_forwarded_answers_are_truncated_over_udp_only() {
    let up = FakeUpstream::start().await;
    let (r, _) = resolver(vec![up.addr]);
    let m = ask(&r, 7, "big.example.", Transport::Udp, false).await;
    assert!(m.metadata.truncation && m.answers.is_empty());
    let m = ask(&r, 8, "big.example.", Transport::Tcp, false).await;
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 50);
}

#[tokio::test]
async fn external_names_are_chased_upstream() {
    let up = FakeUpstream::start().await;
    let (r, _) = resolver(vec![up.addr]);
    let m = ask(
        &r,
        9,
        "ext.default.svc.cluster.local.",
        Transport::Udp,
        false,
    )
    .await;
    let got: Vec<String> = m
        .answers
        .iter()
        .map(|r| format!("{} {}", r.name, r.data))
        .collect();
    assert_eq!(
        got,
        [
            "ext.default.svc.cluster.local. www.example.com.",
            "www.example.com. 192.0.2.80"
        ]
    );
    assert!(m.metadata.authoritative);
    // without upstreams the CNAME alone is still the answer
    let (r, _) = resolver(vec![]);
    let m = ask(
        &r,
        10,
        "ext.default.svc.cluster.local.",
        Transport::Udp,
        false,
    )
    .await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(m.answers.len(), 1);
}

#[tokio::test]
async fn servfail_when_every_upstream_fails() {
    let up = FakeUpstream::start().await;
    let (r, health) = resolver(vec![up.addr]);
    let m = ask(&r, 11, "fail.example.", Transport::Udp, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert!(m.answers.is_empty());
    let (r, _) = resolver(vec![]);
    let m = ask(&r, 12, "a.example.", Transport::Tcp, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert!(health
        .metrics
        .render(false)
        .contains("kiln_dns_requests_total{proto=\"udp\",type=\"A\",rcode=\"SERVFAIL\"} 1"));
    // dropped packets are counted, not answered
    assert!(r.handle(&[1, 2, 3], Transport::Udp).await.is_none());
}

/// The kept UDP replies are byte for byte what the index answers, with each request's ID, and an
/// index change (also the first sync) is answered at once.
#[test]
fn kept_replies_are_exact_and_follow_the_index() {
    let index = Index::awaiting_sync(ZoneSettings::default());
    let health = Health::new();
    let f = Forwarder::new(vec![], Duration::from_millis(300), health.metrics.clone());
    let r = Resolver::new(Arc::new(RwLock::new(index)), Cache::new(10), f, health);
    let now = |bytes: &[u8]| match r.answer_now(bytes, Transport::Udp) {
        Step::Done(Some(reply)) => reply,
        other => panic!("expected a reply, got {other:?}"),
    };
    let fresh = |bytes: &[u8]| {
        let idx = r.index.read().unwrap();
        match answer_bytes(&idx, bytes, Transport::Udp) {
            Reply::Send(s) => s.bytes,
            other => panic!("expected a reply, got {other:?}"),
        }
    };
    let web = "web.default.svc.cluster.local.";
    let a = |id| query(id, web, RecordType::A, true);
    let first = now(&a(1));
    assert_eq!(
        Message::from_vec(&first).unwrap().metadata.response_code,
        ResponseCode::ServFail,
        "not synced yet"
    );
    r.index.write().unwrap().mark_synced();
    let nx = now(&a(2));
    assert_eq!(nx, fresh(&a(2)));
    assert_eq!(
        Message::from_vec(&nx).unwrap().metadata.response_code,
        ResponseCode::NXDomain
    );
    r.index.write().unwrap().upsert_service(ServiceInfo {
        key: ServiceKey::new("default", "web"),
        kind: ServiceKind::ClusterIp(vec!["10.96.0.10".parse().unwrap()]),
        ports: vec![],
        publish_not_ready: false,
    });
    let before = r.replies.len();
    for (id, bytes) in [
        (3, query(3, web, RecordType::A, true)),
        (4, query(4, web, RecordType::A, false)),
        (5, query(5, web, RecordType::AAAA, true)),
        (
            6,
            query(6, "nope.default.svc.cluster.local.", RecordType::A, false),
        ),
    ] {
        let miss = now(&bytes);
        let mut again = bytes.clone();
        again[..2].copy_from_slice(&(id + 100u16).to_be_bytes());
        let hit = now(&again);
        assert_eq!(miss, fresh(&bytes));
        assert_eq!(hit, fresh(&again), "a kept reply is the fresh one");
        assert_eq!(Message::from_vec(&hit).unwrap().metadata.id, id + 100);
    }
    assert!(r.replies.len() > before, "UDP replies are kept");
    let m = Message::from_vec(&now(&a(7))).unwrap();
    assert_eq!(m.answers.len(), 1, "the new Service answers at once");
    // forwarded names are not kept here (no upstream: SERVFAIL each time, from the network path)
    let kept = r.replies.len();
    assert!(matches!(
        r.answer_now(
            &query(8, "a.example.", RecordType::A, false),
            Transport::Udp
        ),
        Step::Network(_)
    ));
    assert_eq!(r.replies.len(), kept);
}
