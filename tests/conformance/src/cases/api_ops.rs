//! What the "<kind> API operations" entries share: the discovery checks each starts with (the group
//! in /apis, the version in the group's document, the resources in the version's) and upstream's
//! retry.RetryOnConflict around an update.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use kube::api::{Api, PostParams};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::error::{CaseError, CaseResult};
use crate::must;

/// What every kind here is: a typed API object kube can send and read.
pub trait Kind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug
{
}
impl<K> Kind for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug
{
}

/// Get, change, update (the main resource or /status), again on a conflict: upstream's
/// retry.RetryOnConflict(retry.DefaultRetry, ...), five tries.
pub async fn update_with_retry<K: Kind>(
    api: &Api<K>,
    name: &str,
    status: bool,
    change: impl Fn(&mut K),
) -> CaseResult<K> {
    let mut last = String::new();
    for _ in 0..5 {
        let mut obj = api.get(name).await?;
        change(&mut obj);
        let pp = PostParams::default();
        let result = if status {
            api.replace_status(name, &pp, &obj).await
        } else {
            api.replace(name, &pp, &obj).await
        };
        match result {
            Ok(o) => return Ok(o),
            Err(kube::Error::Api(s)) if s.code == 409 => last = s.message,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CaseError::Failed(format!(
        "updating {name} kept conflicting: {last}"
    )))
}

/// `group` MUST be in /apis with `version`, /apis/<group> MUST list `version`, and
/// /apis/<group>/<version> MUST list every one of `resources`.
pub async fn group_discovery(
    ctx: &Ctx,
    group: &str,
    version: &str,
    resources: &[&str],
) -> CaseResult {
    let groups = ctx.client.list_api_groups().await?;
    must!(
        groups
            .groups
            .iter()
            .any(|g| g.name == group && g.versions.iter().any(|v| v.version == version)),
        "expected {group}/{version} in /apis, got {:?}",
        groups.groups.iter().map(|g| &g.name).collect::<Vec<_>>()
    );
    let raw = ctx
        .kubectl(&["get", "--raw", &format!("/apis/{group}")])
        .await?;
    let doc: APIGroup = serde_json::from_str(&raw).map_err(|source| CaseError::Json {
        what: format!("/apis/{group}"),
        source,
    })?;
    must!(
        doc.versions.iter().any(|v| v.version == version),
        "expected {group} API version {version}, got {raw}"
    );
    let list = ctx
        .client
        .list_api_group_resources(&format!("{group}/{version}"))
        .await?;
    let names: Vec<&str> = list.resources.iter().map(|r| r.name.as_str()).collect();
    for want in resources {
        must!(names.contains(want), "expected {want}, got {names:?}");
    }
    Ok(())
}
