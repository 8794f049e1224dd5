//! sig-api-machinery AggregatedDiscovery entries: `/api` and `/apis` asked for
//! `apidiscovery.k8s.io/v2` APIGroupDiscoveryList (alone, or first of client-go's list of
//! discovery formats) MUST answer with every built-in group/version/resource upstream names, and
//! with a CRD's resource once the CRD is made.

use std::time::Duration;

use serde_json::{json, Value};

use super::crds::{create_crd, delete_crd, finish, generate_name, Crd};
use super::{case, Case};
use crate::ctx::Ctx;
use crate::error::{CaseError, CaseResult};
use crate::must;

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] AggregatedDiscovery should support raw aggregated discovery endpoint Accept headers [Conformance]",
        "aggregateddiscovery",
        raw_accept_headers
    ),
    case!(
        "[sig-api-machinery] AggregatedDiscovery should support raw aggregated discovery request for CRDs [Conformance]",
        "aggregateddiscovery",
        raw_crd
    ),
    case!(
        "[sig-api-machinery] AggregatedDiscovery should support aggregated discovery interface [Conformance]",
        "aggregateddiscovery",
        interface
    ),
    case!(
        "[sig-api-machinery] AggregatedDiscovery should support aggregated discovery interface for CRDs [Conformance]",
        "aggregateddiscovery",
        interface_crd
    ),
];

/// The raw requests' Accept header.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// client-go's discovery client (AcceptV2, then AcceptV2Beta1, then plain JSON), as its
/// GroupsAndMaybeResources sends it.
const CLIENT_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=0.9,application/json;q=0.8";
/// wait.ForeverTestTimeout.
const FOREVER: Duration = Duration::from_secs(30);

/// Upstream's expected group/version/resources (`/apis`), then the legacy one (`/api`).
const EXPECTED: &[(&str, &str, &str)] = &[
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
    ),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
    ("apiregistration.k8s.io", "v1", "apiservices"),
    ("apps", "v1", "deployments"),
    ("authentication.k8s.io", "v1", "tokenreviews"),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews"),
    ("autoscaling", "v1", "horizontalpodautoscalers"),
    ("autoscaling", "v2", "horizontalpodautoscalers"),
    ("batch", "v1", "jobs"),
    ("certificates.k8s.io", "v1", "certificatesigningrequests"),
    ("coordination.k8s.io", "v1", "leases"),
    ("discovery.k8s.io", "v1", "endpointslices"),
    ("events.k8s.io", "v1", "events"),
    ("networking.k8s.io", "v1", "ingresses"),
    ("node.k8s.io", "v1", "runtimeclasses"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("storage.k8s.io", "v1", "csinodes"),
];
const EXPECTED_LEGACY: &[(&str, &str, &str)] = &[("", "v1", "namespaces")];

/// GET `path` with `accept`: the answer's Content-Type and JSON body.
async fn get_discovery(ctx: &Ctx, path: &str, accept: &str) -> CaseResult<(String, Value)> {
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())
        .map_err(|e| CaseError::Failed(format!("building GET {path}: {e}")))?;
    let resp = ctx.client.send(req).await?;
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = resp.into_body().collect_bytes().await?;
    must!(
        status == 200,
        "Failed to get raw aggregated discovery document {path}: {status} {}",
        String::from_utf8_lossy(&bytes)
    );
    let body = serde_json::from_slice(&bytes).map_err(|e| {
        CaseError::Failed(format!(
            "Failed to parse discovery {path}: {e}: {}",
            String::from_utf8_lossy(&bytes)
        ))
    })?;
    Ok((content_type, body))
}

/// Whether the answer is an apidiscovery v2 or v2beta1 APIGroupDiscoveryList (by Content-Type,
/// as client-go decides).
fn is_aggregated(content_type: &str) -> bool {
    let params: Vec<&str> = content_type.split(';').map(str::trim).collect();
    params.contains(&"g=apidiscovery.k8s.io") && params.contains(&"as=APIGroupDiscoveryList")
}

/// isGVRPresentAPIDiscovery: the list has the group, its version, and the resource in it.
fn gvr_present(list: &Value, (group, version, resource): (&str, &str, &str)) -> bool {
    let each = |v: &Value, key: &str| v[key].as_array().cloned().unwrap_or_default();
    each(list, "items")
        .iter()
        .filter(|g| g["metadata"]["name"].as_str().unwrap_or_default() == group)
        .flat_map(|g| each(g, "versions"))
        .filter(|v| v["version"] == json!(version))
        .flat_map(|v| each(&v, "resources"))
        .any(|r| r["resource"] == json!(resource))
}

/// isGVPresent over the groups client-go derives from the list: the group lists the version.
fn gv_present(list: &Value, group: &str, version: &str) -> bool {
    list["items"].as_array().into_iter().flatten().any(|g| {
        g["metadata"]["name"].as_str().unwrap_or_default() == group
            && g["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["version"] == json!(version))
    })
}

/// Every `(group, version, resource)` the list lacks.
fn missing(list: &Value, gvrs: &[(&str, &str, &str)]) -> Vec<String> {
    gvrs.iter()
        .filter(|gvr| !gvr_present(list, **gvr))
        .map(|(g, v, r)| format!("{g}/{v} {r}"))
        .collect()
}

/// Raw Accept headers: `/apis` asked for the v2 APIGroupDiscoveryList MUST answer with one
/// listing every expected built-in resource; `/api` MUST list namespaces in v1.
async fn raw_accept_headers(ctx: &Ctx) -> CaseResult {
    for (path, gvrs) in [("/apis", EXPECTED), ("/api", EXPECTED_LEGACY)] {
        let (_, list) = get_discovery(ctx, path, AGGREGATED).await?;
        let lacking = missing(&list, gvrs);
        must!(
            lacking.is_empty(),
            "Expected gvrs {lacking:?} to exist in the aggregated discovery of {path}"
        );
    }
    Ok(())
}

/// The discovery client: `/api` and `/apis` with client-go's Accept list MUST answer with
/// aggregated discovery (client-go reads resources only from it), which MUST hold every expected
/// group/version/resource and every expected group/version among the server's groups.
async fn interface(ctx: &Ctx) -> CaseResult {
    let (legacy, apis) = client_discovery(ctx).await?;
    let mut lacking = missing(&apis, EXPECTED);
    lacking.extend(missing(&legacy, EXPECTED_LEGACY));
    for (g, v, _) in EXPECTED.iter().chain(EXPECTED_LEGACY) {
        let list = if g.is_empty() { &legacy } else { &apis };
        if !gv_present(list, g, v) {
            lacking.push(format!("group version {g}/{v}"));
        }
    }
    must!(lacking.is_empty(), "Expected {lacking:?} to be present");
    Ok(())
}

/// GroupsAndMaybeResources: `/api` and `/apis` with client-go's Accept list; each MUST be
/// answered as an APIGroupDiscoveryList.
async fn client_discovery(ctx: &Ctx) -> CaseResult<(Value, Value)> {
    let mut lists = Vec::new();
    for path in ["/api", "/apis"] {
        let (content_type, list) = get_discovery(ctx, path, CLIENT_ACCEPT).await?;
        must!(
            is_aggregated(&content_type),
            "{path} with Accept {CLIENT_ACCEPT}: want an aggregated APIGroupDiscoveryList, got Content-Type {content_type:?}"
        );
        lists.push(list);
    }
    let apis = lists.pop().unwrap_or_default();
    let legacy = lists.pop().unwrap_or_default();
    Ok((legacy, apis))
}

/// Upstream's `testcrd` CRD: namespaced, version v1 (allow-all schema), in a random group
/// `group<5>.example.com`.
fn testcrd() -> Value {
    let group = format!("{}.example.com", generate_name("group"));
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("testcrds.{group}")},
        "spec": {
            "group": group,
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": super::crds::allow_all_schema()}],
            "names": {"plural": "testcrds", "singular": "testcrd", "kind": "testcrd",
                      "listKind": "testcrdList"},
            "scope": "Namespaced",
        }
    })
}

/// Make the test CRD, wait (1 s polls, wait.ForeverTestTimeout) until `find` sees its resource,
/// then delete the CRD.
async fn crd_appears(ctx: &Ctx, via_client: bool) -> CaseResult {
    let crd = create_crd(ctx, testcrd()).await?;
    let result = wait_crd_listed(ctx, &crd, via_client).await;
    finish(result, delete_crd(ctx, &crd).await)
}

async fn wait_crd_listed(ctx: &Ctx, crd: &Crd, via_client: bool) -> CaseResult {
    let gvr = (crd.group(), "v1", "testcrds");
    let deadline = tokio::time::Instant::now() + FOREVER;
    loop {
        let list = if via_client {
            client_discovery(ctx).await?.1
        } else {
            get_discovery(ctx, "/apis", AGGREGATED).await?.1
        };
        if gvr_present(&list, gvr) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CaseError::Failed(format!(
                "timed out waiting for CustomResourceDefinition GVR {}/v1 testcrds to appear in Discovery",
                crd.group()
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Raw request for CRDs: once a CRD is made, the aggregated `/apis` MUST list its resource.
async fn raw_crd(ctx: &Ctx) -> CaseResult {
    crd_appears(ctx, false).await
}

/// Discovery client for CRDs: once a CRD is made, the client's aggregated discovery MUST list
/// its resource.
async fn interface_crd(ctx: &Ctx) -> CaseResult {
    crd_appears(ctx, true).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_content_types() {
        assert!(is_aggregated(AGGREGATED));
        assert!(is_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        ));
        assert!(!is_aggregated("application/json"));
    }

    #[test]
    fn finds_a_resource_in_a_group_version() {
        let list = json!({"items": [{"metadata": {"name": "apps"}, "versions": [
            {"version": "v1", "resources": [{"resource": "deployments"}]}]}]});
        assert!(gvr_present(&list, ("apps", "v1", "deployments")));
        assert!(!gvr_present(&list, ("apps", "v2", "deployments")));
        assert!(gv_present(&list, "apps", "v1"));
        assert_eq!(
            missing(&list, &[("batch", "v1", "jobs")]),
            vec!["batch/v1 jobs"]
        );
    }
}
