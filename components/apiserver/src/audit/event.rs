//! `audit.k8s.io/v1` Event, field for field as upstream writes it (one JSON object per line).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::policy::{Level, Stage};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: UserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    #[serde(serialize_with = "micro_time")]
    pub request_received_timestamp: OffsetDateTime,
    #[serde(serialize_with = "micro_time")]
    pub stage_timestamp: OffsetDateTime,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct UserInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// metav1.Status as upstream copies it into an event: the bounded fields only.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ResponseStatus {
    pub metadata: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

impl ResponseStatus {
    pub fn code(code: u16) -> ResponseStatus {
        ResponseStatus {
            code,
            ..Default::default()
        }
    }

    /// The status a `kind: Status` response body carries, with the HTTP code.
    pub fn from_body(body: &Value, code: u16) -> Option<ResponseStatus> {
        if body["kind"] != "Status" {
            return None;
        }
        let text = |f: &str| body[f].as_str().unwrap_or_default().to_string();
        Some(ResponseStatus {
            metadata: Default::default(),
            status: text("status"),
            message: text("message"),
            reason: text("reason"),
            details: body.get("details").filter(|d| !d.is_null()).cloned(),
            code,
        })
    }
}

/// metav1.MicroTime: RFC 3339 in UTC with microseconds.
fn micro_time<S: serde::Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_micro(*t))
}

pub fn format_micro(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// Drops `metadata.managedFields` from an object, or from every item of a list (omitManagedFields).
pub fn strip_managed_fields(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(m) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_with_upstreams_field_names_and_micro_times() {
        let t = time::macros::datetime!(2026-01-02 03:04:05.123456789 UTC);
        let ev = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "id".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/pods?fieldManager=kubectl-create".into(),
            verb: "create".into(),
            user: UserInfo {
                username: "admin".into(),
                groups: vec!["system:masters".into()],
            },
            impersonated_user: None,
            source_ips: vec!["127.0.0.1".into()],
            user_agent: "kubectl/v1.32.0".into(),
            object_ref: Some(ObjectRef {
                resource: "pods".into(),
                namespace: "default".into(),
                name: "p".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            response_status: Some(ResponseStatus::code(201)),
            request_object: None,
            response_object: None,
            request_received_timestamp: t,
            stage_timestamp: t,
            annotations: BTreeMap::from([("authorization.k8s.io/decision".into(), "allow".into())]),
        };
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"id","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/pods?fieldManager=kubectl-create","verb":"create","user":{"username":"admin","groups":["system:masters"]},"sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.32.0","objectRef":{"resource":"pods","namespace":"default","name":"p","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-01-02T03:04:05.123456Z","stageTimestamp":"2026-01-02T03:04:05.123456Z","annotations":{"authorization.k8s.io/decision":"allow"}}"#
        );
    }

    #[test]
    fn status_bodies_and_managed_fields() {
        let body = serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404});
        let s = serde_json::to_value(ResponseStatus::from_body(&body, 404).unwrap()).unwrap();
        assert_eq!(
            s,
            serde_json::json!({"metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404})
        );
        let mut list = serde_json::json!({"items":[{"metadata":{"name":"a","managedFields":[{}]}}],"metadata":{"managedFields":[]}});
        strip_managed_fields(&mut list);
        assert_eq!(
            list,
            serde_json::json!({"items":[{"metadata":{"name":"a"}}],"metadata":{}})
        );
    }
}
