//! The downward API as files (downwardapi_volume.go, and projected_downwardapi.go through
//! [`Via::Projected`]) and the two sig-node entries reading container resources as env vars
//! (node/downwardapi.go). The volume entries are data ([`File`], [`Update`]) walked by two functions.
//! Each case restates the entry's MUSTs in its doc comment.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};

use super::configmap_volumes::{content_line, loop_args, mode_line, mounttest, wait_log};
use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::must;

/// `with!(codename, namespace, function, args…)`: a case whose body is `function(ctx, args…)`, for
/// entries that differ only in data.
macro_rules! with {
    ($codename:expr, $ns:expr, $f:path, $($arg:expr),+) => {
        $crate::cases::Case {
            codename: $codename,
            namespace: $ns,
            run: |ctx| Box::pin($f(ctx, $($arg),+)),
        }
    };
}
pub(super) use with;

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Downward API should provide container's limits.cpu/memory and requests.cpu/memory as env vars [NodeConformance] [Conformance]",
        "downward-api",
        env_resources
    ),
    case!(
        "[sig-node] Downward API should provide default limits.cpu/memory from node allocatable [NodeConformance] [Conformance]",
        "downward-api",
        env_default_limits
    ),
    with!(
        "[sig-storage] Downward API volume should provide podname only [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &PODNAME
    ),
    with!(
        "[sig-storage] Downward API volume should set DefaultMode on files [LinuxOnly] [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &DEFAULT_MODE
    ),
    with!(
        "[sig-storage] Downward API volume should set mode on item file [LinuxOnly] [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &ITEM_MODE
    ),
    with!(
        "[sig-storage] Downward API volume should update labels on modification [NodeConformance] [Conformance]",
        "downward-api",
        update,
        Via::DownwardApi,
        &LABELS
    ),
    with!(
        "[sig-storage] Downward API volume should update annotations on modification [NodeConformance] [Conformance]",
        "downward-api",
        update,
        Via::DownwardApi,
        &ANNOTATIONS
    ),
    with!(
        "[sig-storage] Downward API volume should provide container's cpu limit [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &CPU_LIMIT
    ),
    with!(
        "[sig-storage] Downward API volume should provide container's memory limit [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &MEMORY_LIMIT
    ),
    with!(
        "[sig-storage] Downward API volume should provide container's cpu request [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &CPU_REQUEST
    ),
    with!(
        "[sig-storage] Downward API volume should provide container's memory request [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &MEMORY_REQUEST
    ),
    with!(
        "[sig-storage] Downward API volume should provide node allocatable (cpu) as default cpu limit if the limit is not set [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &DEFAULT_CPU_LIMIT
    ),
    with!(
        "[sig-storage] Downward API volume should provide node allocatable (memory) as default memory limit if the limit is not set [NodeConformance] [Conformance]",
        "downward-api",
        read_file,
        Via::DownwardApi,
        &DEFAULT_MEMORY_LIMIT
    ),
];

/// The container the volume's resourceFieldRefs name (upstream's `client-container`).
const CLIENT: &str = "client-container";
/// Where the `podinfo` volume is mounted.
const PODINFO: &str = "/etc/podinfo";

/// How the downwardAPI items reach the pod: a downwardAPI volume, or the downwardAPI source of a
/// projected volume (where defaultMode belongs to the projected volume).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    DownwardApi,
    Projected,
}

impl Via {
    /// The `podinfo` volume holding `items`.
    fn volume(self, items: Value, default_mode: Option<i32>) -> Value {
        let source = match self {
            Via::DownwardApi => json!({"downwardAPI": {"items": items}}),
            Via::Projected => {
                json!({"projected": {"sources": [{"downwardAPI": {"items": items}}]}})
            }
        };
        let mut volume = json!({"name": "podinfo"});
        if let (Some(v), Value::Object(s)) = (volume.as_object_mut(), source) {
            v.extend(s);
        }
        if let Some(m) = default_mode {
            let key = match self {
                Via::DownwardApi => "downwardAPI",
                Via::Projected => "projected",
            };
            volume[key]["defaultMode"] = json!(m);
        }
        volume
    }
}

/// Upstream's downwardAPIVolumeBasePod items: the pod's name and the client container's cpu and
/// memory limits and requests; `mode` on the first.
fn base_items(mode: Option<i32>) -> Vec<Value> {
    let resource = |path: &str, r: &str| json!({"path": path, "resourceFieldRef": {"containerName": CLIENT, "resource": r}});
    let mut podname =
        json!({"path": "podname", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}});
    if let Some(m) = mode {
        podname["mode"] = json!(m);
    }
    vec![
        podname,
        resource("cpu_limit", "limits.cpu"),
        resource("cpu_request", "requests.cpu"),
        resource("memory_limit", "limits.memory"),
        resource("memory_request", "requests.memory"),
    ]
}

/// [`mounttest`] with agnhost's entrypoint as the container's command: upstream's image has
/// `ENTRYPOINT ["/agnhost"]`, the lab's kiln/agnhost:1 only a Cmd, which `args` would replace.
pub(super) fn agnhost_mounttest(ctx: &Ctx, name: &str, args: &[String], mounts: Value) -> Value {
    let mut container = mounttest(ctx, name, args, mounts);
    container["command"] = json!(["/agnhost"]);
    container
}

/// A pod whose client container runs mounttest with `args` on the `podinfo` volume.
fn podinfo_pod(
    ctx: &Ctx,
    name: &str,
    meta: Value,
    volume: Value,
    args: &[String],
    resources: Value,
) -> CaseResult<Pod> {
    let mut container = agnhost_mounttest(
        ctx,
        CLIENT,
        args,
        json!([{"name": "podinfo", "mountPath": PODINFO}]),
    );
    container["resources"] = resources;
    let mut metadata = meta;
    metadata["name"] = json!(name);
    from_json(json!({
        "metadata": metadata,
        "spec": {"restartPolicy": "Never", "volumes": [volume], "containers": [container]},
    }))
}

/// What a [`File`] entry reads from its file.
#[derive(Debug, Clone, Copy)]
pub(super) enum Want {
    /// The pod's own name.
    PodName,
    /// This exact content.
    Content(&'static str),
    /// The file's mode (mounttest's `--file_mode`).
    Mode(u32),
    /// The node's allocatable cpu or memory (the container sets no limit): a positive whole number.
    Allocatable(&'static str),
}

/// One entry reading one file of the `podinfo` volume.
#[derive(Debug, Clone, Copy)]
pub(super) struct File {
    /// The file under /etc/podinfo.
    pub file: &'static str,
    /// The client container has upstream's resources (requests 250m/32Mi, limits 1250m/128Mi).
    pub resources: bool,
    pub item_mode: Option<i32>,
    pub default_mode: Option<i32>,
    pub want: Want,
}

pub(super) const PODNAME: File = File {
    file: "podname",
    resources: false,
    item_mode: None,
    default_mode: None,
    want: Want::PodName,
};
pub(super) const DEFAULT_MODE: File = File {
    default_mode: Some(0o400),
    want: Want::Mode(0o400),
    ..PODNAME
};
pub(super) const ITEM_MODE: File = File {
    item_mode: Some(0o400),
    want: Want::Mode(0o400),
    ..PODNAME
};
/// 1250m rounded up to whole cores.
pub(super) const CPU_LIMIT: File = File {
    file: "cpu_limit",
    resources: true,
    want: Want::Content("2"),
    ..PODNAME
};
/// 128Mi in bytes.
pub(super) const MEMORY_LIMIT: File = File {
    file: "memory_limit",
    resources: true,
    want: Want::Content("134217728"),
    ..PODNAME
};
/// 250m rounded up to whole cores.
pub(super) const CPU_REQUEST: File = File {
    file: "cpu_request",
    resources: true,
    want: Want::Content("1"),
    ..PODNAME
};
/// 32Mi in bytes.
pub(super) const MEMORY_REQUEST: File = File {
    file: "memory_request",
    resources: true,
    want: Want::Content("33554432"),
    ..PODNAME
};
pub(super) const DEFAULT_CPU_LIMIT: File = File {
    file: "cpu_limit",
    want: Want::Allocatable("cpu"),
    ..PODNAME
};
pub(super) const DEFAULT_MEMORY_LIMIT: File = File {
    file: "memory_limit",
    want: Want::Allocatable("memory"),
    ..PODNAME
};

/// DownwardAPI volume (and Projected Volume, DownwardAPI), one file: a pod with the `podinfo` volume
/// (its name, its client container's cpu and memory limits and requests) runs mounttest on one file:
/// - pod name: the file MUST hold the pod's name;
/// - volume mode 0400 / file mode 0400: with defaultMode (item mode) 0400 the file's mode MUST be
///   -r--------;
/// - CPU / memory limits and requests: the file MUST hold the container's limit or request (cpu in
///   whole cores, rounded up; memory in bytes): 2, 134217728, 1, 33554432;
/// - default node allocatable: with no limits set, the cpu / memory limit file MUST hold the node's
///   allocatable cpu / memory (upstream only asks for a leading digit 1-9; here it MUST equal the
///   allocatable of the node the pod ran on).
pub(super) async fn read_file(ctx: &Ctx, via: Via, f: &File) -> CaseResult {
    let name = "downwardapi-volume";
    let path = format!("{PODINFO}/{}", f.file);
    let check = match f.want {
        Want::Mode(_) => "--file_mode",
        _ => "--file_content",
    };
    let resources = if f.resources {
        json!({"requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"cpu": "1250m", "memory": "128Mi"}})
    } else {
        json!({})
    };
    let volume = via.volume(json!(base_items(f.item_mode)), f.default_mode);
    let pod = podinfo_pod(
        ctx,
        name,
        json!({}),
        volume,
        &[format!("{check}={path}")],
        resources,
    )?;
    let content = |v: &str| format!("{}\n", content_line(&path, v));
    let want = match f.want {
        Want::PodName => content(name),
        Want::Content(v) => content(v),
        Want::Mode(m) => mode_line(&path, Some(m)),
        Want::Allocatable(_) => content_line(&path, ""),
    };
    let log = ctx.expect_output(&pod, CLIENT, &[&want]).await?;
    if let Want::Allocatable(resource) = f.want {
        let value = allocatable(ctx, name, resource).await?;
        let line = content(&value);
        must!(
            log.contains(&line),
            "{path} does not hold the node's allocatable {resource} ({value}); the log is:\n{log}"
        );
    }
    Ok(())
}

/// One entry changing the pod's labels or annotations under a running pod.
#[derive(Debug, Clone, Copy)]
pub(super) struct Update {
    /// `labels` or `annotations`: the metadata field, and the file it is written to.
    pub field: &'static str,
    pub pod: &'static str,
    pub initial: &'static [(&'static str, &'static str)],
    /// The key and value set on the running pod.
    pub change: (&'static str, &'static str),
}

pub(super) const LABELS: Update = Update {
    field: "labels",
    pod: "labelsupdate",
    initial: &[("key1", "value1"), ("key2", "value2")],
    change: ("key3", "value3"),
};
pub(super) const ANNOTATIONS: Update = Update {
    field: "annotations",
    pod: "annotationupdate",
    initial: &[("builder", "bar")],
    change: ("builder", "foo"),
};

/// DownwardAPI volume (and Projected Volume, DownwardAPI), update labels / annotations: a running
/// pod reading its labels (annotations) file in a loop MUST see `key1="value1"` (`builder="bar"`);
/// after key3=value3 is added (builder changed to foo) on the running pod the file MUST show
/// `key3="value3"` (`builder="foo"`).
pub(super) async fn update(ctx: &Ctx, via: Via, u: &Update) -> CaseResult {
    let path = format!("{PODINFO}/{}", u.field);
    let mut items = base_items(None);
    items.push(json!({"path": u.field, "fieldRef": {"apiVersion": "v1", "fieldPath": format!("metadata.{}", u.field)}}));
    let map = |kv: &[(&str, &str)]| -> serde_json::Map<String, Value> {
        kv.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()
    };
    let pod = podinfo_pod(
        ctx,
        u.pod,
        json!({ u.field: map(u.initial) }),
        via.volume(json!(items), None),
        &loop_args(&path),
        json!({}),
    )?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running(u.pod).await?;
    let quoted = |(k, v): (&str, &str)| format!("{k}=\"{v}\"\n");
    wait_log(ctx, u.pod, CLIENT, &quoted(u.initial[0])).await?;
    let patch = json!({"metadata": { u.field: map(&[u.change]) }});
    ctx.api::<Pod>()
        .patch(u.pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_log(ctx, u.pod, CLIENT, &quoted(u.change)).await
}

/// A busybox pod printing its environment: container `dapi-container` with these env vars and
/// resources.
fn env_pod(ctx: &Ctx, name: &str, env: &[(&str, &str)], resources: Value) -> CaseResult<Pod> {
    let env: Vec<Value> = env
        .iter()
        .map(|(n, r)| json!({"name": n, "valueFrom": {"resourceFieldRef": {"resource": r}}}))
        .collect();
    from_json(json!({
        "metadata": {"name": name, "labels": {"name": name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "dapi-container",
                "image": ctx.images().busybox(),
                "command": ["sh", "-c", "env"],
                "env": env,
                "resources": resources,
            }],
        },
    }))
}

/// DownwardAPI, environment for CPU and memory limits and requests: with requests 250m/32Mi and
/// limits 1250m/64Mi, CPU_LIMIT MUST be 2, MEMORY_LIMIT 67108864, CPU_REQUEST 1 and MEMORY_REQUEST
/// 33554432.
async fn env_resources(ctx: &Ctx) -> CaseResult {
    let pod = env_pod(
        ctx,
        "downward-api-resources",
        &[
            ("CPU_LIMIT", "limits.cpu"),
            ("MEMORY_LIMIT", "limits.memory"),
            ("CPU_REQUEST", "requests.cpu"),
            ("MEMORY_REQUEST", "requests.memory"),
        ],
        json!({"requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"cpu": "1250m", "memory": "64Mi"}}),
    )?;
    let want = [
        "CPU_LIMIT=2\n",
        "MEMORY_LIMIT=67108864\n",
        "CPU_REQUEST=1\n",
        "MEMORY_REQUEST=33554432\n",
    ];
    ctx.expect_output(&pod, "dapi-container", &want).await?;
    Ok(())
}

/// DownwardAPI, environment for default CPU and memory limits: a container without limits MUST see
/// CPU_LIMIT and MEMORY_LIMIT as the node's allocatable cpu (whole cores, rounded up) and memory
/// (bytes) — upstream asks for a leading digit 1-9; here they MUST equal the allocatable of the node
/// the pod ran on.
async fn env_default_limits(ctx: &Ctx) -> CaseResult {
    let name = "downward-api-default-limits";
    let pod = env_pod(
        ctx,
        name,
        &[
            ("CPU_LIMIT", "limits.cpu"),
            ("MEMORY_LIMIT", "limits.memory"),
        ],
        json!({}),
    )?;
    let log = ctx
        .expect_output(&pod, "dapi-container", &["CPU_LIMIT=", "MEMORY_LIMIT="])
        .await?;
    for (var, resource) in [("CPU_LIMIT", "cpu"), ("MEMORY_LIMIT", "memory")] {
        let value = allocatable(ctx, name, resource).await?;
        must!(
            log.contains(&format!("{var}={value}\n")),
            "{var} is not the node's allocatable {resource} ({value}); the log is:\n{log}"
        );
    }
    Ok(())
}

/// The allocatable `resource` (cpu, memory) of the node pod `pod` ran on, as the downward API gives
/// it with the default divisor: the quantity rounded up to a whole number. It MUST be positive.
async fn allocatable(ctx: &Ctx, pod: &str, resource: &str) -> CaseResult<String> {
    let pod = ctx.api::<Pod>().get(pod).await?;
    let node_name = pod
        .spec
        .and_then(|s| s.node_name)
        .ok_or_else(|| CaseError::Failed("the pod has no spec.nodeName".into()))?;
    let node = ctx.all::<Node>().get(&node_name).await?;
    let q = node
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get(resource).cloned())
        .ok_or_else(|| {
            CaseError::Failed(format!(
                "node {node_name} reports no allocatable {resource}"
            ))
        })?;
    let value = quantity_ceil(&q.0).ok_or_else(|| {
        CaseError::Failed(format!(
            "node {node_name}'s allocatable {resource} {:?} is not a quantity",
            q.0
        ))
    })?;
    must!(
        value > 0,
        "node {node_name}'s allocatable {resource} is {:?}, not positive",
        q.0
    );
    Ok(value.to_string())
}

/// A quantity (`4`, `3500m`, `1.5Gi`, `16318412Ki`, `8G`) rounded up to a whole number.
fn quantity_ceil(q: &str) -> Option<u128> {
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let num: u128 = format!("{int}{frac}").parse().ok()?;
    let den = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let (mul, div): (u128, u128) = match suffix {
        "" => (1, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        _ => return None,
    };
    Some((num.checked_mul(mul)?).div_ceil(den * div))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_up_to_whole_numbers() {
        assert_eq!(quantity_ceil("4"), Some(4));
        assert_eq!(quantity_ceil("3500m"), Some(4));
        assert_eq!(quantity_ceil("1.5"), Some(2));
        assert_eq!(quantity_ceil("8Gi"), Some(8 << 30));
        assert_eq!(quantity_ceil("16318412Ki"), Some(16_318_412 * 1024));
        assert_eq!(quantity_ceil("8G"), Some(8_000_000_000));
        assert_eq!(quantity_ceil("x"), None);
        assert_eq!(quantity_ceil("1Zi"), None);
    }

    #[test]
    fn default_mode_sits_on_the_volume_source() {
        let items = json!([]);
        assert_eq!(
            Via::DownwardApi.volume(items.clone(), Some(0o400)),
            json!({"name": "podinfo", "downwardAPI": {"items": [], "defaultMode": 256}})
        );
        assert_eq!(
            Via::Projected.volume(items, Some(0o400)),
            json!({"name": "podinfo", "projected": {"defaultMode": 256,
                "sources": [{"downwardAPI": {"items": []}}]}})
        );
    }
}
