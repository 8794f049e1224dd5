use super::*;
use crate::fake_upstream::{is_response, FakeUpstream};
use hickory_proto::rr::{Name, RData, RecordType};

fn q(name: &str) -> Query {
    Query::query(Name::from_ascii(name).unwrap(), RecordType::A)
}

fn forwarder(upstreams: Vec<SocketAddr>) -> (Forwarder, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    // short, so a silent upstream costs the test little; a bound, not a timing assertion
    let f = Forwarder::new(upstreams, Duration::from_millis(300), metrics.clone());
    (f, metrics)
}

fn first_a(m: &Message) -> String {
    match &m.answers[0].data {
        RData::A(a) => a.0.to_string(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn answers_come_from_the_upstream() {
    let up = FakeUpstream::start().await;
    let (f, _) = forwarder(vec![up.addr]);
    let m = f.resolve(&q("a.example.")).await.unwrap();
    assert!(is_response(&m));
    assert_eq!(first_a(&m), "192.0.2.1");
    let nx = f.resolve(&q("missing.example.")).await.unwrap();
    assert_eq!(
        nx.metadata.response_code,
        ResponseCode::NXDomain,
        "NXDOMAIN is an answer"
    );
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn a_silent_upstream_is_retried_on_the_next() {
    let dead = FakeUpstream::silent().await;
    let up = FakeUpstream::start().await;
    let (f, metrics) = forwarder(vec![dead.addr, up.addr]);
    let m = f.resolve(&q("a.example.")).await.unwrap();
    assert_eq!(first_a(&m), "192.0.2.1");
    assert_eq!(dead.count(), 1);
    let text = metrics.render(true);
    assert!(
        text.contains("\nkiln_dns_forward_requests_total 2\n"),
        "{text}"
    );
    assert!(
        text.contains("\nkiln_dns_forward_errors_total 1\n"),
        "{text}"
    );
}

#[tokio::test]
async fn one_upstream_gets_a_second_attempt() {
    let up = FakeUpstream::start().await;
    let (f, _) = forwarder(vec![up.addr]);
    let err = f.resolve(&q("silent.example.")).await.unwrap_err();
    assert!(err.to_string().contains("timed out (udp)"), "{err}");
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn truncated_udp_answers_are_fetched_over_tcp() {
    let up = FakeUpstream::start().await;
    let (f, _) = forwarder(vec![up.addr]);
    let m = f.resolve(&q("big.example.")).await.unwrap();
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 50);
    assert_eq!(up.count(), 2, "one UDP, one TCP");
}

#[tokio::test]
async fn servfail_everywhere_is_an_error() {
    let a = FakeUpstream::start().await;
    let b = FakeUpstream::start().await;
    let (f, metrics) = forwarder(vec![a.addr, b.addr]);
    let err = f.resolve(&q("fail.example.")).await.unwrap_err();
    assert!(err.to_string().contains("Server Failure"), "{err}");
    assert_eq!((a.count(), b.count()), (1, 1));
    assert!(metrics
        .render(true)
        .contains("\nkiln_dns_forward_errors_total 2\n"));
    let (none, _) = forwarder(vec![]);
    assert!(matches!(
        none.resolve(&q("a.example.")).await,
        Err(ForwardError::NoUpstreams)
    ));
}

#[tokio::test]
async fn stray_answers_are_ignored() {
    let up = FakeUpstream::start().await;
    let (f, _) = forwarder(vec![up.addr]);
    let m = f.resolve(&q("spoof.example.")).await.unwrap();
    assert_eq!(
        first_a(&m),
        "192.0.2.1",
        "neither the wrong id nor the wrong question"
    );
}
