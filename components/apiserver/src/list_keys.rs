//! How the built-in kinds' lists merge, as one table read by both strategic merge patch
//! (`patch`) and server-side apply (`fieldmanager`). Upstream keeps this in the Go struct tags of
//! k8s.io/api: `patchStrategy` / `patchMergeKey` for strategic merge patch, and `+listType` /
//! `+listMapKey` for server-side apply. The two are not always the same (container `ports` merge
//! on `containerPort` in a patch but are keyed by `containerPort` + `protocol` in an apply; a
//! pod's `hostIPs` merge by `ip` in a patch but are atomic in an apply), so each entry records both.
//!
//! A list is named by its schema path: field names joined by `.`, with `[]` after a list whose
//! items the path goes into (`spec.template.spec.containers[].ports`). An entry's `path` matches
//! the end of a schema path at a field boundary, so `spec.containers` covers a Pod's containers
//! and every pod template's (`spec.template.spec.containers`, `spec.jobTemplate.spec.template.
//! spec.containers`); an entry starting with `.` matches from the object's root only. Lists in
//! no entry are atomic for both: a patch replaces them, an apply owns them as one field.

/// How a strategic merge patch treats a list (`patchStrategy` / `patchMergeKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchList {
    /// No `patchStrategy`: the patch's list replaces the stored one.
    Replace,
    /// `patchStrategy=merge` with a `patchMergeKey`: items merge by that field.
    MergeKey(&'static str),
    /// `patchStrategy=merge` on a list of scalars: a set union.
    MergeSet,
}

/// A key field of an associative list, with the value it defaults to when an item omits it
/// (the apiserver's defaulting, which structured merge diff sees applied).
pub type KeyField = (&'static str, Option<&'static str>);

/// How server-side apply treats a list (`+listType` / `+listMapKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyList {
    /// `+listType=atomic` (or no list type): owned and replaced as one field.
    Atomic,
    /// `+listType=map`: items are identified by these key fields.
    Map(&'static [KeyField]),
    /// `+listType=set`: scalars, each member owned by itself.
    Set,
}

/// One list of the built-in kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListKeys {
    pub path: &'static str,
    pub patch: PatchList,
    pub apply: ApplyList,
}

const NAME: &[KeyField] = &[("name", None)];
const TYPE: &[KeyField] = &[("type", None)];
const IP: &[KeyField] = &[("ip", None)];
const MOUNT_PATH: &[KeyField] = &[("mountPath", None)];
const DEVICE_PATH: &[KeyField] = &[("devicePath", None)];
const CONTAINER_PORT: &[KeyField] = &[("containerPort", None), ("protocol", Some("TCP"))];

const fn keyed(path: &'static str, patch: &'static str, apply: &'static [KeyField]) -> ListKeys {
    ListKeys {
        path,
        patch: PatchList::MergeKey(patch),
        apply: ApplyList::Map(apply),
    }
}

const fn set(path: &'static str) -> ListKeys {
    ListKeys {
        path,
        patch: PatchList::MergeSet,
        apply: ApplyList::Set,
    }
}

const fn only_apply(path: &'static str, apply: ApplyList) -> ListKeys {
    ListKeys {
        path,
        patch: PatchList::Replace,
        apply,
    }
}

const fn only_patch(path: &'static str, key: &'static str) -> ListKeys {
    ListKeys {
        path,
        patch: PatchList::MergeKey(key),
        apply: ApplyList::Atomic,
    }
}

/// k8s.io/api core/v1, apps/v1, batch/v1 and apimachinery's ObjectMeta, field by field.
pub const LIST_KEYS: &[ListKeys] = &[
    // ObjectMeta (objects and templates).
    set("metadata.finalizers"),
    keyed("metadata.ownerReferences", "uid", &[("uid", None)]),
    // PodSpec.
    keyed("spec.containers", "name", NAME),
    keyed("spec.initContainers", "name", NAME),
    keyed("spec.ephemeralContainers", "name", NAME),
    keyed("spec.volumes", "name", NAME), // patchStrategy merge,retainKeys
    keyed("spec.imagePullSecrets", "name", NAME),
    keyed("spec.hostAliases", "ip", IP),
    keyed(
        "spec.topologySpreadConstraints",
        "topologyKey",
        &[("topologyKey", None), ("whenUnsatisfiable", None)],
    ),
    keyed("spec.schedulingGates", "name", NAME),
    keyed("spec.resourceClaims", "name", NAME), // patchStrategy merge,retainKeys
    only_apply("spec.resources.claims", ApplyList::Map(NAME)),
    // Container, for each of the three container lists.
    keyed("containers[].ports", "containerPort", CONTAINER_PORT),
    keyed("containers[].env", "name", NAME),
    keyed("containers[].volumeMounts", "mountPath", MOUNT_PATH),
    keyed("containers[].volumeDevices", "devicePath", DEVICE_PATH),
    only_apply("containers[].resources.claims", ApplyList::Map(NAME)),
    keyed("initContainers[].ports", "containerPort", CONTAINER_PORT),
    keyed("initContainers[].env", "name", NAME),
    keyed("initContainers[].volumeMounts", "mountPath", MOUNT_PATH),
    keyed("initContainers[].volumeDevices", "devicePath", DEVICE_PATH),
    only_apply("initContainers[].resources.claims", ApplyList::Map(NAME)),
    keyed(
        "ephemeralContainers[].ports",
        "containerPort",
        CONTAINER_PORT,
    ),
    keyed("ephemeralContainers[].env", "name", NAME),
    keyed(
        "ephemeralContainers[].volumeMounts",
        "mountPath",
        MOUNT_PATH,
    ),
    keyed(
        "ephemeralContainers[].volumeDevices",
        "devicePath",
        DEVICE_PATH,
    ),
    only_apply(
        "ephemeralContainers[].resources.claims",
        ApplyList::Map(NAME),
    ),
    // Status conditions of Pod, Node, Namespace, PVC, Service, ReplicationController, the apps
    // kinds and Job (JobStatus.conditions is `listType=atomic` upstream; without the kind here
    // it is keyed like the others), and ComponentStatus's top-level ones.
    keyed("status.conditions", "type", TYPE),
    keyed(".conditions", "type", TYPE),
    // PodStatus.
    keyed("status.podIPs", "ip", IP),
    only_patch("status.hostIPs", "ip"),
    keyed("status.resourceClaimStatuses", "name", NAME), // merge,retainKeys
    // Node.
    set("spec.podCIDRs"),
    keyed("status.addresses", "type", TYPE),
    // ServiceSpec.
    keyed(
        "spec.ports",
        "port",
        &[("port", None), ("protocol", Some("TCP"))],
    ),
    // ServiceAccount (its imagePullSecrets are atomic, unlike a PodSpec's).
    keyed(".secrets", "name", NAME),
    // JobStatus.
    only_apply("status.uncountedTerminatedPods.succeeded", ApplyList::Set),
    only_apply("status.uncountedTerminatedPods.failed", ApplyList::Set),
];

/// The entry for a list at `path` (a schema path, see the module docs), if any.
pub fn lookup(path: &str) -> Option<&'static ListKeys> {
    let rooted = format!(".{path}");
    LIST_KEYS.iter().find(|e| {
        if e.path.starts_with('.') {
            rooted == e.path
        } else {
            rooted.len() > e.path.len()
                && rooted.ends_with(e.path)
                && rooted.as_bytes()[rooted.len() - e.path.len() - 1] == b'.'
        }
    })
}

/// How a strategic merge patch merges the list at `path`.
pub fn patch_list(path: &str) -> PatchList {
    lookup(path).map_or(PatchList::Replace, |e| e.patch)
}

/// How server-side apply tracks the list at `path`.
pub fn apply_list(path: &str) -> ApplyList {
    lookup(path).map_or(ApplyList::Atomic, |e| e.apply)
}

/// The schema path of field `field` of the object at `parent`.
pub fn field_path(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_string()
    } else {
        format!("{parent}.{field}")
    }
}

/// The schema path of the items of the list at `list`.
pub fn item_path(list: &str) -> String {
    format!("{list}[]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_match_at_field_boundaries_and_roots() {
        let containers = ApplyList::Map(NAME);
        assert_eq!(apply_list("spec.containers"), containers);
        assert_eq!(apply_list("spec.template.spec.containers"), containers);
        assert_eq!(
            patch_list("spec.jobTemplate.spec.template.spec.initContainers[].ports"),
            PatchList::MergeKey("containerPort")
        );
        // `initContainers` is not `containers`, and a NetworkPolicy rule's ports are no Service's.
        assert_eq!(
            patch_list("spec.initContainers"),
            PatchList::MergeKey("name")
        );
        assert_eq!(patch_list("spec.ingress[].ports"), PatchList::Replace);
        // Root-anchored: a ServiceAccount's secrets, not some nested `secrets`.
        assert_eq!(patch_list("secrets"), PatchList::MergeKey("name"));
        assert_eq!(patch_list("spec.secrets"), PatchList::Replace);
    }

    #[test]
    fn every_path_is_listed_once() {
        let mut paths: Vec<&str> = LIST_KEYS.iter().map(|e| e.path).collect();
        paths.sort_unstable();
        let n = paths.len();
        paths.dedup();
        assert_eq!(paths.len(), n);
    }
}
