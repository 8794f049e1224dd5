//! The disruption controller's controller finders (upstream's finders()): the scale a pod's
//! controllerRef stands for — a ReplicationController, the Deployment of a ReplicaSet it manages,
//! a ReplicaSet, a StatefulSet, or any kind with a scale subresource. Kinds this cluster does not
//! serve (StatefulSets before kiln has them) read as not found, and the next finder is asked.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::ReplicationController;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;

use crate::disruption_plan::ControllerScale;
use crate::pods::controller_ref;

/// One pod's controllerRef, as the plan lists it.
pub struct Reference<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// Upstream's verifyGroupKind.
fn is(r: &Reference, kind: &str, groups: &[&str]) -> bool {
    r.kind == kind && groups.contains(&group_of(r.api_version))
}

fn owner_is(o: &OwnerReference, kind: &str, groups: &[&str]) -> bool {
    o.kind == kind && groups.contains(&group_of(&o.api_version))
}

async fn get<K>(client: &kube::Client, ns: &str, name: &str) -> Result<Option<K>, String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    // A kind the server does not serve answers 404 like a missing object: both mean "not this one".
    Api::<K>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())
}

fn uid_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

const RS_GROUPS: &[&str] = &["apps", "extensions"];

/// The controller `r` names and its scale; None when no finder knows it.
pub async fn find(
    client: &kube::Client,
    ns: &str,
    r: &Reference<'_>,
) -> Result<Option<ControllerScale>, String> {
    let found = |uid: &str, replicas: Option<i32>| ControllerScale {
        uid: uid.to_string(),
        replicas: replicas.unwrap_or(1),
    };
    if is(r, "ReplicationController", &[""]) {
        if let Some(rc) = get::<ReplicationController>(client, ns, r.name).await? {
            if uid_of(&rc.metadata) == r.uid {
                return Ok(Some(found(r.uid, rc.spec.and_then(|s| s.replicas))));
            }
        }
    }
    if is(r, "ReplicaSet", RS_GROUPS) {
        if let Some(rs) = get::<ReplicaSet>(client, ns, r.name).await? {
            if uid_of(&rs.metadata) == r.uid {
                match controller_ref(&rs.metadata) {
                    // A Deployment's ReplicaSet counts as its Deployment.
                    Some(d) if owner_is(d, "Deployment", RS_GROUPS) => {
                        if let Some(dep) = get::<Deployment>(client, ns, &d.name).await? {
                            if uid_of(&dep.metadata) == d.uid {
                                return Ok(Some(found(&d.uid, dep.spec.and_then(|s| s.replicas))));
                            }
                        }
                    }
                    Some(d) if d.kind == "Deployment" => {}
                    _ => {
                        return Ok(Some(found(r.uid, rs.spec.and_then(|s| s.replicas))));
                    }
                }
            }
        }
    }
    if is(r, "StatefulSet", &["apps"]) {
        if let Some(ss) = get::<StatefulSet>(client, ns, r.name).await? {
            if uid_of(&ss.metadata) == r.uid {
                return Ok(Some(found(r.uid, ss.spec.and_then(|s| s.replicas))));
            }
        }
    }
    scale(client, ns, r).await
}

/// Upstream's getScaleController: any kind with a scale subresource.
async fn scale(
    client: &kube::Client,
    ns: &str,
    r: &Reference<'_>,
) -> Result<Option<ControllerScale>, String> {
    let (group, version) = r.api_version.split_once('/').unwrap_or(("", r.api_version));
    let gvk = GroupVersionKind::gvk(group, version, r.kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| {
            tracing::debug!(error = %e, kind = r.kind, "discovery");
            format!(
                "no matches for kind {:?} in version {:?}",
                r.kind, r.api_version
            )
        })?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    match api.get_scale(r.name).await {
        Ok(s) if s.metadata.uid.as_deref() == Some(r.uid) => Ok(Some(ControllerScale {
            uid: r.uid.to_string(),
            replicas: s.spec.and_then(|s| s.replicas).unwrap_or(0),
        })),
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            // Gone, or a kind without a scale subresource: only the second is an error.
            if caps
                .subresources
                .iter()
                .any(|(sub, _)| sub.plural == "scale")
            {
                Ok(None)
            } else {
                let gr = if group.is_empty() {
                    resource.plural.clone()
                } else {
                    format!("{}.{group}", resource.plural)
                };
                Err(format!("{gr} does not implement the scale subresource"))
            }
        }
        Err(e) => Err(e.to_string()),
    }
}
