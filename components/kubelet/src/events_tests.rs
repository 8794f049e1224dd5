//! Correlation (aggregation, spam filter) on values, and the queue's never-block contract.

use super::*;

fn pod_ref() -> ObjectRef {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "apps", "uid": "u1", "resourceVersion": "42"}
    }))
    .unwrap();
    ObjectRef::pod(&p)
}

fn rec(reason: &str, message: &str) -> Recorded {
    Recorded {
        object: pod_ref().container("main", false),
        type_: EventType::Normal,
        reason: reason.into(),
        message: message.into(),
    }
}

fn created(p: Post) -> Event {
    match p {
        Post::Create(e) => *e,
        other => panic!("expected a create, got {other:?}"),
    }
}

#[test]
fn the_event_names_the_container_source_and_reporter() {
    let mut c = Correlator::new("host1");
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let e = created(c.observe(&rec("Started", "Started container main"), Instant::now(), t));
    assert_eq!(e.metadata.namespace.as_deref(), Some("apps"));
    assert!(e.metadata.name.as_deref().unwrap().starts_with("web."));
    let o = &e.involved_object;
    assert_eq!(o.kind.as_deref(), Some("Pod"));
    assert_eq!(o.api_version.as_deref(), Some("v1"));
    assert_eq!(o.uid.as_deref(), Some("u1"));
    assert_eq!(o.resource_version.as_deref(), Some("42"));
    assert_eq!(o.field_path.as_deref(), Some("spec.containers{main}"));
    let s = e.source.unwrap();
    assert_eq!(
        (s.component.as_deref(), s.host.as_deref()),
        (Some("kubelet"), Some("host1"))
    );
    assert_eq!(e.reporting_component.as_deref(), Some("kubelet"));
    assert_eq!(e.reporting_instance.as_deref(), Some("host1"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.count, Some(1));
    assert_eq!(e.first_timestamp, e.last_timestamp);
    assert_eq!(
        pod_ref().container("init", true).field_path.as_deref(),
        Some("spec.initContainers{init}")
    );
}

#[test]
fn repeats_raise_the_count_of_one_object_and_a_new_message_is_a_new_object() {
    let mut c = Correlator::new("host1");
    let t0 = Instant::now();
    let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let first = created(c.observe(&rec("BackOff", "m"), t0, w0));
    let again = c.observe(&rec("BackOff", "m"), t0, w0 + Duration::from_secs(10));
    let Post::Update(e) = again else {
        panic!("{again:?}")
    };
    assert_eq!(e.metadata.name, first.metadata.name);
    assert_eq!(e.count, Some(2));
    assert_eq!(e.first_timestamp, first.first_timestamp);
    assert_ne!(e.last_timestamp, first.last_timestamp);
    let third = c.observe(&rec("BackOff", "m"), t0, w0 + Duration::from_secs(20));
    assert!(matches!(third, Post::Update(e) if e.count == Some(3)));
    let other = created(c.observe(&rec("BackOff", "other"), t0, w0 + Duration::from_secs(30)));
    assert_ne!(other.metadata.name, first.metadata.name);
    // Same reason and message on another container: its own object.
    let mut on_other = rec("BackOff", "m");
    on_other.object = pod_ref().container("side", false);
    assert!(matches!(
        c.observe(&on_other, t0, w0 + Duration::from_secs(31)),
        Post::Create(_)
    ));
}

#[test]
fn an_object_over_its_burst_is_filtered_until_tokens_come_back() {
    let mut c = Correlator::new("host1");
    let t0 = Instant::now();
    let w = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    for i in 0..BURST {
        assert_ne!(
            c.observe(&rec("Unhealthy", &format!("m{i}")), t0, w),
            Post::Skip
        );
    }
    assert_eq!(c.observe(&rec("Unhealthy", "late"), t0, w), Post::Skip);
    // Another pod has its own budget.
    let mut other = rec("Unhealthy", "x");
    other.object.uid = "u2".into();
    assert_ne!(c.observe(&other, t0, w), Post::Skip);
    // One token per REFILL.
    assert_ne!(
        c.observe(&rec("Unhealthy", "late"), t0 + REFILL, w),
        Post::Skip
    );
    assert_eq!(
        c.observe(&rec("Unhealthy", "later"), t0 + REFILL, w),
        Post::Skip
    );
}

#[tokio::test]
async fn a_full_queue_drops_instead_of_blocking() {
    let (r, mut sink) = api_recorder("host1", 2);
    for i in 0..5 {
        r.record(&pod_ref(), EventType::Normal, "Pulled", format!("m{i}"));
    }
    let mut got = Vec::new();
    while let Ok(e) = sink.rx.try_recv() {
        got.push(e.message);
    }
    assert_eq!(got, vec!["m0", "m1"]);
    assert_eq!(r.dropped.load(Ordering::Relaxed), 3);
}
