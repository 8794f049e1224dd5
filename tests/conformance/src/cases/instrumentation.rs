//! sig-instrumentation entries: core/v1 Events through their API lifecycle. Each case restates the
//! entry's MUSTs in its doc comment.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
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
