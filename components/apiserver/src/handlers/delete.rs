//! delete and deletecollection: preconditions, graceful deletion (pods on a node wait for their
//! kubelet), finalizers (deletionTimestamp until the last one is removed), and the garbage
//! collector's finalizers that DeleteOptions' propagationPolicy asks for (upstream's
//! `BeforeDelete` and `deletionFinalizersForGarbageCollection`): `orphan` (the collector strips
//! the dependents' references, then the finalizer), `foregroundDeletion` (the object stays until
//! its blocking dependents are gone); Background deletes at once.

use std::collections::HashMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::crud::{is_dry_run, read, required_name, MAX_ATTEMPTS};
use super::list::{list_objects, Selectors};
use crate::admission::node_restriction::Op;
use crate::registry::lifecycle::{name_of, now_rfc3339, to_stored};
use crate::registry::ResourceSpec;
use crate::request::Target;
use crate::state::AppState;
use crate::status::{json_response, ApiError, Cause};
use crate::storage::StoreError;
use crate::storage_status::store_error;

/// DeleteOptions from the body (may be empty) and the query.
pub(super) struct DeleteOptions {
    pub grace: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// The body of a DELETE as JSON (`{}` when empty).
fn delete_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(json!({}))
    } else {
        crate::request_body::parse_body(headers, body)
    }
}

fn delete_options(
    query: &HashMap<String, String>,
    body: &Value,
) -> Result<(DeleteOptions, Option<Propagation>), ApiError> {
    let grace = match query.get("gracePeriodSeconds") {
        Some(g) => Some(
            g.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        ),
        None => body["gracePeriodSeconds"].as_i64(),
    };
    let mut opts = DeleteOptions::from_body(body);
    opts.grace = grace;
    Ok((opts, Propagation::from_request(body, query)?))
}

impl DeleteOptions {
    /// A DeleteOptions object (a DELETE body, or an Eviction's `deleteOptions`).
    pub(super) fn from_body(body: &Value) -> Self {
        let pre = &body["preconditions"];
        DeleteOptions {
            grace: body["gracePeriodSeconds"].as_i64(),
            uid: pre["uid"].as_str().map(str::to_string),
            resource_version: pre["resourceVersion"].as_str().map(str::to_string),
        }
    }
}

/// The finalizer of an object deleted with propagationPolicy Orphan.
pub const ORPHAN: &str = "orphan";
/// The finalizer of an object deleted with propagationPolicy Foreground.
pub const FOREGROUND: &str = "foregroundDeletion";

/// DeleteOptions.propagationPolicy, or the deprecated orphanDependents (true = Orphan, false =
/// Background: neither finalizer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

impl Propagation {
    const NAMES: [(&'static str, Propagation); 3] = [
        ("Foreground", Propagation::Foreground),
        ("Background", Propagation::Background),
        ("Orphan", Propagation::Orphan),
    ];

    /// The policy a DELETE asks for: the body's DeleteOptions when it has one, else the query's
    /// parameters (as upstream decodes one or the other); None when it names none. Both fields
    /// set, or an unknown policy, is upstream's ValidateDeleteOptions 422.
    pub fn from_request(
        body: &Value,
        query: &HashMap<String, String>,
    ) -> Result<Option<Self>, ApiError> {
        let from_body = body.as_object().is_some_and(|o| !o.is_empty());
        let (policy, orphan) = if from_body {
            (
                body["propagationPolicy"].as_str().map(str::to_string),
                body["orphanDependents"].as_bool(),
            )
        } else {
            let orphan = match query.get("orphanDependents").map(String::as_str) {
                None => None,
                Some("true") => Some(true),
                Some("false") => Some(false),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "invalid orphanDependents {other:?}"
                    )))
                }
            };
            (query.get("propagationPolicy").cloned(), orphan)
        };
        let invalid = |cause| ApiError::invalid("meta.k8s.io", "DeleteOptions", "", vec![cause]);
        match (policy, orphan) {
            (Some(p), Some(_)) => Err(invalid(Cause::invalid(
                "propagationPolicy",
                &json!(p),
                "orphanDependents and deletionPropagation cannot be both set",
            ))),
            (Some(p), None) => match Self::NAMES.iter().find(|(n, _)| *n == p) {
                Some((_, policy)) => Ok(Some(*policy)),
                None => Err(invalid(Cause::not_supported(
                    "propagationPolicy",
                    &p,
                    &["Foreground", "Background", "Orphan", "nil"],
                ))),
            },
            (None, Some(true)) => Ok(Some(Propagation::Orphan)),
            (None, Some(false)) => Ok(Some(Propagation::Background)),
            (None, None) => Ok(None),
        }
    }
}

/// A kind's DefaultGarbageCollectionPolicy where upstream's registry strategy gives one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GcDefault {
    /// Deleted without a policy, the object orphans its dependents.
    Orphan,
    /// The kind never gets the collector's finalizers.
    Unsupported,
}

/// (group, version, resource, default): ReplicationControllers orphan by default in core v1 (for
/// backward compatibility); the workload kinds only in their old extensions/apps beta versions
/// (apps/v1 deletes in the background); events never take part. Any other kind: no orphaning
/// unless asked.
const GC_DEFAULTS: &[(&str, &str, &str, GcDefault)] = &[
    ("", "v1", "replicationcontrollers", GcDefault::Orphan),
    (
        "extensions",
        "v1beta1",
        "replicationcontrollers",
        GcDefault::Orphan,
    ),
    ("extensions", "v1beta1", "replicasets", GcDefault::Orphan),
    ("extensions", "v1beta1", "deployments", GcDefault::Orphan),
    ("extensions", "v1beta1", "daemonsets", GcDefault::Orphan),
    ("apps", "v1beta1", "deployments", GcDefault::Orphan),
    ("apps", "v1beta1", "statefulsets", GcDefault::Orphan),
    ("apps", "v1beta2", "replicasets", GcDefault::Orphan),
    ("apps", "v1beta2", "deployments", GcDefault::Orphan),
    ("apps", "v1beta2", "statefulsets", GcDefault::Orphan),
    ("apps", "v1beta2", "daemonsets", GcDefault::Orphan),
    ("", "v1", "events", GcDefault::Unsupported),
    ("events.k8s.io", "v1", "events", GcDefault::Unsupported),
    ("events.k8s.io", "v1beta1", "events", GcDefault::Unsupported),
];

fn gc_default(spec: &ResourceSpec) -> Option<GcDefault> {
    GC_DEFAULTS
        .iter()
        .find(|(g, v, r, _)| *g == spec.group && *v == spec.version && *r == spec.plural)
        .map(|(.., d)| *d)
}

/// Upstream's deletionFinalizersForGarbageCollection: the object's finalizers with `orphan` and
/// `foregroundDeletion` as the request's policy says, else as the object's own finalizers say (the
/// first of the two it lists), else as the kind's default says. None when the set is unchanged.
pub fn gc_finalizers(
    spec: &ResourceSpec,
    finalizers: &[String],
    policy: Option<Propagation>,
) -> Option<Vec<String>> {
    let default = gc_default(spec);
    if default == Some(GcDefault::Unsupported) {
        return None;
    }
    let listed = finalizers
        .iter()
        .find(|f| *f == ORPHAN || *f == FOREGROUND)
        .map(String::as_str);
    let (orphan, foreground) = match policy {
        Some(p) => (p == Propagation::Orphan, p == Propagation::Foreground),
        None => match listed {
            Some(ORPHAN) => (true, false),
            Some(_) => (false, true),
            None => (default == Some(GcDefault::Orphan), false),
        },
    };
    let mut new: Vec<String> = finalizers
        .iter()
        .filter(|f| *f != ORPHAN && *f != FOREGROUND)
        .cloned()
        .collect();
    if orphan {
        new.push(ORPHAN.to_string());
    }
    if foreground {
        new.push(FOREGROUND.to_string());
    }
    let same =
        new.iter().all(|f| finalizers.contains(f)) && finalizers.iter().all(|f| new.contains(f));
    (!same).then_some(new)
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.replace_nanosecond(0)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(now_rfc3339)
}

fn parse_time(v: &Value) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(v.as_str()?, &Rfc3339).ok()
}

/// What upstream's BeforeDelete decides for the object (when its deletion is not already pending).
#[derive(Debug, PartialEq, Eq)]
enum Grace {
    /// Delete gracefully: deletionTimestamp at `at`, deletionGracePeriodSeconds `seconds` (> 0).
    Graceful { at: OffsetDateTime, seconds: i64 },
    /// No grace period: deleted at once unless finalizers hold it.
    None,
}

/// Upstream's BeforeDelete for the kinds that delete gracefully (pods): the first delete starts a
/// grace period; a later one may only shorten it. None: the deletion is already pending with a
/// grace period no shorter than the one asked for, and nothing changes (not even the finalizers).
fn before_delete(spec: &ResourceSpec, obj: &Value, requested: Option<i64>) -> Option<Grace> {
    // Negative values are treated as 1 s on the delete path.
    let requested = requested.map(|g| if g < 0 { 1 } else { g });
    let meta = &obj["metadata"];
    let now = OffsetDateTime::now_utc();
    if let Some(since) = parse_time(&meta["deletionTimestamp"]) {
        let current = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
        if current <= 0 {
            return Some(Grace::None);
        }
        return match requested {
            Some(p) if p < current && p > 0 => Some(Grace::Graceful {
                at: since - time::Duration::seconds(current) + time::Duration::seconds(p),
                seconds: p,
            }),
            Some(p) if p < current => Some(Grace::None),
            _ => None,
        };
    }
    let seconds = spec
        .graceful_delete
        .as_ref()
        .and_then(|g| (g.default_grace)(obj))
        .map(|default| requested.unwrap_or(default));
    Some(match seconds {
        Some(n) if n > 0 => Grace::Graceful {
            at: now + time::Duration::seconds(n),
            seconds: n,
        },
        _ => Grace::None,
    })
}

fn finalizers_of(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The object as the delete leaves it when it stays (graceful deletion, finalizers, a terminating
/// namespace), or None when it goes at once. `changed` tells whether it differs from what is stored.
fn mark_deleting(
    spec: &ResourceSpec,
    obj: &mut Value,
    grace: Grace,
    policy: Option<Propagation>,
) -> Option<bool> {
    let deleting = obj["metadata"]["deletionTimestamp"].is_string();
    let mut changed = false;
    let mut finalizers = finalizers_of(obj);
    if let Some(new) = gc_finalizers(spec, &finalizers, policy) {
        finalizers = new;
        changed = true;
    }
    if let Some(f) = spec.delete_finalizer {
        if !deleting && !finalizers.iter().any(|x| x == f) {
            finalizers.push(f.to_string());
            changed = true;
        }
    }
    if changed {
        let meta = &mut obj["metadata"];
        if finalizers.is_empty() {
            if let Some(m) = meta.as_object_mut() {
                m.remove("finalizers");
            }
        } else {
            meta["finalizers"] = json!(finalizers);
        }
    }
    let bump_generation = |obj: &mut Value| {
        if let Some(g) = obj["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
            obj["metadata"]["generation"] = json!(g + 1);
        }
    };
    match grace {
        Grace::Graceful { at, seconds } => {
            if !deleting {
                bump_generation(obj);
            }
            obj["metadata"]["deletionTimestamp"] = json!(rfc3339(at));
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(seconds);
            Some(true)
        }
        Grace::None if !finalizers.is_empty() || spec.terminating => {
            // Upstream's markAsDeleting: a deletionTimestamp of now (or the earlier one it has).
            let now = OffsetDateTime::now_utc();
            let meta = &obj["metadata"];
            let keep = parse_time(&meta["deletionTimestamp"]).filter(|t| *t <= now);
            if !deleting {
                bump_generation(obj);
            }
            if keep.is_none() {
                obj["metadata"]["deletionTimestamp"] = json!(rfc3339(now));
                changed = true;
            }
            if obj["metadata"]["deletionGracePeriodSeconds"].as_i64() != Some(0) {
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                changed = true;
            }
            if spec.terminating && obj["status"]["phase"] != "Terminating" {
                obj["status"]["phase"] = json!("Terminating");
                changed = true;
            }
            Some(changed)
        }
        Grace::None => None,
    }
}

/// Deletes one object (or starts its graceful deletion) as the server's own callers do (a
/// namespace's content, an eviction's pod): dependents go in the background, as upstream's
/// namespace deleter asks. Returns the object's last state.
pub(super) async fn delete_object(
    state: &AppState,
    target: &Target,
    name: &str,
    opts: &DeleteOptions,
    query: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let background = Some(Propagation::Background);
    delete_propagating(state, target, name, opts, background, query).await
}

/// Deletes one object with the request's propagation policy (None: the object's finalizers, then
/// the kind's default, decide); returns its last state.
pub(super) async fn delete_propagating(
    state: &AppState,
    target: &Target,
    name: &str,
    opts: &DeleteOptions,
    policy: Option<Propagation>,
    query: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let spec = target.spec;
    for _ in 0..MAX_ATTEMPTS {
        let (mut obj, rev) = read(state, target, name).await?;
        crate::admission::node_restriction(
            &state.admission_context(),
            target,
            None,
            Op::Delete(&obj),
        )?;
        if let Some(uid) = &opts.uid {
            let current = obj["metadata"]["uid"].as_str().unwrap_or("");
            if uid != current {
                return Err(ApiError::conflict_with(spec.group, spec.plural, name, &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({current}). The object might have been deleted and then recreated")));
            }
        }
        if let Some(want) = &opts.resource_version {
            if *want != rev.to_string() {
                return Err(ApiError::conflict_with(spec.group, spec.plural, name, &format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rev}). The object might have been modified")));
            }
        }
        crate::admission::webhook::admit_delete(&state.admission_context(), target, query, &obj)
            .await?;
        if spec.terminating && obj["metadata"]["deletionTimestamp"].is_string() {
            // A Terminating namespace: the cleanup pass (`namespaces.rs`) finishes it.
            return Ok(obj);
        }
        let Some(grace) = before_delete(spec, &obj, opts.grace) else {
            return Ok(obj);
        };
        if let Some(changed) = mark_deleting(spec, &mut obj, grace, policy) {
            if !changed || is_dry_run(query) {
                return Ok(obj);
            }
            match state
                .store
                .update(&target.key(name), to_stored(&obj), rev)
                .await
            {
                Ok(new_rev) => {
                    obj["metadata"]["resourceVersion"] = json!(new_rev.to_string());
                    if spec.terminating {
                        // The namespace controller's job, done in-process: delete the content,
                        // then the namespace itself (see `namespaces.rs`).
                        let _ = state.terminating.send(name.to_string());
                    }
                    return Ok(obj);
                }
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => {
                    return Err(ApiError::not_found(spec.group, spec.plural, name))
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        if is_dry_run(query) {
            return Ok(obj);
        }
        let (_, releases) = super::crud::reservation_diff(spec, Some(&obj), None);
        match state
            .store
            .delete_releasing(&target.key(name), rev, &releases)
            .await
        {
            Ok(_) => {
                tracing::debug!(resource = spec.plural, name, "deleted");
                return Ok(obj);
            }
            Err(StoreError::Conflict) => continue,
            Err(StoreError::NotFound) => {
                return Err(ApiError::not_found(spec.group, spec.plural, name))
            }
            Err(e) => return Err(store_error(e)),
        }
    }
    Err(ApiError::conflict(spec.group, spec.plural, name))
}

pub async fn delete(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let name = required_name(target)?;
    let (opts, policy) = delete_options(query, &delete_body(headers, body)?)?;
    let obj = delete_propagating(state, target, name, &opts, policy, query).await?;
    Ok(json_response(StatusCode::OK, &obj))
}

/// DELETE on a collection: every object matching the selectors, each as a single delete would.
pub async fn delete_collection(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let spec = target.spec;
    let (opts, policy) = delete_options(query, &delete_body(headers, body)?)?;
    let selectors = Selectors::from_query(spec, query)?;
    let (objects, _) = list_objects(state, target, &selectors).await?;
    let mut deleted = Vec::with_capacity(objects.len());
    for obj in objects {
        let item = Target {
            spec,
            namespace: obj["metadata"]["namespace"].as_str().map(str::to_string),
            name: None,
            status: false,
            requester: target.requester.clone(),
        };
        match delete_propagating(state, &item, name_of(&obj), &opts, policy, query).await {
            Ok(last) => deleted.push(last),
            Err(e) if e.code == 404 => {} // gone meanwhile
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": spec.list_kind,
            "apiVersion": spec.api_version(),
            "metadata": {},
            "items": deleted,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(group: &'static str, version: &'static str, plural: &'static str) -> ResourceSpec {
        ResourceSpec {
            group,
            version,
            plural,
            ..ResourceSpec::BASE
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn policy_comes_from_the_body_or_else_the_query() {
        let q = |k: &str, v: &str| HashMap::from([(k.to_string(), v.to_string())]);
        let none = HashMap::new();
        let from =
            |body: Value, query: &HashMap<String, String>| Propagation::from_request(&body, query);
        assert_eq!(
            from(json!({"propagationPolicy": "Foreground"}), &none).unwrap(),
            Some(Propagation::Foreground)
        );
        assert_eq!(
            from(json!({}), &q("propagationPolicy", "Orphan")).unwrap(),
            Some(Propagation::Orphan)
        );
        assert_eq!(
            from(json!({"orphanDependents": true}), &none).unwrap(),
            Some(Propagation::Orphan)
        );
        assert_eq!(
            from(json!({}), &q("orphanDependents", "false")).unwrap(),
            Some(Propagation::Background)
        );
        assert_eq!(from(json!({}), &none).unwrap(), None);
        let both = from(
            json!({"orphanDependents": true, "propagationPolicy": "Orphan"}),
            &none,
        )
        .unwrap_err();
        assert_eq!(both.code, 422);
        assert!(
            both.message.contains("cannot be both set"),
            "{}",
            both.message
        );
        let unknown = from(json!({"propagationPolicy": "Sideways"}), &none).unwrap_err();
        assert_eq!(unknown.code, 422);
        assert!(
            unknown.message.contains("Unsupported value"),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn finalizers_follow_policy_then_existing_finalizers_then_kind_default() {
        let rc = spec("", "v1", "replicationcontrollers");
        let rs = spec("apps", "v1", "replicasets");
        let events = spec("", "v1", "events");
        #[allow(clippy::type_complexity)]
        let cases: &[(&ResourceSpec, &[&str], Option<Propagation>, Option<&[&str]>)] = &[
            // Core v1 RCs orphan by default; apps/v1 kinds do not.
            (&rc, &[], None, Some(&[ORPHAN])),
            (&rs, &[], None, None),
            (&rc, &[], Some(Propagation::Background), None),
            (&rs, &[], Some(Propagation::Orphan), Some(&[ORPHAN])),
            (
                &rs,
                &["x"],
                Some(Propagation::Foreground),
                Some(&["x", FOREGROUND]),
            ),
            // A second delete with another policy swaps or drops the finalizer.
            (
                &rs,
                &[ORPHAN, "x"],
                Some(Propagation::Foreground),
                Some(&["x", FOREGROUND]),
            ),
            (&rc, &[FOREGROUND], Some(Propagation::Background), Some(&[])),
            // Without a policy the object's finalizer stands, over the kind's default.
            (&rc, &[FOREGROUND], None, None),
            (&rs, &[ORPHAN], None, None),
            // Events never get them.
            (&events, &[], Some(Propagation::Orphan), None),
        ];
        for (spec, have, policy, want) in cases {
            let got = gc_finalizers(spec, &strings(have), *policy);
            assert_eq!(
                got,
                want.map(strings),
                "{} {have:?} {policy:?}",
                spec.plural
            );
        }
    }

    #[test]
    fn a_foreground_delete_keeps_the_object_and_a_background_one_removes_it() {
        let rc = spec("", "v1", "replicationcontrollers");
        let mut obj = json!({"metadata": {"name": "x", "generation": 1}});
        let changed = mark_deleting(&rc, &mut obj, Grace::None, Some(Propagation::Foreground));
        assert_eq!(changed, Some(true));
        assert_eq!(obj["metadata"]["finalizers"], json!([FOREGROUND]));
        assert!(obj["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(obj["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(obj["metadata"]["generation"], 2);
        // The same policy again changes nothing; Orphan swaps the finalizer; Background lets it go.
        let mut again = obj.clone();
        assert_eq!(
            mark_deleting(&rc, &mut again, Grace::None, Some(Propagation::Foreground)),
            Some(false)
        );
        assert_eq!(
            mark_deleting(&rc, &mut again, Grace::None, Some(Propagation::Orphan)),
            Some(true)
        );
        assert_eq!(again["metadata"]["finalizers"], json!([ORPHAN]));
        assert_eq!(
            again["metadata"]["deletionTimestamp"],
            obj["metadata"]["deletionTimestamp"]
        );
        assert_eq!(
            mark_deleting(&rc, &mut again, Grace::None, Some(Propagation::Background)),
            None
        );
    }

    #[test]
    fn a_pending_graceful_deletion_only_shortens() {
        let pod = spec("", "v1", "pods");
        let since = OffsetDateTime::now_utc() + time::Duration::seconds(30);
        let obj = json!({"metadata": {
            "deletionTimestamp": rfc3339(since),
            "deletionGracePeriodSeconds": 30,
        }});
        assert_eq!(before_delete(&pod, &obj, None), None);
        assert_eq!(before_delete(&pod, &obj, Some(30)), None);
        assert_eq!(before_delete(&pod, &obj, Some(0)), Some(Grace::None));
        match before_delete(&pod, &obj, Some(10)) {
            Some(Grace::Graceful { at, seconds: 10 }) => {
                let shift = (since.replace_nanosecond(0).unwrap() - at).whole_seconds();
                assert!((19..=20).contains(&shift), "{shift}");
            }
            other => panic!("{other:?}"),
        }
    }
}
