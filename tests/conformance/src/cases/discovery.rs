//! sig-api-machinery Discovery entries: every API group's document and preferred version, and a
//! known resource in each group/version upstream names.

use serde_json::{json, Value};

use super::crds::get_json;
use super::{case, Case};
use crate::ctx::Ctx;
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] Discovery should validate PreferredVersion for each APIGroup [Conformance]",
        "discovery",
        preferred_version
    ),
    case!(
        "[sig-api-machinery] Discovery should locate the groupVersion and a resource within each APIGroup [Conformance]",
        "discovery",
        group_version_and_resource
    ),
];

/// Discovery, PreferredVersion: /apis/ MUST list groups; for each (but `*.example.com`, which other
/// tests add and remove meanwhile) /apis/<group>/ MUST answer with versions, and its
/// preferredVersion MUST be one of them.
async fn preferred_version(ctx: &Ctx) -> CaseResult {
    let list = get_json(ctx, "/apis/").await?;
    let groups = list["groups"].as_array().cloned().unwrap_or_default();
    must!(!groups.is_empty(), "Missing APIGroups: {list}");
    for group in groups {
        let name = group["name"].as_str().unwrap_or_default();
        if name.ends_with(".example.com") {
            continue;
        }
        let path = format!("/apis/{name}/");
        let check = get_json(ctx, &path)
            .await
            .map_err(|e| CaseError::Failed(format!("Fail to access: {path}: {e}")))?;
        let versions = check["versions"].as_array().cloned().unwrap_or_default();
        must!(!versions.is_empty(), "No version found for {name}: {check}");
        let preferred = &check["preferredVersion"]["groupVersion"];
        must!(
            versions.iter().any(|v| v["groupVersion"] == *preferred),
            "{name}: PreferredVersion {preferred} is not among the versions {}",
            Value::Array(versions.clone())
        );
    }
    Ok(())
}

/// Upstream's table: base path, group, version, a resource the group/version MUST serve.
const RESOURCES: &[(&str, &str, &str, &str)] = &[
    ("/api", "", "v1", "namespaces"),
    (
        "/apis",
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
    ),
    (
        "/apis",
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
    ),
    ("/apis", "apiregistration.k8s.io", "v1", "apiservices"),
    ("/apis", "apps", "v1", "deployments"),
    ("/apis", "authentication.k8s.io", "v1", "tokenreviews"),
    (
        "/apis",
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
    ),
    ("/apis", "autoscaling", "v1", "horizontalpodautoscalers"),
    ("/apis", "autoscaling", "v2", "horizontalpodautoscalers"),
    ("/apis", "batch", "v1", "jobs"),
    (
        "/apis",
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
    ),
    ("/apis", "coordination.k8s.io", "v1", "leases"),
    ("/apis", "discovery.k8s.io", "v1", "endpointslices"),
    ("/apis", "events.k8s.io", "v1", "events"),
    ("/apis", "networking.k8s.io", "v1", "ingresses"),
    ("/apis", "node.k8s.io", "v1", "runtimeclasses"),
    ("/apis", "policy", "v1", "poddisruptionbudgets"),
    ("/apis", "scheduling.k8s.io", "v1", "priorityclasses"),
    ("/apis", "storage.k8s.io", "v1", "csinodes"),
];

/// `path.Join(base, group, version)` and the groupVersion string of schema.GroupVersion.
fn path_and_group_version(base: &str, group: &str, version: &str) -> (String, String) {
    if group.is_empty() {
        (format!("{base}/{version}"), version.to_string())
    } else {
        (
            format!("{base}/{group}/{version}"),
            format!("{group}/{version}"),
        )
    }
}

/// Discovery, groupVersion and a resource: for each row, the APIResourceList MUST be served, its
/// groupVersion MUST be the row's, and it MUST list the row's resource. Every row is checked; all
/// failures are reported together.
async fn group_version_and_resource(ctx: &Ctx) -> CaseResult {
    let mut failures = Vec::new();
    for (base, group, version, resource) in RESOURCES {
        let (path, gv) = path_and_group_version(base, group, version);
        let list = match get_json(ctx, &path).await {
            Ok(l) => l,
            Err(e) => {
                failures.push(format!("Fail to access: {path}: {e}"));
                continue;
            }
        };
        if list["groupVersion"] != json!(gv) {
            failures.push(format!(
                "{path}: groupVersion {}, want {gv}",
                list["groupVersion"]
            ));
        }
        let found = list["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|r| r["name"] == *resource));
        if !found {
            failures.push(format!("{path}: resource {resource:?} not found"));
        }
    }
    must_eq!(failures, Vec::<String>::new(), "discovery");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_group_paths_have_no_group() {
        assert_eq!(
            path_and_group_version("/api", "", "v1"),
            ("/api/v1".to_string(), "v1".to_string())
        );
        assert_eq!(
            path_and_group_version("/apis", "apps", "v1"),
            ("/apis/apps/v1".to_string(), "apps/v1".to_string())
        );
    }
}
