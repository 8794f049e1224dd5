//! `pods/<name>/ephemeralcontainers` (get, update, patch): the pod, of which a write changes only
//! `spec.ephemeralContainers` — everything else is kept as stored, as upstream's
//! ephemeralContainersStrategy drops it — and only by additions
//! ([`crate::registry::ephemeral_containers`]). `kubectl debug` patches it (strategic merge, by
//! container name); the kubelet starts what was added.

use std::collections::HashMap;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::pod_part::serve_pod_part;
use crate::registry::defaults::pod_spec_defaults;
use crate::registry::resources::PODS_EPHEMERAL_CONTAINERS;
use crate::request::Target;
use crate::state::AppState;
use crate::status::ApiError;

/// The stored pod with `incoming`'s ephemeral containers (and its resourceVersion as the
/// precondition); the write validates the pod, then that they only add to the stored ones
/// ([`PODS_EPHEMERAL_CONTAINERS`]'s update rule), as upstream's ValidatePodEphemeralContainersUpdate.
fn with_ephemeral_containers(old: &Value, incoming: &Value) -> Value {
    let mut new = old.clone();
    new["spec"]["ephemeralContainers"] = incoming["spec"]["ephemeralContainers"].clone();
    if new["spec"]["ephemeralContainers"].is_null() {
        if let Some(s) = new["spec"].as_object_mut() {
            s.remove("ephemeralContainers");
        }
    }
    // Compared defaulted, as the stored ones are.
    pod_spec_defaults(&mut new["spec"]);
    super::crud::precondition_from(&mut new, incoming);
    new
}

pub async fn serve(
    state: &AppState,
    target: &Target,
    verb: &str,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    serve_pod_part(
        state,
        target,
        &PODS_EPHEMERAL_CONTAINERS,
        verb,
        headers,
        query,
        body,
        with_ephemeral_containers,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_ephemeral_containers_change() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "1"}, "resourceVersion": "5"},
                         "spec": {"containers": [{"name": "c", "image": "i"}]},
                         "status": {"phase": "Running"}});
        let incoming = json!({"metadata": {"name": "p", "labels": {"a": "2"}},
                              "spec": {"containers": [{"name": "c", "image": "other"}],
                                       "ephemeralContainers": [{"name": "d", "image": "busybox:1"}]}});
        let new = with_ephemeral_containers(&old, &incoming);
        assert_eq!(new["metadata"]["labels"]["a"], "1");
        assert_eq!(new["spec"]["containers"][0]["image"], "i");
        assert_eq!(new["spec"]["ephemeralContainers"][0]["name"], "d");
        // Defaulted like any container.
        assert_eq!(
            new["spec"]["ephemeralContainers"][0]["terminationMessagePolicy"],
            "File"
        );
        assert!(new["metadata"].get("resourceVersion").is_none());
        // Taking one away is what the update rule of the write refuses.
        let removed = with_ephemeral_containers(&new, &old);
        let causes = (PODS_EPHEMERAL_CONTAINERS.validate_update)(&new, &removed);
        assert_eq!(causes.len(), 1);
        assert!(causes[0].message.contains("may not be removed"));
    }
}
