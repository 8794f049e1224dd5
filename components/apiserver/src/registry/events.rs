//! events.k8s.io/v1 Event: the same objects as core v1 Events (one store prefix,
//! `/registry/events`), each served in both shapes. Objects are stored as written and converted on
//! read (`ResourceSpec.convert`), field for field as upstream's pkg/apis/events/v1 conversion:
//! `regarding` is core's `involvedObject`, `note` its `message`, `reportingController` its
//! `reportingComponent`, and the `deprecated*` fields core's `source`, `firstTimestamp`,
//! `lastTimestamp` and `count`. Creates through events.k8s.io are validated strictly, as upstream's
//! ValidateEventCreate for that group (core v1 keeps its lenient legacy rules).

use k8s_openapi::api::events::v1::Event;
use serde_json::{json, Value};

use super::resources::EVENT_BASE;
use super::strategy::{typed, ResourceSpec, SelectableField};
use crate::status::Cause;

pub const GROUP: &str = "events.k8s.io";

/// (core v1 field, events.k8s.io/v1 field) for every field whose name differs; the rest
/// (reason, type, action, eventTime, series, related, reportingInstance, metadata) are the same.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

const CORE_API_VERSION: &str = "v1";
const EVENTS_API_VERSION: &str = "events.k8s.io/v1";

/// Moves each renamed field from one spelling to the other when the object is in `from`.
fn rename(obj: &mut Value, from: &str, to: &str, core_to_events: bool) {
    if obj["apiVersion"].as_str() != Some(from) {
        return;
    }
    if let Some(fields) = obj.as_object_mut() {
        for (core, events) in RENAMED {
            let (old, new) = if core_to_events {
                (core, events)
            } else {
                (events, core)
            };
            if let Some(v) = fields.remove(*old) {
                fields.insert((*new).to_string(), v);
            }
        }
    }
    obj["apiVersion"] = json!(to);
}

/// Any stored Event as a core v1 Event (the core spec's converter).
pub fn to_core(obj: &mut Value, _version: &str) {
    rename(obj, EVENTS_API_VERSION, CORE_API_VERSION, false);
}

/// Any stored Event as an events.k8s.io/v1 Event.
pub fn to_events_v1(obj: &mut Value, _version: &str) {
    rename(obj, CORE_API_VERSION, EVENTS_API_VERSION, true);
}

/// Upstream's length limits for the strict (events.k8s.io) validation.
const ACTION_MAX: usize = 128;
const REASON_MAX: usize = 128;
const REPORTING_INSTANCE_MAX: usize = 128;
const NOTE_MAX: usize = 1024;

fn text<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj[field].as_str().unwrap_or("")
}

fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_i64() != Some(0),
        Value::Object(m) => m.values().any(is_set),
        _ => true,
    }
}

/// pkg/apis/core/validation ValidateEventCreate for events.k8s.io/v1: what a new-style event must
/// carry, and the deprecated fields it must leave unset.
fn validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let namespace = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let regarding_ns = obj["regarding"]["namespace"].as_str().unwrap_or("");
    if !regarding_ns.is_empty() && !namespace.is_empty() && regarding_ns != namespace {
        causes.push(Cause::invalid(
            "regarding.namespace",
            &json!(regarding_ns),
            "does not match event.namespace",
        ));
    }
    for (field, max) in [
        ("reportingController", usize::MAX),
        ("reportingInstance", REPORTING_INSTANCE_MAX),
        ("action", ACTION_MAX),
        ("reason", REASON_MAX),
    ] {
        let v = text(obj, field);
        if v.is_empty() {
            causes.push(Cause::required(field, ""));
        } else if v.len() > max {
            causes.push(Cause::invalid(
                field,
                &json!(""),
                &format!("can have at most {max} characters"),
            ));
        }
    }
    if text(obj, "note").len() > NOTE_MAX {
        causes.push(Cause::invalid(
            "note",
            &json!(""),
            &format!("can have at most {NOTE_MAX} characters"),
        ));
    }
    if text(obj, "eventTime").is_empty() {
        causes.push(Cause::required("eventTime", ""));
    }
    let type_ = text(obj, "type");
    if type_ != "Normal" && type_ != "Warning" {
        causes.push(Cause::invalid(
            "type",
            &json!(""),
            &format!("has invalid value: {type_}"),
        ));
    }
    if let Some(series) = obj.get("series").filter(|s| !s.is_null()) {
        if series["count"].as_i64().unwrap_or(0) < 2 {
            causes.push(Cause::invalid(
                "series.count",
                &json!(""),
                "should be at least 2",
            ));
        }
        if text(series, "lastObservedTime").is_empty() {
            causes.push(Cause::required("series.lastObservedTime", ""));
        }
    }
    for field in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
        "deprecatedSource",
    ] {
        if obj.get(field).is_some_and(is_set) {
            causes.push(Cause::invalid(field, &json!(""), "needs to be unset"));
        }
    }
    causes
}

/// pkg/apis/core/validation ValidateEventUpdate: what an event says happened does not change; only
/// its series, note and metadata may.
fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut old = old.clone();
    to_events_v1(&mut old, "v1");
    for field in [
        "regarding",
        "related",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
        "type",
        "eventTime",
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    ] {
        let (was, is) = (
            old.get(field).unwrap_or(&Value::Null),
            new.get(field).unwrap_or(&Value::Null),
        );
        if is_set(was) != is_set(is) || (is_set(was) && was != is) {
            causes.push(Cause::invalid(field, is, "field is immutable"));
        }
    }
    causes
}

/// Field selectors as upstream's field-label conversion for events.k8s.io/v1: its own names for
/// core's selectable fields.
const FIELDS: &[SelectableField] = &[
    SelectableField {
        name: "regarding.kind",
        pointer: "/regarding/kind",
    },
    SelectableField {
        name: "regarding.namespace",
        pointer: "/regarding/namespace",
    },
    SelectableField {
        name: "regarding.name",
        pointer: "/regarding/name",
    },
    SelectableField {
        name: "regarding.uid",
        pointer: "/regarding/uid",
    },
    SelectableField {
        name: "regarding.apiVersion",
        pointer: "/regarding/apiVersion",
    },
    SelectableField {
        name: "regarding.resourceVersion",
        pointer: "/regarding/resourceVersion",
    },
    SelectableField {
        name: "regarding.fieldPath",
        pointer: "/regarding/fieldPath",
    },
    SelectableField {
        name: "reason",
        pointer: "/reason",
    },
    SelectableField {
        name: "reportingController",
        pointer: "/reportingController",
    },
    SelectableField {
        name: "type",
        pointer: "/type",
    },
];

/// Upstream's events.k8s.io/v1 strategy sets no defaults; the typed decode drops nothing the
/// core view needs.
fn no_defaults(_: &mut Value) {}

pub static EVENTS_V1: ResourceSpec = ResourceSpec {
    group: GROUP,
    version: "v1",
    short_names: &["ev"],
    fields: FIELDS,
    decode: typed::<Event>,
    defaults: no_defaults,
    validate: validation,
    validate_update,
    convert: Some(to_events_v1),
    ..EVENT_BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    fn new_style() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": "ns"},
            "eventTime": "2017-09-19T13:49:16.000000Z",
            "note": "This is e",
            "action": "Do",
            "reason": "Test",
            "type": "Normal",
            "reportingController": "test-controller",
            "reportingInstance": "test-node",
        })
    }

    #[test]
    fn core_and_events_shapes_round_trip() {
        let original = new_style();
        let mut core = original.clone();
        to_core(&mut core, "v1");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "This is e");
        assert_eq!(core["reportingComponent"], "test-controller");
        assert_eq!(core["reportingInstance"], "test-node");
        assert!(core.get("note").is_none() && core.get("regarding").is_none());
        // Converting an object already in the wanted shape changes nothing.
        let mut again = core.clone();
        to_core(&mut again, "v1");
        assert_eq!(again, core);
        to_events_v1(&mut core, "v1");
        assert_eq!(core, original);

        let mut legacy = json!({
            "apiVersion": "v1", "kind": "Event",
            "involvedObject": {"kind": "Node", "name": "n"},
            "source": {"component": "kubelet", "host": "n"},
            "firstTimestamp": "2024-01-01T00:00:00Z", "count": 3, "message": "m",
        });
        to_events_v1(&mut legacy, "v1");
        assert_eq!(legacy["deprecatedSource"]["component"], "kubelet");
        assert_eq!(legacy["deprecatedFirstTimestamp"], "2024-01-01T00:00:00Z");
        assert_eq!(legacy["deprecatedCount"], 3);
        assert_eq!(legacy["regarding"]["kind"], "Node");
        assert_eq!(legacy["note"], "m");
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn strict_create_validation() {
        assert!(validation(&new_style()).is_empty());
        let mut bad = new_style();
        for f in [
            "eventTime",
            "action",
            "reportingController",
            "reportingInstance",
        ] {
            bad.as_object_mut().unwrap().remove(f);
        }
        bad["type"] = json!("Odd");
        bad["deprecatedCount"] = json!(2);
        bad["series"] = json!({"count": 1, "lastObservedTime": "2017-09-19T13:49:16.000000Z"});
        let causes = validation(&bad);
        assert_eq!(
            fields(&causes),
            [
                "reportingController",
                "reportingInstance",
                "action",
                "eventTime",
                "type",
                "series.count",
                "deprecatedCount"
            ]
        );
        assert_eq!(causes[0].message, "Required value");
        assert_eq!(
            causes[4].message,
            "Invalid value: \"\": has invalid value: Odd"
        );
        assert_eq!(causes[6].message, "Invalid value: \"\": needs to be unset");
    }

    #[test]
    fn updates_keep_what_happened() {
        let old = new_style();
        let mut new = old.clone();
        new["note"] = json!("patched");
        new["series"] = json!({"count": 100, "lastObservedTime": "2017-09-19T13:49:16.000000Z"});
        assert!(validate_update(&old, &new).is_empty());
        // A stored core-shaped event compares in the events shape.
        let mut stored_core = old.clone();
        to_core(&mut stored_core, "v1");
        assert!(validate_update(&stored_core, &new).is_empty());
        new["reason"] = json!("Other");
        assert_eq!(fields(&validate_update(&old, &new)), ["reason"]);
    }
}
