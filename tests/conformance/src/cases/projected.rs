//! sig-storage projected volume entries (projected_configmap.go, projected_secret.go,
//! projected_downwardapi.go, projected_combined.go): the ConfigMap and Secret volume pods with the
//! object as a projection source, and the downward API volume entries through a projected volume
//! ([`super::downward_volumes`]). Entries that differ only in data are rows of `CASES` walked by
//! shared functions. Each case restates the entry's MUSTs in its doc comment.

use base64::Engine;
use serde_json::{json, Value};

use super::configmap_volumes::{
    content_line, loop_args, merge, mode_line, volume_pod, wait_log, Kind, NON_ROOT_UID,
};
use super::downward_volumes::{
    agnhost_mounttest, read_file, update, with, Via, ANNOTATIONS, CPU_LIMIT, CPU_REQUEST,
    DEFAULT_CPU_LIMIT, DEFAULT_MEMORY_LIMIT, DEFAULT_MODE, ITEM_MODE, LABELS, MEMORY_LIMIT,
    MEMORY_REQUEST, PODNAME,
};
use super::{case, Case};
use crate::ctx::Ctx;
use crate::error::CaseResult;
use crate::must_eq;

pub const CASES: &[Case] = &[
    case!(
        "[sig-storage] Projected combined should project all components that make up the projection API [Projection] [NodeConformance] [Conformance]",
        "projected",
        combined
    ),
    // Projected configMap
    with!(
        "[sig-storage] Projected configMap should be consumable from pods in volume [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume::CM
    ),
    with!(
        "[sig-storage] Projected configMap should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            default_mode: Some(0o400),
            ..Consume::CM
        }
    ),
    with!(
        "[sig-storage] Projected configMap should be consumable from pods in volume as non-root [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            non_root: true,
            ..Consume::CM
        }
    ),
    with!(
        "[sig-storage] Projected configMap should be consumable from pods in volume with mappings [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            mapped: true,
            ..Consume::CM
        }
    ),
    with!(
        "[sig-storage] Projected configMap should be consumable from pods in volume with mappings and Item mode set [LinuxOnly] [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            mapped: true,
            default_mode: Some(0o400),
            ..Consume::CM
        }
    ),
    with!(
        "[sig-storage] Projected configMap should be consumable from pods in volume with mappings as non-root [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            mapped: true,
            non_root: true,
            ..Consume::CM
        }
    ),
    with!(
        "[sig-storage] Projected configMap should be consumable in multiple volumes in the same pod [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            twice: true,
            ..Consume::CM
        }
    ),
    case!(
        "[sig-storage] Projected configMap updates should be reflected in volume [NodeConformance] [Conformance]",
        "projected",
        configmap_updates
    ),
    with!(
        "[sig-storage] Projected configMap optional updates should be reflected in volume [NodeConformance] [Conformance]",
        "projected",
        optional_updates,
        Kind::ConfigMap
    ),
    // Projected secret
    with!(
        "[sig-storage] Projected secret should be consumable from pods in volume [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume::SECRET
    ),
    with!(
        "[sig-storage] Projected secret should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            default_mode: Some(0o400),
            ..Consume::SECRET
        }
    ),
    with!(
        "[sig-storage] Projected secret should be consumable from pods in volume as non-root with defaultMode and fsGroup set [LinuxOnly] [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            default_mode: Some(0o440),
            non_root: true,
            fs_group: Some(1001),
            ..Consume::SECRET
        }
    ),
    with!(
        "[sig-storage] Projected secret should be consumable from pods in volume with mappings [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            mapped: true,
            ..Consume::SECRET
        }
    ),
    with!(
        "[sig-storage] Projected secret should be consumable from pods in volume with mappings and Item Mode set [LinuxOnly] [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            mapped: true,
            default_mode: Some(0o400),
            ..Consume::SECRET
        }
    ),
    with!(
        "[sig-storage] Projected secret should be consumable in multiple volumes in a pod [NodeConformance] [Conformance]",
        "projected",
        consume,
        &Consume {
            twice: true,
            ..Consume::SECRET
        }
    ),
    with!(
        "[sig-storage] Projected secret optional updates should be reflected in volume [NodeConformance] [Conformance]",
        "projected",
        optional_updates,
        Kind::Secret
    ),
    // Projected downwardAPI: the downward API volume entries through a projected volume.
    with!(
        "[sig-storage] Projected downwardAPI should provide podname only [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &PODNAME
    ),
    with!(
        "[sig-storage] Projected downwardAPI should set DefaultMode on files [LinuxOnly] [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &DEFAULT_MODE
    ),
    with!(
        "[sig-storage] Projected downwardAPI should set mode on item file [LinuxOnly] [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &ITEM_MODE
    ),
    with!(
        "[sig-storage] Projected downwardAPI should update labels on modification [NodeConformance] [Conformance]",
        "projected",
        update,
        Via::Projected,
        &LABELS
    ),
    with!(
        "[sig-storage] Projected downwardAPI should update annotations on modification [NodeConformance] [Conformance]",
        "projected",
        update,
        Via::Projected,
        &ANNOTATIONS
    ),
    with!(
        "[sig-storage] Projected downwardAPI should provide container's cpu limit [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &CPU_LIMIT
    ),
    with!(
        "[sig-storage] Projected downwardAPI should provide container's memory limit [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &MEMORY_LIMIT
    ),
    with!(
        "[sig-storage] Projected downwardAPI should provide container's cpu request [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &CPU_REQUEST
    ),
    with!(
        "[sig-storage] Projected downwardAPI should provide container's memory request [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &MEMORY_REQUEST
    ),
    with!(
        "[sig-storage] Projected downwardAPI should provide node allocatable (cpu) as default cpu limit if the limit is not set [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &DEFAULT_CPU_LIMIT
    ),
    with!(
        "[sig-storage] Projected downwardAPI should provide node allocatable (memory) as default memory limit if the limit is not set [NodeConformance] [Conformance]",
        "projected",
        read_file,
        Via::Projected,
        &DEFAULT_MEMORY_LIMIT
    ),
];

/// A projected volume `name` with one source, `kind`'s object `object` (with `extra`: items,
/// optional), and the volume's defaultMode.
fn projected(name: &str, kind: Kind, object: &str, extra: Value, mode: Option<u32>) -> Value {
    let field = match kind {
        Kind::ConfigMap => "configMap",
        Kind::Secret => "secret",
    };
    let source = merge(json!({"name": object}), extra);
    let mut volume = json!({"name": name, "projected": {"sources": [{ field: source }]}});
    if let Some(m) = mode {
        volume["projected"]["defaultMode"] = json!(m);
    }
    volume
}

/// The object's data as a merge patch (a Secret's base64; None removes the key), applied with kubectl.
async fn patch_data(
    ctx: &Ctx,
    kind: Kind,
    name: &str,
    data: &[(&str, Option<&str>)],
) -> CaseResult {
    let encode = |v: &str| match kind {
        Kind::ConfigMap => v.to_string(),
        Kind::Secret => base64::engine::general_purpose::STANDARD.encode(v),
    };
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v.map(encode))))
        .collect();
    let body = json!({ "data": data }).to_string();
    let args = [
        "-n",
        &ctx.ns,
        "patch",
        kind.word(),
        name,
        "--type=merge",
        "-p",
        &body,
    ];
    ctx.kubectl(&args).await?;
    Ok(())
}

/// The values of keys data-1..3 (upstream's newConfigMap / secretForTest: a Secret's end in a newline).
fn values(kind: Kind) -> [(&'static str, &'static str); 3] {
    match kind {
        Kind::ConfigMap => [
            ("data-1", "value-1"),
            ("data-2", "value-2"),
            ("data-3", "value-3"),
        ],
        Kind::Secret => [
            ("data-1", "value-1\n"),
            ("data-2", "value-2\n"),
            ("data-3", "value-3\n"),
        ],
    }
}

/// One "consumable from pods in volume" entry of a projected configMap or secret.
#[derive(Debug, Clone, Copy)]
struct Consume {
    kind: Kind,
    /// One key mapped to another path (`items`): configMap data-2 → path/to/data-2, secret data-1 →
    /// new-path-data-1, as upstream.
    mapped: bool,
    /// The projected volume's defaultMode (upstream sets it for the "Item mode" entries too).
    default_mode: Option<u32>,
    /// runAsUser 1000.
    non_root: bool,
    fs_group: Option<i64>,
    /// The object in a second projected volume of the pod as well, read there too.
    twice: bool,
}

impl Consume {
    const CM: Consume = Consume {
        kind: Kind::ConfigMap,
        mapped: false,
        default_mode: None,
        non_root: false,
        fs_group: None,
        twice: false,
    };
    const SECRET: Consume = Consume {
        kind: Kind::Secret,
        ..Consume::CM
    };
}

/// Projected Volume, ConfigMap / Secrets: volume mode default, volume mode 0400, non-root user
/// (and custom fsGroup), mapped, mapped with mode 0400, mapped as non-root, multiple volume paths.
/// The object (keys data-1..3) is the source of a projected volume; the pod (as root, or as uid 1000
/// with the fsGroup) MUST read the key's value from the file (the mapped path when mapped), and the
/// file's mode MUST be the defaultMode (0644 when unset: -rw-r--r--; 0400: -r--------; 0440 with
/// fsGroup: -r--r-----). With the object in two projected volumes, the value MUST be read from both
/// mounts (upstream reads only the first).
async fn consume(ctx: &Ctx, c: &Consume) -> CaseResult {
    let word = c.kind.word();
    let values = values(c.kind);
    let object = match (c.kind, c.mapped) {
        (Kind::ConfigMap, false) => "projected-configmap-test-volume",
        (Kind::ConfigMap, true) => "projected-configmap-test-volume-map",
        (Kind::Secret, false) => "projected-secret-test",
        (Kind::Secret, true) => "projected-secret-test-map",
    };
    c.kind.create(ctx, object, &values).await?;
    let (key, rel) = match (c.mapped, c.kind) {
        (false, _) => ("data-1", "data-1"),
        (true, Kind::ConfigMap) => ("data-2", "path/to/data-2"),
        (true, Kind::Secret) => ("data-1", "new-path-data-1"),
    };
    let extra = if c.mapped {
        json!({"items": [{"key": key, "path": rel}]})
    } else {
        json!({})
    };
    let volume = format!("projected-{word}-volume");
    let mount = format!("/etc/{volume}");
    let file = format!("{mount}/{rel}");
    let value = values
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.trim_end())
        .unwrap_or_default();
    let mut volumes = vec![projected(
        &volume,
        c.kind,
        object,
        extra.clone(),
        c.default_mode,
    )];
    let mut mounts = vec![json!({"name": volume, "mountPath": mount, "readOnly": true})];
    let mut args = vec![
        format!("--file_content={file}"),
        format!("--file_mode={file}"),
    ];
    let mut want = vec![content_line(&file, value), mode_line(&file, c.default_mode)];
    if c.twice {
        // The second mount is read once more by mounttest's loop (for a second).
        let (volume2, file2) = (format!("{volume}-2"), format!("{mount}-2/{rel}"));
        volumes.push(projected(&volume2, c.kind, object, extra, c.default_mode));
        mounts.push(json!({"name": volume2, "mountPath": format!("{mount}-2"), "readOnly": true}));
        args.extend([
            "--break_on_expected_content=false".to_string(),
            "--retry_time=1".to_string(),
            format!("--file_content_in_loop={file2}"),
        ]);
        want.push(content_line(&file2, value));
    }
    let mut security = json!({});
    if c.non_root {
        security["runAsUser"] = json!(NON_ROOT_UID);
    }
    if let Some(g) = c.fs_group {
        security["fsGroup"] = json!(g);
    }
    let container = match c.kind {
        Kind::ConfigMap => "agnhost-container",
        Kind::Secret => "projected-secret-volume-test",
    };
    let pod = volume_pod(
        &format!("pod-projected-{word}s"),
        json!(volumes),
        vec![agnhost_mounttest(ctx, container, &args, json!(mounts))],
        security,
    )?;
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    ctx.expect_output(&pod, container, &want).await?;
    Ok(())
}

/// Projected Volume, ConfigMap, update: a running pod reading data-1 of a projected configMap in a
/// loop MUST see value-1; after the ConfigMap's data-1 is updated to value-2 it MUST see value-2.
async fn configmap_updates(ctx: &Ctx) -> CaseResult {
    let (object, pod, container) = (
        "projected-configmap-test-upd",
        "pod-projected-configmaps",
        "agnhost-container",
    );
    Kind::ConfigMap
        .create(ctx, object, &[("data-1", "value-1")])
        .await?;
    let volume = "projected-configmap-volume";
    let mount = format!("/etc/{volume}");
    let spec = volume_pod(
        pod,
        json!([projected(volume, Kind::ConfigMap, object, json!({}), None)]),
        vec![agnhost_mounttest(
            ctx,
            container,
            &loop_args(&format!("{mount}/data-1")),
            json!([{"name": volume, "mountPath": mount, "readOnly": true}]),
        )],
        json!({}),
    )?;
    ctx.create_pod(&spec).await?;
    ctx.wait_running(pod).await?;
    wait_log(ctx, pod, container, "value-1").await?;
    patch_data(ctx, Kind::ConfigMap, object, &[("data-1", Some("value-2"))]).await?;
    wait_log(ctx, pod, container, "value-2").await
}

/// Projected Volume, ConfigMap / Secrets, create, update and delete: three optional projected volumes,
/// one per container reading in a loop. At start the `delete` object holds data-1, the `update`
/// object data-1 (its container reads data-3) and the `create` object does not exist: the create and
/// update containers MUST fail to read their file, the delete container MUST read value-1. Then the
/// first object is deleted, the second updated (data-1 removed, data-3 = value-3) and the third
/// created: the create container MUST read value-1, the update container value-3, and the delete
/// container MUST fail to read its file.
async fn optional_updates(ctx: &Ctx, kind: Kind) -> CaseResult {
    let (short, base, pod) = match kind {
        Kind::ConfigMap => (
            "cm",
            "/etc/projected-configmap-volumes",
            "pod-projected-configmaps",
        ),
        Kind::Secret => (
            "s",
            "/etc/projected-secret-volumes",
            "pod-projected-secrets",
        ),
    };
    let steps = [
        ("delete", "del", "data-1"),
        ("update", "upd", "data-3"),
        ("create", "create", "data-1"),
    ];
    let objects = steps.map(|(_, tag, _)| format!("{short}-test-opt-{tag}"));
    let containers = steps.map(|(_, tag, _)| format!("{tag}{short}-volume-test"));
    let files = steps.map(|(dir, _, file)| format!("{base}/{dir}/{file}"));
    kind.create(ctx, &objects[0], &[("data-1", "value-1")])
        .await?;
    kind.create(ctx, &objects[1], &[("data-1", "value-1")])
        .await?;
    let mut volumes = Vec::new();
    let mut specs = Vec::new();
    for (i, (dir, _, _)) in steps.iter().enumerate() {
        let volume = format!("{dir}{short}-volume");
        let optional = json!({"optional": true});
        volumes.push(projected(&volume, kind, &objects[i], optional, None));
        specs.push(agnhost_mounttest(
            ctx,
            &containers[i],
            &loop_args(&files[i]),
            json!([{"name": volume, "mountPath": format!("{base}/{dir}"), "readOnly": true}]),
        ));
    }
    ctx.create_pod(&volume_pod(pod, json!(volumes), specs, json!({}))?)
        .await?;
    ctx.wait_running(pod).await?;
    let error = |i: usize| format!("Error reading file {}", files[i]);
    wait_log(ctx, pod, &containers[2], &error(2)).await?;
    wait_log(ctx, pod, &containers[1], &error(1)).await?;
    wait_log(ctx, pod, &containers[0], "value-1").await?;

    let delete = ["-n", &ctx.ns, "delete", kind.word(), &objects[0]];
    ctx.kubectl(&delete).await?;
    let change = [("data-1", None), ("data-3", Some("value-3"))];
    patch_data(ctx, kind, &objects[1], &change).await?;
    kind.create(ctx, &objects[2], &[("data-1", "value-1")])
        .await?;
    wait_log(ctx, pod, &containers[2], "value-1").await?;
    wait_log(ctx, pod, &containers[1], "value-3").await?;
    wait_log(ctx, pod, &containers[0], &error(0)).await
}

/// Projected Volume, multiple projections: one projected volume with a downwardAPI (pod name), a
/// Secret (secret-data) and a ConfigMap (configmap-data) source; the pod MUST read the pod's name,
/// secret-value-1 and configmap-value-1 from it.
async fn combined(ctx: &Ctx) -> CaseResult {
    let pod = "projected-volume";
    let (secret, configmap) = (
        "secret-projected-all-test-volume",
        "configmap-projected-all-test-volume",
    );
    Kind::ConfigMap
        .create(ctx, configmap, &[("configmap-data", "configmap-value-1")])
        .await?;
    Kind::Secret
        .create(ctx, secret, &[("secret-data", "secret-value-1")])
        .await?;
    let volume = json!({"name": "podinfo", "projected": {"sources": [
        {"downwardAPI": {"items": [{"path": "podname", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}]}},
        {"secret": {"name": secret}},
        {"configMap": {"name": configmap}},
    ]}});
    let container = json!({
        "name": "projected-all-volume-test",
        "image": ctx.images().busybox(),
        "command": ["sh", "-c", "cat /all/podname && cat /all/secret-data && cat /all/configmap-data"],
        "volumeMounts": [{"name": "podinfo", "mountPath": "/all"}],
    });
    let spec = volume_pod(pod, json!([volume]), vec![container], json!({}))?;
    let want = [pod, "secret-value-1", "configmap-value-1"];
    let log = ctx
        .expect_output(&spec, "projected-all-volume-test", &want)
        .await?;
    must_eq!(
        log.trim_end(),
        want.concat(),
        "the three files, printed in turn"
    );
    Ok(())
}
