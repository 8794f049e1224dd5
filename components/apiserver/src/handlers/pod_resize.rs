//! `pods/<name>/resize` (get, update, patch): the pod, of which a write changes only the
//! containers' `resources` and `resizePolicy` — everything else is kept as stored, as upstream's
//! podResizeStrategy drops it ([`crate::registry::pod_resize`]). `kubectl patch --subresource resize`
//! sends a strategic merge patch (containers merged by name); the kubelet actuates the change.

use std::collections::HashMap;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::pod_part::serve_pod_part;
use crate::registry::defaults::pod_spec_defaults;
use crate::registry::pod_resize::with_resize;
use crate::registry::resources::PODS_RESIZE;
use crate::request::Target;
use crate::state::AppState;
use crate::status::ApiError;

/// The stored pod with `incoming`'s container resources (and its resourceVersion as the
/// precondition); the write then validates them ([`PODS_RESIZE`]'s update rule).
fn resized(old: &Value, incoming: &Value) -> Value {
    let mut new = with_resize(old, incoming);
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
        &PODS_RESIZE,
        verb,
        headers,
        query,
        body,
        resized,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_container_resources_change() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "1"}, "resourceVersion": "5"},
                         "spec": {"containers": [{"name": "c", "image": "i",
                                   "resources": {"limits": {"memory": "32Mi"}}}]},
                         "status": {"phase": "Running"}});
        let incoming = json!({"metadata": {"name": "p", "labels": {"a": "2"}},
                              "spec": {"containers": [{"name": "c", "image": "other",
                                        "resources": {"limits": {"memory": "64Mi"}}}]}});
        let new = resized(&old, &incoming);
        assert_eq!(new["metadata"]["labels"]["a"], "1");
        assert_eq!(new["spec"]["containers"][0]["image"], "i");
        assert_eq!(
            new["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "64Mi"
        );
        assert_eq!(new["spec"]["restartPolicy"], "Always");
        assert!(new["metadata"].get("resourceVersion").is_none());
    }
}
