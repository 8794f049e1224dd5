//! sig-instrumentation entries: core/v1 and events.k8s.io/v1 Events through their API lifecycle
//! (both views of the same objects). Each case restates the entry's MUSTs in its doc comment.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{by_label, from_json, Ctx};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-instrumentation] Events should manage the lifecycle of an event [Conformance]",
        "events",
        event_lifecycle
    ),
    case!(
        "[sig-instrumentation] Events should delete a collection of events [Conformance]",
        "events",
        event_delete_collection
    ),
    case!(
        "[sig-instrumentation] Events API should ensure that an event can be fetched, patched, deleted, and listed [Conformance]",
        "events",
        events_v1_lifecycle
    ),
    case!(
        "[sig-instrumentation] Events API should delete a collection of events [Conformance]",
        "events",
        events_v1_delete_collection
    ),
];

fn test_event(ctx: &Ctx, name: &str) -> CaseResult<Event> {
    from_json(json!({
        "metadata": {"name": name, "labels": {"testevent-constant": "true"}},
        "message": "This is a test event",
        "reason": "Test",
        "type": "Normal",
        "count": 1,
        "involvedObject": {"namespace": ctx.ns},
    }))
}

/// Event, manage lifecycle: a created Event MUST be listed across all namespaces by its label; after a
/// patch of its message a get MUST return the new message; after delete, the list MUST NOT include it.
async fn event_lifecycle(ctx: &Ctx) -> CaseResult {
    let events: Api<Event> = ctx.api();
    events
        .create(&PostParams::default(), &test_event(ctx, "event-test")?)
        .await?;
    let all: Api<Event> = Api::all(ctx.client.clone());
    let listed = all.list(&by_label("testevent-constant", "true")).await?;
    must!(
        listed
            .items
            .iter()
            .any(|e| e.metadata.name.as_deref() == Some("event-test")
                && e.metadata.namespace.as_deref() == Some(ctx.ns.as_str())),
        "the Event is not listed across namespaces by its label"
    );
    events
        .patch(
            "event-test",
            &PatchParams::default(),
            &Patch::Strategic(json!({"message": "This is a test event - patched"})),
        )
        .await?;
    let got = events.get("event-test").await?;
    must_eq!(
        got.message.as_deref(),
        Some("This is a test event - patched"),
        "the patched message"
    );
    events
        .delete("event-test", &DeleteParams::default())
        .await?;
    let after = events.list(&by_label("testevent-constant", "true")).await?;
    must!(
        !after
            .items
            .iter()
            .any(|e| e.metadata.name.as_deref() == Some("event-test")),
        "the Event is still listed after delete"
    );
    Ok(())
}

/// Event, delete a collection: three labelled Events MUST be listed; after a deletecollection with the
/// label selector none MUST remain.
async fn event_delete_collection(ctx: &Ctx) -> CaseResult {
    let events: Api<Event> = ctx.api();
    for i in 1..=3 {
        events
            .create(
                &PostParams::default(),
                &test_event(ctx, &format!("test-event-{i}"))?,
            )
            .await?;
    }
    let listed = events.list(&by_label("testevent-constant", "true")).await?;
    must_eq!(listed.items.len(), 3, "labelled events listed");
    events
        .delete_collection(
            &DeleteParams::default(),
            &by_label("testevent-constant", "true"),
        )
        .await?;
    let after = events.list(&by_label("testevent-constant", "true")).await?;
    must!(
        after.items.is_empty(),
        "{} events remain after deletecollection",
        after.items.len()
    );
    Ok(())
}

/// An events.k8s.io/v1 Event as upstream's newTestEvent: a new-style event (eventTime, action,
/// reporting controller and instance) regarding the namespace.
fn test_event_v1(ctx: &Ctx, name: &str, label: &str) -> CaseResult<EventV1> {
    from_json(json!({
        "metadata": {"name": name, "labels": {label: "true"}},
        "regarding": {"namespace": ctx.ns},
        "eventTime": "2017-09-19T13:49:16.000000Z",
        "note": format!("This is {name}"),
        "action": "Do",
        "reason": "Test",
        "type": "Normal",
        "reportingController": "test-controller",
        "reportingInstance": "test-node",
    }))
}

/// Whether the events.k8s.io list with the label holds `name` of the case's namespace.
async fn listed_v1(api: &Api<EventV1>, ns: &str, name: &str) -> CaseResult<bool> {
    let list = api.list(&by_label("testevent-constant", "true")).await?;
    Ok(list.items.iter().any(|e| {
        e.metadata.name.as_deref() == Some(name) && e.metadata.namespace.as_deref() == Some(ns)
    }))
}

/// An Event without what the control plane sets, to compare what a client wrote with what it reads.
fn comparable(mut e: EventV1) -> serde_json::Value {
    e.metadata.resource_version = None;
    e.metadata.managed_fields = None;
    crate::ctx::to_json(&e)
}

/// Events API, single event lifecycle: a created event MUST exist (listed across namespaces and in
/// its own; found by core's `source` and events.k8s.io's `reportingController` field selectors); a
/// patch of its note MUST show, with nothing else changed; an update adding a series MUST show; once
/// deleted it MUST NOT be listed.
async fn events_v1_lifecycle(ctx: &Ctx) -> CaseResult {
    let name = "event-test";
    let events: Api<EventV1> = ctx.api();
    let all: Api<EventV1> = Api::all(ctx.client.clone());
    events
        .create(
            &PostParams::default(),
            &test_event_v1(ctx, name, "testevent-constant")?,
        )
        .await?;
    must!(
        listed_v1(&all, &ctx.ns, name).await?,
        "the event is not listed in all namespaces"
    );
    must!(
        listed_v1(&events, &ctx.ns, name).await?,
        "the event is not listed in its namespace"
    );
    let core: Api<Event> = ctx.api();
    let by_source = core
        .list(&ListParams::default().fields("source=test-controller"))
        .await?;
    let names: Vec<_> = by_source
        .items
        .iter()
        .filter_map(|e| e.metadata.name.clone())
        .collect();
    must_eq!(names, [name], "core v1 events with source=test-controller");
    let by_controller = events
        .list(&ListParams::default().fields("reportingController=test-controller"))
        .await?;
    let names: Vec<_> = by_controller
        .items
        .iter()
        .filter_map(|e| e.metadata.name.clone())
        .collect();
    must_eq!(
        names,
        [name],
        "events.k8s.io events with reportingController=test-controller"
    );

    let mut expected = events.get(name).await?;
    let patched_note = "This is a test event - patched";
    events
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({ "note": patched_note })),
        )
        .await?;
    expected.note = Some(patched_note.to_string());
    let got = events.get(name).await?;
    must_eq!(
        comparable(got),
        comparable(expected.clone()),
        "the event after patching its note"
    );

    // As upstream, the update carries no resourceVersion: events update unconditionally.
    expected.metadata.resource_version = None;
    expected.series = Some(k8s_openapi::api::events::v1::EventSeries {
        count: 100,
        last_observed_time: from_json(json!("2017-09-19T13:49:16.000000Z"))?,
    });
    events
        .replace(name, &PostParams::default(), &expected)
        .await?;
    let got = events.get(name).await?;
    must_eq!(
        comparable(got),
        comparable(expected),
        "the event after adding a series"
    );

    events.delete(name, &DeleteParams::default()).await?;
    must!(
        !listed_v1(&all, &ctx.ns, name).await?,
        "the event is still listed in all namespaces after delete"
    );
    must!(
        !listed_v1(&events, &ctx.ns, name).await?,
        "the event is still listed in its namespace after delete"
    );
    Ok(())
}

/// Events API, list of events: three created events MUST be listed by their label; after a
/// deletecollection with that label none MUST remain.
async fn events_v1_delete_collection(ctx: &Ctx) -> CaseResult {
    let events: Api<EventV1> = ctx.api();
    let names = ["test-event-1", "test-event-2", "test-event-3"];
    for name in names {
        events
            .create(
                &PostParams::default(),
                &test_event_v1(ctx, name, "testevent-set")?,
            )
            .await?;
    }
    let listed = events.list(&by_label("testevent-set", "true")).await?;
    must_eq!(listed.items.len(), names.len(), "labelled events listed");
    events
        .delete_collection(&DeleteParams::default(), &by_label("testevent-set", "true"))
        .await?;
    let after = events.list(&by_label("testevent-set", "true")).await?;
    must!(
        after.items.is_empty(),
        "{} events remain after deletecollection",
        after.items.len()
    );
    Ok(())
}
