//! Watch: an etcd watch from resourceVersion+1, streamed as newline-delimited JSON watch events
//! (ADDED / MODIFIED / DELETED, BOOKMARK when allowed, ERROR 410 Expired when compacted away).

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::list::{list_objects, Selectors};
use super::table::{self, Include};
use crate::registry::lifecycle::from_stored;
use crate::registry::ResourceSpec;
use crate::request::Target;
use crate::state::Shared;
use crate::status::ApiError;
use crate::storage::StoreEvent;
use crate::storage_status::store_error;

/// How a watch renders objects; fixed per request.
struct Render {
    spec: &'static ResourceSpec,
    table: bool,
    include: Include,
}

impl Render {
    fn event(&self, kind: &str, obj: Value) -> Bytes {
        let object = if self.table && kind != "ERROR" && kind != "BOOKMARK" {
            table::table(self.spec, std::slice::from_ref(&obj), None, self.include)
        } else {
            obj
        };
        let mut line =
            serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }

    fn bookmark(&self, revision: i64) -> Bytes {
        self.event(
            "BOOKMARK",
            json!({
                "kind": self.spec.kind,
                "apiVersion": self.spec.api_version(),
                "metadata": {"resourceVersion": revision.to_string()},
            }),
        )
    }

    /// The bookmark that ends a watch-list's initial events: streaming lists (client-go's and
    /// kube-rs' `streaming_lists`) wait for this annotation before they call the list done.
    fn initial_events_end(&self, revision: i64) -> Bytes {
        self.event(
            "BOOKMARK",
            json!({
                "kind": self.spec.kind,
                "apiVersion": self.spec.api_version(),
                "metadata": {
                    "resourceVersion": revision.to_string(),
                    "annotations": {INITIAL_EVENTS_END: "true"},
                },
            }),
        )
    }
}

const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

fn parse_rv(query: &HashMap<String, String>) -> Result<Option<i64>, ApiError> {
    match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => Ok(None),
        Some(rv) => rv
            .parse::<i64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}"))),
    }
}

pub async fn watch(
    state: Shared,
    target: Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let spec = target.spec;
    let watch_list = super::list_options::validate(query, true)?;
    let mut selectors = Selectors::from_query(spec, query)?;
    if let Some(name) = &target.name {
        // The deprecated GET .../pods/<name>?watch=true form watches one object.
        let by_name = format!("metadata.name={name}");
        selectors.fields = crate::selectors::FieldSelector::parse(&by_name, spec)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let render = Render {
        spec,
        table: table::wants_table(headers),
        include: Include::from_query(query),
    };
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| crate::request::flag(v));
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map(Duration::from_secs);

    // Initial state: from resourceVersion "0"/unset (legacy) or with sendInitialEvents=true (watch
    // list), the current objects arrive as ADDED first; a watch list then gets the end bookmark.
    // sendInitialEvents=false starts at the given version, or now.
    let mut initial = Vec::new();
    let rv = parse_rv(query)?;
    let (start, end_bookmark) = match (watch_list.send_initial_events, rv) {
        (Some(true), _) | (None, None) => {
            let (objects, revision) = list_objects(&state, &target, &selectors).await?;
            initial = objects;
            let end =
                (watch_list.send_initial_events == Some(true) && bookmarks).then_some(revision);
            (revision.max(rv.unwrap_or(0)) + 1, end)
        }
        (_, Some(rv)) => (rv + 1, None),
        (Some(false), None) => (state.store.revision().await.map_err(store_error)? + 1, None),
    };
    let prefix = spec.key_prefix(target.namespace.as_deref());
    let mut store_watch = state
        .store
        .watch(&prefix, start)
        .await
        .map_err(store_error)?;

    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let interval = state.bookmark_interval;
    let store = state.store.clone();
    tokio::spawn(async move {
        for obj in initial {
            if tx.send(Ok(render.event("ADDED", obj))).await.is_err() {
                return;
            }
        }
        if let Some(revision) = end_bookmark {
            if tx
                .send(Ok(render.initial_events_end(revision)))
                .await
                .is_err()
            {
                return;
            }
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut last_revision = start - 1;
        let mut ticker = tokio::time::interval(interval);
        ticker.tick().await; // the first tick is immediate
        loop {
            let expired = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tx.closed() => return,
                _ = expired => return,
                _ = ticker.tick(), if bookmarks => {
                    if tx.send(Ok(render.bookmark(last_revision))).await.is_err() {
                        return;
                    }
                }
                batch = store_watch.next() => {
                    let events = match batch {
                        Ok(Some(events)) => events,
                        Ok(None) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "store watch failed");
                            let status = ApiError::internal(format!("watch stream failed: {e}")).to_status();
                            let _ = tx.send(Ok(render.event("ERROR", status))).await;
                            return;
                        }
                    };
                    for event in events {
                        let Some((kind, obj, revision)) = translate(spec, &event, &selectors, start) else {
                            continue;
                        };
                        let obj = if kind == "ERROR" {
                            obj
                        } else {
                            match crate::crd::convert::served(&store, spec, vec![obj]).await {
                                Ok(mut v) => v.pop().unwrap_or_default(),
                                Err(e) => {
                                    let _ = tx.send(Ok(render.event("ERROR", e.to_status()))).await;
                                    return;
                                }
                            }
                        };
                        last_revision = last_revision.max(revision);
                        if tx.send(Ok(render.event(kind, obj))).await.is_err() || kind == "ERROR" {
                            return;
                        }
                    }
                }
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

fn decode(spec: &ResourceSpec, bytes: &[u8], revision: i64) -> Option<Value> {
    let mut obj = from_stored(bytes, revision).ok()?;
    crate::crd::convert::to_served(spec, &mut obj);
    Some(obj)
}

/// One store event → (type, object, revision) after selector filtering. An object that stops
/// matching is reported DELETED and one that starts matching ADDED, as upstream's watch cache does.
fn translate(
    spec: &ResourceSpec,
    event: &StoreEvent,
    selectors: &Selectors,
    start: i64,
) -> Option<(&'static str, Value, i64)> {
    match event {
        StoreEvent::Put { current, prev } => {
            let obj = decode(spec, &current.value, current.mod_revision)?;
            let prev_obj = prev
                .as_ref()
                .and_then(|p| decode(spec, p, current.mod_revision));
            let now = selectors.matches(&obj);
            let before = prev_obj.as_ref().is_some_and(|p| selectors.matches(p));
            match (before, now) {
                (false, true) => Some(("ADDED", obj, current.mod_revision)),
                (true, true) => Some(("MODIFIED", obj, current.mod_revision)),
                (true, false) => Some(("DELETED", obj, current.mod_revision)),
                (false, false) => None,
            }
        }
        StoreEvent::Delete { revision, prev, .. } => {
            let obj = decode(spec, prev.as_ref()?, *revision)?;
            selectors
                .matches(&obj)
                .then_some(("DELETED", obj, *revision))
        }
        StoreEvent::Compacted { compact_revision } => Some((
            "ERROR",
            ApiError::expired(format!(
                "too old resource version: {} ({})",
                start - 1,
                compact_revision
            ))
            .to_status(),
            0,
        )),
    }
}
