//! sig-storage ConfigMap volume entries (configmap_volume.go), and what the Secret volume and subPath
//! cases share with them: the object kinds as data ([`Kind`]), agnhost `mounttest` pods, mounttest's
//! output lines, and log polling. Each case restates the entry's MUSTs in its doc comment.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::CaseResult;

pub const CASES: &[Case] = &[
    case!(
        "[sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] [Conformance]",
        "configmap",
        plain
    ),
    case!(
        "[sig-storage] ConfigMap should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance] [Conformance]",
        "configmap",
        default_mode
    ),
    case!(
        "[sig-storage] ConfigMap should be consumable from pods in volume as non-root [NodeConformance] [Conformance]",
        "configmap",
        non_root
    ),
    case!(
        "[sig-storage] ConfigMap should be consumable from pods in volume with mappings [NodeConformance] [Conformance]",
        "configmap",
        mapped
    ),
    case!(
        "[sig-storage] ConfigMap should be consumable from pods in volume with mappings and Item mode set [LinuxOnly] [NodeConformance] [Conformance]",
        "configmap",
        mapped_item_mode
    ),
    case!(
        "[sig-storage] ConfigMap should be consumable from pods in volume with mappings as non-root [NodeConformance] [Conformance]",
        "configmap",
        mapped_non_root
    ),
    case!(
        "[sig-storage] ConfigMap updates should be reflected in volume [NodeConformance] [Conformance]",
        "configmap",
        updates
    ),
    case!(
        "[sig-storage] ConfigMap binary data should be reflected in volume [NodeConformance] [Conformance]",
        "configmap",
        binary_data
    ),
    case!(
        "[sig-storage] ConfigMap optional updates should be reflected in volume [NodeConformance] [Conformance]",
        "configmap",
        optional_updates
    ),
    case!(
        "[sig-storage] ConfigMap should be consumable in multiple volumes in the same pod [NodeConformance] [Conformance]",
        "configmap",
        multiple_volumes
    ),
];

/// How long a change of the object may take to show in a running pod's files, and how long
/// mounttest's read loop runs (upstream's GetPodSecretUpdateTimeout: 4 minutes and the kubelet's
/// object cache TTL).
pub(super) const UPDATE_TIMEOUT: Duration = Duration::from_secs(300);

/// upstream's nonRootTestUserID.
pub(super) const NON_ROOT_UID: i64 = 1000;

/// The two object kinds whose keys a volume shows as files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    /// The word upstream's names are made of (`configmap-volume`, `/etc/secret-volume`, …).
    pub(super) fn word(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }

    /// The volume source for object `name`, with `extra` fields (optional, defaultMode, items).
    pub(super) fn source(self, name: &str, extra: Value) -> Value {
        let (field, key) = match self {
            Kind::ConfigMap => ("configMap", "name"),
            Kind::Secret => ("secret", "secretName"),
        };
        let mut src = json!({ key: name });
        if let (Some(s), Some(e)) = (src.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({ field: src })
    }

    /// The object with these text keys (a Secret's as base64 `data`).
    fn object(self, name: &str, data: &[(&str, &str)]) -> Value {
        let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| {
                let v = match self {
                    Kind::ConfigMap => v.to_string(),
                    Kind::Secret => b64(v),
                };
                (k.to_string(), Value::String(v))
            })
            .collect();
        json!({"metadata": {"name": name}, "data": data})
    }

    /// Create the object in namespace `ns`.
    pub(super) async fn create_in(
        self,
        ctx: &Ctx,
        ns: &str,
        name: &str,
        data: &[(&str, &str)],
    ) -> CaseResult {
        let obj = self.object(name, data);
        let pp = PostParams::default();
        match self {
            Kind::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
                api.create(&pp, &from_json(obj)?).await?;
            }
            Kind::Secret => {
                let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
                api.create(&pp, &from_json(obj)?).await?;
            }
        }
        Ok(())
    }

    pub(super) async fn create(self, ctx: &Ctx, name: &str, data: &[(&str, &str)]) -> CaseResult {
        self.create_in(ctx, &ctx.ns, name, data).await
    }

    /// Replace the object's data with exactly these keys (upstream's Update).
    async fn replace(self, ctx: &Ctx, name: &str, data: &[(&str, &str)]) -> CaseResult {
        let obj = self.object(name, data);
        let pp = PostParams::default();
        match self {
            Kind::ConfigMap => {
                ctx.api::<ConfigMap>()
                    .replace(name, &pp, &from_json(obj)?)
                    .await?;
            }
            Kind::Secret => {
                ctx.api::<Secret>()
                    .replace(name, &pp, &from_json(obj)?)
                    .await?;
            }
        }
        Ok(())
    }

    async fn delete(self, ctx: &Ctx, name: &str) -> CaseResult {
        let dp = DeleteParams::default();
        match self {
            Kind::ConfigMap => drop(ctx.api::<ConfigMap>().delete(name, &dp).await?),
            Kind::Secret => drop(ctx.api::<Secret>().delete(name, &dp).await?),
        }
        Ok(())
    }
}

/// Go's `os.FileMode` string of permission bits, as mounttest prints it: 0644 → `-rw-r--r--`.
pub(super) fn mode_string(mode: u32) -> String {
    let mut s = String::from("-");
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        for (bit, c) in [(4, 'r'), (2, 'w'), (1, 'x')] {
            s.push(if bits & bit != 0 { c } else { '-' });
        }
    }
    s
}

/// mounttest's line for `--file_content` / `--file_content_in_loop`.
pub(super) fn content_line(path: &str, value: &str) -> String {
    format!("content of file \"{path}\": {value}")
}

/// mounttest's line for `--file_mode` (upstream's getFileModeRegex, Linux half: default 0644).
pub(super) fn mode_line(path: &str, mode: Option<u32>) -> String {
    format!(
        "mode of file \"{path}\": {}",
        mode_string(mode.unwrap_or(0o644))
    )
}

/// An agnhost container running `mounttest <args>` with these volumeMounts (the command named, as
/// kiln's agnhost image has no entrypoint).
pub(super) fn mounttest(ctx: &Ctx, name: &str, args: &[String], mounts: Value) -> Value {
    let mut all = vec!["mounttest".to_string()];
    all.extend_from_slice(args);
    json!({
        "name": name,
        "image": ctx.images().agnhost(),
        "command": ["/agnhost"],
        "args": all,
        "volumeMounts": mounts,
    })
}

/// A pod that runs once (restartPolicy Never, grace 1 s) with these volumes, containers and pod
/// securityContext.
pub(super) fn volume_pod(
    name: &str,
    volumes: Value,
    containers: Vec<Value>,
    security: Value,
) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": security,
            "volumes": volumes,
            "containers": containers,
        },
    }))
}

/// Poll a container's log until it contains `want` (upstream's Eventually(pollLogs).Should(
/// ContainSubstring(want))).
pub(super) async fn wait_log(ctx: &Ctx, pod: &str, container: &str, want: &str) -> CaseResult {
    ctx.wait(
        &format!("{want:?} in the log of {pod}/{container}"),
        UPDATE_TIMEOUT,
        || async {
            Ok(match ctx.logs(pod, container).await {
                Ok(log) if log.contains(want) => Ok(()),
                Ok(log) => Err(format!("log: {}", log.lines().last().unwrap_or("(empty)"))),
                Err(e) => Err(e.to_string()),
            })
        },
    )
    .await
}

/// One "consumable from pods in volume" variant: the pod (as root, or as uid 1000, with an fsGroup)
/// reads one file of the volume and its mode.
#[derive(Debug, Clone, Copy)]
pub(super) struct Consume {
    pub kind: Kind,
    pub non_root: bool,
    pub fs_group: Option<i64>,
    /// The volume's defaultMode, or (mapped) the item's mode.
    pub mode: Option<u32>,
    /// One key mapped to another path (`items`).
    pub mapped: bool,
    /// The object's name (upstream: `<word>-test-volume[-map]-<uuid>` / `secret-test[-map]-<uuid>`).
    pub object: &'static str,
}

/// Upstream's doConfigMapE2EWith[out]Mappings / doSecretE2EWith[out]Mapping: make the object (keys
/// data-1..3), run mounttest on its volume: the file MUST hold the key's value and (unless an
/// fsGroup adjusts it on a mapped configMap) have the expected mode.
pub(super) async fn consume(ctx: &Ctx, c: Consume) -> CaseResult {
    let word = c.kind.word();
    let newline = if c.kind == Kind::Secret { "\n" } else { "" };
    let values: Vec<String> = (1..=3).map(|i| format!("value-{i}{newline}")).collect();
    let keys = ["data-1", "data-2", "data-3"];
    let data: Vec<(&str, &str)> = keys
        .iter()
        .copied()
        .zip(values.iter().map(|v| v.as_str()))
        .collect();
    c.kind.create(ctx, c.object, &data).await?;

    let mount = format!("/etc/{word}-volume");
    // Upstream maps configMap key data-2 to path/to/data-2, secret key data-1 to new-path-data-1.
    let (key, rel) = match (c.mapped, c.kind) {
        (false, _) => ("data-1", "data-1"),
        (true, Kind::ConfigMap) => ("data-2", "path/to/data-2"),
        (true, Kind::Secret) => ("data-1", "new-path-data-1"),
    };
    let extra = match (c.mapped, c.mode) {
        (false, None) => json!({}),
        (false, Some(m)) => json!({"defaultMode": m}),
        (true, None) => json!({"items": [{"key": key, "path": rel}]}),
        (true, Some(m)) => json!({"items": [{"key": key, "path": rel, "mode": m}]}),
    };
    let file = format!("{mount}/{rel}");
    let container = match c.kind {
        Kind::ConfigMap => "agnhost-container",
        Kind::Secret => "secret-volume-test",
    };
    let volume = format!("{word}-volume");
    let mut security = json!({});
    if c.non_root {
        security["runAsUser"] = json!(NON_ROOT_UID);
    }
    if let Some(g) = c.fs_group {
        security["fsGroup"] = json!(g);
    }
    let pod_name = format!("pod-{word}s");
    let pod = volume_pod(
        &pod_name,
        json!([merge(
            json!({"name": volume}),
            c.kind.source(c.object, extra)
        )]),
        vec![mounttest(
            ctx,
            container,
            &[
                format!("--file_content={file}"),
                format!("--file_mode={file}"),
            ],
            json!([{"name": volume, "mountPath": mount, "readOnly": c.kind == Kind::ConfigMap}]),
        )],
        security,
    )?;
    let value = &values[keys.iter().position(|k| *k == key).unwrap_or(0)];
    let mut want = vec![content_line(&file, value.trim_end())];
    if !(c.mapped && c.kind == Kind::ConfigMap && c.fs_group.is_some()) {
        want.push(mode_line(&file, c.mode));
    }
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    match ctx.expect_output(&pod, container, &want).await {
        Ok(_) => Ok(()),
        // A failed read says why (e.g. permission denied) in the container's log.
        Err(e) => {
            let log = ctx.logs(&pod_name, container).await.unwrap_or_default();
            Err(crate::error::CaseError::Failed(format!(
                "{e}; log: {}",
                log.trim().replace('\n', " | ")
            )))
        }
    }
}

/// A volume: `{"name": …}` merged with its source.
pub(super) fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// ConfigMap Volume, without mapping: the pod MUST read data-1's value from the volume, and the file's
/// mode MUST default to 0644.
async fn plain(ctx: &Ctx) -> CaseResult {
    consume(ctx, configmap(false, None, false, "configmap-test-volume")).await
}

/// ConfigMap Volume, without mapping, volume mode set: with defaultMode 0400 the pod MUST read the
/// value and the file's mode MUST be 0400.
async fn default_mode(ctx: &Ctx) -> CaseResult {
    consume(
        ctx,
        configmap(false, Some(0o400), false, "configmap-test-volume"),
    )
    .await
}

/// ConfigMap Volume, without mapping, non-root user: run as uid 1000 the pod MUST read the value, and
/// the file's mode MUST be the default 0644.
async fn non_root(ctx: &Ctx) -> CaseResult {
    consume(ctx, configmap(true, None, false, "configmap-test-volume")).await
}

/// ConfigMap Volume, with mapping: key data-2 mapped to path/to/data-2 MUST be readable there with
/// mode 0644.
async fn mapped(ctx: &Ctx) -> CaseResult {
    consume(
        ctx,
        configmap(false, None, true, "configmap-test-volume-map"),
    )
    .await
}

/// ConfigMap Volume, with mapping, volume mode set: the mapped item with mode 0400 MUST be readable
/// and have mode 0400.
async fn mapped_item_mode(ctx: &Ctx) -> CaseResult {
    consume(
        ctx,
        configmap(false, Some(0o400), true, "configmap-test-volume-map"),
    )
    .await
}

/// ConfigMap Volume, with mapping, non-root user: run as uid 1000 the mapped file MUST be readable,
/// with mode 0644.
async fn mapped_non_root(ctx: &Ctx) -> CaseResult {
    consume(
        ctx,
        configmap(true, None, true, "configmap-test-volume-map"),
    )
    .await
}

fn configmap(non_root: bool, mode: Option<u32>, mapped: bool, object: &'static str) -> Consume {
    Consume {
        kind: Kind::ConfigMap,
        non_root,
        fs_group: None,
        mode,
        mapped,
        object,
    }
}

/// ConfigMap Volume, update: a running pod MUST read data-1 (value-1) from the volume; after the
/// ConfigMap is updated (value-2) the pod MUST read the new value from the same file.
async fn updates(ctx: &Ctx) -> CaseResult {
    let name = "configmap-test-upd";
    Kind::ConfigMap
        .create(ctx, name, &[("data-1", "value-1")])
        .await?;
    let pod = loop_pod(ctx, name, None)?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("pod-configmaps").await?;
    wait_log(ctx, "pod-configmaps", "agnhost-container", "value-1").await?;
    Kind::ConfigMap
        .replace(ctx, name, &[("data-1", "value-2")])
        .await?;
    wait_log(ctx, "pod-configmaps", "agnhost-container", "value-2").await
}

/// The pod of the update entries: mounttest reads /etc/configmap-volume/data-1 in a loop for the whole
/// update timeout; `extra`: a second container.
fn loop_pod(ctx: &Ctx, name: &str, extra: Option<Value>) -> CaseResult<Pod> {
    let mounts = json!([{"name": "configmap-volume", "mountPath": "/etc/configmap-volume", "readOnly": true}]);
    let mut containers = vec![mounttest(
        ctx,
        "agnhost-container",
        &loop_args("/etc/configmap-volume/data-1"),
        mounts,
    )];
    containers.extend(extra);
    volume_pod(
        "pod-configmaps",
        json!([merge(
            json!({"name": "configmap-volume"}),
            Kind::ConfigMap.source(name, json!({}))
        )]),
        containers,
        json!({}),
    )
}

/// mounttest's arguments to print a file every 2 s for the update timeout, whatever it holds.
pub(super) fn loop_args(file: &str) -> Vec<String> {
    vec![
        "--break_on_expected_content=false".into(),
        format!("--retry_time={}", UPDATE_TIMEOUT.as_secs()),
        format!("--file_content_in_loop={file}"),
    ]
}

/// ConfigMap Volume, text data, binary data: a ConfigMap with data (data-1) and binaryData (dump.bin)
/// in a volume: the text MUST be read back by mounttest, the binary bytes by busybox's hexdump.
async fn binary_data(ctx: &Ctx) -> CaseResult {
    let name = "configmap-test-upd";
    let bytes = [0xde, 0xca, 0xfe, 0xba, 0xd0, 0xfe, 0xff];
    let cm: ConfigMap = from_json(json!({
        "metadata": {"name": name},
        "data": {"data-1": "value-1"},
        "binaryData": {"dump.bin": base64::engine::general_purpose::STANDARD.encode(bytes)},
    }))?;
    ctx.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await?;
    let hexdump = json!({
        "name": "configmap-volume-binary-test",
        "image": ctx.images().busybox(),
        "command": ["hexdump", "-C", "/etc/configmap-volume/dump.bin"],
        "volumeMounts": [{"name": "configmap-volume", "mountPath": "/etc/configmap-volume", "readOnly": true}],
    });
    ctx.create_pod(&loop_pod(ctx, name, Some(hexdump))?).await?;
    ctx.wait_running("pod-configmaps").await?;
    wait_log(ctx, "pod-configmaps", "agnhost-container", "value-1").await?;
    wait_log(
        ctx,
        "pod-configmaps",
        "configmap-volume-binary-test",
        "de ca fe ba d0 fe ff",
    )
    .await
}

/// The names of one kind's optional-updates entry, in the order delete, update, create.
pub(super) struct Optional {
    pub kind: Kind,
    pub base: &'static str,
    pub pod: &'static str,
    pub objects: [&'static str; 3],
    pub volumes: [&'static str; 3],
    pub containers: [&'static str; 3],
}

/// Upstream's "optional updates should be reflected in volume": three optional volumes, one per
/// container reading in a loop: `delete`'s object exists (data-1), `update`'s exists (data-1 only,
/// the container reads data-3), `create`'s does not. Running, the create and update containers MUST
/// fail to read their file and the delete container MUST read value-1. Then the first object is
/// deleted, the second updated (data-1 removed, data-3 = value-3), the third created: the create
/// container MUST read value-1, the update container value-3, and the delete container MUST fail to
/// read its file.
pub(super) async fn optional_script(ctx: &Ctx, o: &Optional) -> CaseResult {
    let [del, upd, create] = o.objects;
    o.kind.create(ctx, del, &[("data-1", "value-1")]).await?;
    o.kind.create(ctx, upd, &[("data-1", "value-1")]).await?;
    let dirs = ["delete", "update", "create"];
    let files = ["data-1", "data-3", "data-1"];
    let mut volumes = Vec::new();
    let mut containers = Vec::new();
    let mut paths = Vec::new();
    for i in 0..3 {
        volumes.push(merge(
            json!({"name": o.volumes[i]}),
            o.kind.source(o.objects[i], json!({"optional": true})),
        ));
        let path = format!("{}/{}/{}", o.base, dirs[i], files[i]);
        containers.push(mounttest(
            ctx,
            o.containers[i],
            &loop_args(&path),
            json!([{"name": o.volumes[i], "mountPath": format!("{}/{}", o.base, dirs[i]), "readOnly": true}]),
        ));
        paths.push(path);
    }
    ctx.create_pod(&volume_pod(o.pod, json!(volumes), containers, json!({}))?)
        .await?;
    ctx.wait_running(o.pod).await?;
    let error = |i: usize| format!("Error reading file {}", paths[i]);
    let [c_del, c_upd, c_create] = o.containers;
    wait_log(ctx, o.pod, c_create, &error(2)).await?;
    wait_log(ctx, o.pod, c_upd, &error(1)).await?;
    wait_log(ctx, o.pod, c_del, "value-1").await?;

    o.kind.delete(ctx, del).await?;
    o.kind.replace(ctx, upd, &[("data-3", "value-3")]).await?;
    o.kind.create(ctx, create, &[("data-1", "value-1")]).await?;
    wait_log(ctx, o.pod, c_create, "value-1").await?;
    wait_log(ctx, o.pod, c_upd, "value-3").await?;
    wait_log(ctx, o.pod, c_del, &error(0)).await
}

/// ConfigMap Volume, create, update and delete: see [`optional_script`].
async fn optional_updates(ctx: &Ctx) -> CaseResult {
    optional_script(
        ctx,
        &Optional {
            kind: Kind::ConfigMap,
            base: "/etc/configmap-volumes",
            pod: "pod-configmaps",
            objects: ["cm-test-opt-del", "cm-test-opt-upd", "cm-test-opt-create"],
            volumes: ["deletecm-volume", "updatecm-volume", "createcm-volume"],
            containers: [
                "delcm-volume-test",
                "updcm-volume-test",
                "createcm-volume-test",
            ],
        },
    )
    .await
}

/// Upstream's "consumable in multiple volumes": one object in two volumes of one pod, mounted at
/// `/etc/<word>-volume` and `/etc/<word>-volume-2`: the content MUST be read from the volume (and,
/// `with_mode`, the file MUST have the default mode 0644).
pub(super) async fn two_volumes(
    ctx: &Ctx,
    kind: Kind,
    object: &str,
    with_mode: bool,
) -> CaseResult {
    let newline = if kind == Kind::Secret { "\n" } else { "" };
    let data: Vec<(String, String)> = (1..=3)
        .map(|i| (format!("data-{i}"), format!("value-{i}{newline}")))
        .collect();
    let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    kind.create(ctx, object, &data).await?;
    let word = kind.word();
    let names = [format!("{word}-volume"), format!("{word}-volume-2")];
    let volumes: Vec<Value> = names
        .iter()
        .map(|n| merge(json!({"name": n}), kind.source(object, json!({}))))
        .collect();
    let mounts: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "mountPath": format!("/etc/{n}"), "readOnly": true}))
        .collect();
    let file = format!("/etc/{word}-volume/data-1");
    let mut args = vec![format!("--file_content={file}")];
    let mut want = vec![content_line(&file, "value-1")];
    if with_mode {
        args.push(format!("--file_mode={file}"));
        want.push(mode_line(&file, None));
    }
    let container = format!("{word}-volume-test");
    let pod = volume_pod(
        &format!("pod-{word}s"),
        json!(volumes),
        vec![mounttest(ctx, &container, &args, json!(mounts))],
        json!({}),
    )?;
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    ctx.expect_output(&pod, &container, &want).await?;
    Ok(())
}

/// ConfigMap Volume, multiple volume maps: see [`two_volumes`] (content only).
async fn multiple_volumes(ctx: &Ctx) -> CaseResult {
    two_volumes(ctx, Kind::ConfigMap, "configmap-test-volume", false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_print_as_gos_file_mode() {
        assert_eq!(mode_string(0o644), "-rw-r--r--");
        assert_eq!(mode_string(0o400), "-r--------");
        assert_eq!(mode_string(0o440), "-r--r-----");
        assert_eq!(mode_line("/f", None), "mode of file \"/f\": -rw-r--r--");
    }

    #[test]
    fn sources_name_their_object_as_each_kind_does() {
        assert_eq!(
            Kind::ConfigMap.source("c", json!({"optional": true})),
            json!({"configMap": {"name": "c", "optional": true}})
        );
        assert_eq!(
            Kind::Secret.source("s", json!({"defaultMode": 0o400})),
            json!({"secret": {"secretName": "s", "defaultMode": 256}})
        );
    }
}
