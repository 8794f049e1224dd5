//! sig-storage emptyDir entries, written from upstream's test/e2e/common/storage/empty_dir.go (the
//! volume's and new files' modes, on disk and on tmpfs, as root and as UID 1001; a volume shared by two
//! containers) and test/e2e/storage/empty_dir_wrapper.go (Secret and ConfigMap volumes, which the
//! kubelet builds on emptyDir, side by side and fifty at a time). Each case restates the entry's MUSTs
//! in its doc comment.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ReplicationController, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{describe_status, from_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

/// Where upstream's emptyDir pods mount the volume.
const VOLUME_PATH: &str = "/test-volume";
/// The file `mounttest --new_file_*` writes in it.
const TEST_FILE: &str = "/test-volume/test-file";
/// Upstream's nonRootUID.
const NON_ROOT: Option<i64> = Some(1001);
const ROOT: Option<i64> = None;
const DISK: &str = "";
const TMPFS: &str = "Memory";

/// One mode entry: (codename, runAsUser (None: the image's root), the `--new_file_<perm>` to write
/// (None: check the volume itself), the perms mounttest MUST print for it, the emptyDir medium).
type ModeRow = (
    &'static str,
    Option<i64>,
    Option<&'static str>,
    &'static str,
    &'static str,
);

/// The fourteen mode entries, as data [`volume_mode`] walks.
const MODES: [ModeRow; 14] = [
    ("[sig-storage] EmptyDir volumes should support (root,0644,default) [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, Some("0644"), "-rw-r--r--", DISK),
    ("[sig-storage] EmptyDir volumes should support (root,0666,default) [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, Some("0666"), "-rw-rw-rw-", DISK),
    ("[sig-storage] EmptyDir volumes should support (root,0777,default) [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, Some("0777"), "-rwxrwxrwx", DISK),
    ("[sig-storage] EmptyDir volumes should support (non-root,0644,default) [LinuxOnly] [NodeConformance] [Conformance]",
        NON_ROOT, Some("0644"), "-rw-r--r--", DISK),
    ("[sig-storage] EmptyDir volumes should support (non-root,0666,default) [LinuxOnly] [NodeConformance] [Conformance]",
        NON_ROOT, Some("0666"), "-rw-rw-rw-", DISK),
    ("[sig-storage] EmptyDir volumes should support (non-root,0777,default) [LinuxOnly] [NodeConformance] [Conformance]",
        NON_ROOT, Some("0777"), "-rwxrwxrwx", DISK),
    ("[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, Some("0644"), "-rw-r--r--", TMPFS),
    ("[sig-storage] EmptyDir volumes should support (root,0666,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, Some("0666"), "-rw-rw-rw-", TMPFS),
    ("[sig-storage] EmptyDir volumes should support (root,0777,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, Some("0777"), "-rwxrwxrwx", TMPFS),
    ("[sig-storage] EmptyDir volumes should support (non-root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
        NON_ROOT, Some("0644"), "-rw-r--r--", TMPFS),
    ("[sig-storage] EmptyDir volumes should support (non-root,0666,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
        NON_ROOT, Some("0666"), "-rw-rw-rw-", TMPFS),
    ("[sig-storage] EmptyDir volumes should support (non-root,0777,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
        NON_ROOT, Some("0777"), "-rwxrwxrwx", TMPFS),
    ("[sig-storage] EmptyDir volumes volume on default medium should have the correct mode [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, None, "-rwxrwxrwx", DISK),
    ("[sig-storage] EmptyDir volumes volume on tmpfs should have the correct mode [LinuxOnly] [NodeConformance] [Conformance]",
        ROOT, None, "-rwxrwxrwx", TMPFS),
];

/// The case of row `i` of [`MODES`].
macro_rules! mode_case {
    ($i:literal) => {
        Case {
            codename: MODES[$i].0,
            namespace: "emptydir",
            run: |ctx| Box::pin(volume_mode(ctx, &MODES[$i])),
        }
    };
}

pub const CASES: &[Case] = &[
    mode_case!(0),
    mode_case!(1),
    mode_case!(2),
    mode_case!(3),
    mode_case!(4),
    mode_case!(5),
    mode_case!(6),
    mode_case!(7),
    mode_case!(8),
    mode_case!(9),
    mode_case!(10),
    mode_case!(11),
    mode_case!(12),
    mode_case!(13),
    case!(
        "[sig-storage] EmptyDir volumes pod should support shared volumes between containers [Conformance]",
        "emptydir",
        shared_volume
    ),
    case!(
        "[sig-storage] EmptyDir wrapper volumes should not conflict [Conformance]",
        "emptydir-wrapper",
        wrapper_no_conflict
    ),
    case!(
        "[sig-storage] EmptyDir wrapper volumes should not cause race condition when used for configmaps [Serial] [Conformance]",
        "emptydir-wrapper",
        wrapper_configmap_race
    ),
];

/// EmptyDir, medium default|memory, volume mode 0644|0666|0777|default, root|non-root user: a pod
/// (as root, or as UID 1001) with an emptyDir volume (medium default or Memory) at /test-volume runs
/// agnhost's mounttest. With a mode, mounttest writes /test-volume/test-file with it: the file MUST
/// have exactly that mode (-rw-r--r--, -rw-rw-rw-, -rwxrwxrwx) and its contents MUST be readable.
/// Without one ("volume ... should have the correct mode"), the volume itself MUST be -rwxrwxrwx.
/// On medium Memory the mount type MUST be tmpfs. (The descriptions say tmpfs for the default medium
/// too; upstream checks the mount type only for Memory, and so does this case.)
async fn volume_mode(ctx: &Ctx, row: &ModeRow) -> CaseResult {
    let &(_, uid, new_file, perms, medium) = row;
    let mut args = vec!["mounttest".to_string(), format!("--fs_type={VOLUME_PATH}")];
    let mut want = Vec::new();
    let checked = match new_file {
        Some(perm) => {
            args.push(format!("--new_file_{perm}={TEST_FILE}"));
            want.push(format!(
                "content of file \"{TEST_FILE}\": mount-tester new file"
            ));
            TEST_FILE
        }
        None => VOLUME_PATH,
    };
    args.push(format!("--file_perm={checked}"));
    want.push(format!("perms of file \"{checked}\": {perms}"));
    if medium == TMPFS {
        want.push(format!("mount type of \"{VOLUME_PATH}\": tmpfs"));
    }
    let mut security = json!({"seLinuxOptions": {"level": "s0"}});
    if let Some(uid) = uid {
        security["runAsUser"] = json!(uid);
    }
    // upstream's testPodWithVolume. The agnhost subcommand goes in args as upstream's; the command
    // names /agnhost because the lab's image sets it as Cmd, not Entrypoint.
    let pod: Pod = from_json(json!({
        "metadata": {"name": "pod-emptydir"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": security,
            "containers": [{
                "name": "test-container",
                "image": ctx.images().agnhost(),
                "command": ["/agnhost"],
                "args": args,
                "volumeMounts": [{"name": "test-volume", "mountPath": VOLUME_PATH}],
            }],
            "volumes": [{"name": "test-volume", "emptyDir": {"medium": medium}}],
        },
    }))?;
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    ctx.expect_output(&pod, "test-container", &want).await?;
    Ok(())
}

/// EmptyDir, shared volumes between containers: a pod with one emptyDir and two busybox containers,
/// the main one sleeping with it at /usr/share/volumeshare, the sub one writing "Hello from the
/// busy-box sub-container" into /pod-data/shareddata.txt. Once the pod runs, the main container MUST
/// read exactly that message from /usr/share/volumeshare/shareddata.txt (it waits for the sub
/// container to drop the file).
async fn shared_volume(ctx: &Ctx) -> CaseResult {
    const MESSAGE: &str = "Hello from the busy-box sub-container";
    const MAIN: &str = "busybox-main-container";
    let pod: Pod = from_json(json!({
        "metadata": {"name": "pod-sharedvolume"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "shared-data", "emptyDir": {}}],
            "containers": [
                {
                    "name": MAIN,
                    "image": ctx.images().busybox(),
                    "command": ["/bin/sh"],
                    "args": ["-c", "trap exit TERM; while true; do sleep 1; done"],
                    "volumeMounts": [{"name": "shared-data", "mountPath": "/usr/share/volumeshare"}],
                },
                {
                    "name": "busybox-sub-container",
                    "image": ctx.images().busybox(),
                    "command": ["/bin/sh"],
                    "args": ["-c", format!("echo {MESSAGE} > /pod-data/shareddata.txt")],
                    "volumeMounts": [{"name": "shared-data", "mountPath": "/pod-data"}],
                },
            ],
        },
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("pod-sharedvolume").await?;
    let read = ["/bin/sh", "-c", "cat /usr/share/volumeshare/shareddata.txt"];
    let content = ctx
        .wait(
            "the sub container's file in the main container",
            std::time::Duration::from_secs(60),
            || async {
                Ok(match ctx.exec("pod-sharedvolume", MAIN, &read).await {
                    Ok(out) => Ok(out),
                    Err(CaseError::Kubectl { stderr, .. }) => Err(stderr),
                    Err(e) => return Err(e),
                })
            },
        )
        .await?;
    must_eq!(
        content.trim(),
        MESSAGE,
        "the shared file as the main container reads it"
    );
    Ok(())
}

/// EmptyDir Wrapper Volume, Secret and ConfigMap volumes, no conflict: a Secret and a ConfigMap
/// (binaryData), both `data-1: "value-1\n"`, are mounted into one agnhost test-webserver container;
/// the pod MUST start (Running and Ready), and the Secret, the ConfigMap and the pod MUST then delete.
async fn wrapper_no_conflict(ctx: &Ctx) -> CaseResult {
    const NAME: &str = "emptydir-wrapper-test";
    let secret: Secret = from_json(json!({
        "metadata": {"name": NAME}, "data": {"data-1": "dmFsdWUtMQo="},
    }))?;
    let config_map: ConfigMap = from_json(json!({
        "metadata": {"name": NAME}, "binaryData": {"data-1": "dmFsdWUtMQo="},
    }))?;
    let secrets: Api<Secret> = ctx.api();
    let config_maps: Api<ConfigMap> = ctx.api();
    let pp = PostParams::default();
    secrets.create(&pp, &secret).await?;
    config_maps.create(&pp, &config_map).await?;
    let pod: Pod = from_json(json!({
        "metadata": {"name": "pod-secrets"},
        "spec": {
            "volumes": [
                {"name": "secret-volume", "secret": {"secretName": NAME}},
                {"name": "configmap-volume", "configMap": {"name": NAME}},
            ],
            "containers": [{
                "name": "secret-test",
                "image": ctx.images().agnhost(),
                "command": ["/agnhost"],
                "args": ["test-webserver"],
                "volumeMounts": [
                    {"name": "secret-volume", "mountPath": "/etc/secret-volume", "readOnly": true},
                    {"name": "configmap-volume", "mountPath": "/etc/configmap-volume"},
                ],
            }],
        },
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_ready("pod-secrets").await?;
    secrets.delete(NAME, &DeleteParams::default()).await?;
    config_maps.delete(NAME, &DeleteParams::default()).await?;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    ctx.api::<Pod>().delete("pod-secrets", &now).await?;
    Ok(())
}

/// upstream's counts: 50 ConfigMap volumes per pod, 5 pods per ReplicationController, 3 rounds.
const RACE_VOLUMES: usize = 50;
const RACE_PODS: usize = 5;
const RACE_ROUNDS: usize = 3;

/// EmptyDir Wrapper Volume, ConfigMap volumes, no race: 50 ConfigMaps (`racey-configmap-<i>`,
/// `data-1: value-1`), then three times a ReplicationController of 5 pause pods, pinned to one
/// schedulable node, each mounting all 50 (item data-1) at /etc/config-<i>: every pod MUST reach
/// Running (none may hang waiting for its volumes). The controllers (their pods gone) and the
/// ConfigMaps MUST then delete, as upstream's cleanups do.
async fn wrapper_configmap_race(ctx: &Ctx) -> CaseResult {
    let config_maps: Api<ConfigMap> = ctx.api();
    let names: Vec<String> = (0..RACE_VOLUMES)
        .map(|i| format!("racey-configmap-{i}"))
        .collect();
    for name in &names {
        let cm: ConfigMap = from_json(json!({
            "metadata": {"name": name}, "data": {"data-1": "value-1"},
        }))?;
        config_maps.create(&PostParams::default(), &cm).await?;
    }
    let volumes: Vec<_> = names
        .iter()
        .map(|name| {
            json!({"name": name, "configMap": {
                "name": name, "items": [{"key": "data-1", "path": "data-1"}],
            }})
        })
        .collect();
    let mounts: Vec<_> = (0..RACE_VOLUMES)
        .map(|i| json!({"name": names[i], "mountPath": format!("/etc/config-{i}")}))
        .collect();
    let mut controllers = Vec::new();
    for round in 0..RACE_ROUNDS {
        let rc = format!("wrapped-volume-race-{round}");
        race_round(ctx, &rc, &volumes, &mounts).await?;
        controllers.push(rc);
    }
    for rc in &controllers {
        delete_rc_and_wait_for_pods(ctx, rc).await?;
    }
    for name in &names {
        config_maps.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// upstream's testNoWrappedVolumeRace: the ReplicationController `rc` on one node, its pods created,
/// each Running.
async fn race_round(
    ctx: &Ctx,
    rc: &str,
    volumes: &[serde_json::Value],
    mounts: &[serde_json::Value],
) -> CaseResult {
    const HOSTNAME: &str = "kubernetes.io/hostname";
    let node = ctx
        .all::<Node>()
        .get(&ctx.schedulable_node().await?)
        .await?;
    let hostname = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HOSTNAME))
        .cloned();
    must!(
        hostname.is_some(),
        "node {:?} has no {HOSTNAME} label to pin the pods with",
        node.metadata.name
    );
    let controller: ReplicationController = from_json(json!({
        "metadata": {"name": rc},
        "spec": {
            "replicas": RACE_PODS,
            "selector": {"name": rc},
            "template": {
                "metadata": {"labels": {"name": rc}},
                "spec": {
                    "containers": [{
                        "name": "test-container",
                        "image": ctx.images().pause(),
                        "volumeMounts": mounts,
                    }],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": HOSTNAME, "operator": "In", "values": [hostname.unwrap_or_default()]},
                        ]}],
                    }}},
                    "dnsPolicy": "Default",
                    "volumes": volumes,
                },
            },
        },
    }))?;
    ctx.api::<ReplicationController>()
        .create(&PostParams::default(), &controller)
        .await?;
    let pods: Api<Pod> = ctx.api();
    let lp = ListParams::default().labels(&format!("name={rc}"));
    // e2epod.PodsCreated: the controller's pods, once there are as many as its replicas.
    let created = ctx
        .wait(
            &format!("{RACE_PODS} pods of {rc}"),
            std::time::Duration::from_secs(120),
            || async {
                let list = pods.list(&lp).await?.items;
                Ok(if list.len() == RACE_PODS {
                    Ok(list)
                } else {
                    Err(format!("{} pods", list.len()))
                })
            },
        )
        .await?;
    for pod in created
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        ctx.wait_running(pod.metadata.name.as_deref().unwrap_or_default())
            .await?;
    }
    Ok(())
}

/// e2erc.DeleteRCAndWaitForGC: delete the controller, then its pods MUST go.
async fn delete_rc_and_wait_for_pods(ctx: &Ctx, rc: &str) -> CaseResult {
    ctx.api::<ReplicationController>()
        .delete(rc, &DeleteParams::background())
        .await?;
    let pods: Api<Pod> = ctx.api();
    let lp = ListParams::default().labels(&format!("name={rc}"));
    ctx.wait(&format!("the pods of {rc} gone"), POD_START, || async {
        let list = pods.list(&lp).await?.items;
        Ok(match list.first() {
            None => Ok(()),
            Some(p) => Err(format!(
                "{} left, e.g. {}: {}",
                list.len(),
                p.metadata.name.as_deref().unwrap_or_default(),
                describe_status(p)
            )),
        })
    })
    .await?;
    Ok(())
}
