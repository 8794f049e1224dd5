//! sig-node entries about a pod's spec and status: the QoS class, patching and updating the status,
//! the pod lifecycle through the API, unprivileged containers and no privilege escalation, sysctls,
//! and volume subpaths expanded from environment variables. Each case restates the entry's MUSTs in
//! its doc comment.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::node_lifecycle::{agnhost, delete_and_wait_gone};
use super::runtime::{busybox_pod, condition, statuses};
use super::{case, Case};
use crate::ctx::{describe_status, from_json, phase, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Pods Extended Pods Set QOS Class should be set on Pods with matching resource requests and limits for memory and cpu [Conformance]",
        "pods",
        qos_guaranteed
    ),
    case!(
        "[sig-node] Pods should patch a pod status [Conformance]",
        "pods",
        patch_pod_status
    ),
    case!(
        "[sig-node] Pods should run through the lifecycle of Pods and PodStatus [Conformance]",
        "pods",
        pod_lifecycle
    ),
    case!(
        "[sig-node] Security Context When creating a pod with privileged should run the container as unprivileged when false [LinuxOnly] [NodeConformance] [Conformance]",
        "security-context-test",
        unprivileged
    ),
    case!(
        "[sig-node] Security Context when creating containers with AllowPrivilegeEscalation should not allow privilege escalation when false [LinuxOnly] [NodeConformance] [Conformance]",
        "security-context-test",
        no_privilege_escalation
    ),
    case!(
        "[sig-node] Sysctls [LinuxOnly] [NodeConformance] should support sysctls [MinimumKubeletVersion:1.21] [Environment:NotInUserNS] [Conformance]",
        "sysctl",
        sysctls_supported
    ),
    case!(
        "[sig-node] Sysctls [LinuxOnly] [NodeConformance] should reject invalid sysctls [MinimumKubeletVersion:1.21] [Conformance]",
        "sysctl",
        sysctls_invalid
    ),
    case!(
        "[sig-node] Variable Expansion should allow substituting values in a volume subpath [Conformance]",
        "var-expansion",
        subpath_substituted
    ),
    case!(
        "[sig-node] Variable Expansion should fail substituting values in a volume subpath with backticks [Conformance]",
        "var-expansion",
        subpath_dotdot_fails
    ),
    case!(
        "[sig-node] Variable Expansion should fail substituting values in a volume subpath with absolute path [Conformance]",
        "var-expansion",
        subpath_absolute_fails
    ),
    case!(
        "[sig-node] Variable Expansion should verify that a failing subpath expansion can be modified during the lifecycle of a container [Slow] [Conformance]",
        "var-expansion",
        subpath_fixed_later
    ),
    case!(
        "[sig-node] Variable Expansion should succeed in writing subpaths in container [Conformance]",
        "var-expansion",
        subpath_writes
    ),
];

/// Upstream's PodStartShortTimeout.
const SHORT: Duration = Duration::from_secs(120);

/// An agnhost `pause` pod.
fn pause_pod(ctx: &Ctx, name: &str, labels: Value, resources: Value) -> CaseResult<Pod> {
    let mut c = agnhost(ctx, "agnhost", &["pause"]);
    if !resources.is_null() {
        c["resources"] = resources;
    }
    from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [c], "terminationGracePeriodSeconds": 1},
    }))
}

/// Pods Extended, QoS class: a pod whose requests equal its limits for cpu (100m) and memory
/// (100Mi) MUST be given status.qosClass Guaranteed.
async fn qos_guaranteed(ctx: &Ctx) -> CaseResult {
    let r = json!({"cpu": "100m", "memory": "100Mi"});
    let pod = pause_pod(
        ctx,
        "pod-qos-class",
        json!({"name": "pod-qos-class"}),
        json!({"limits": r, "requests": r}),
    )?;
    ctx.create_pod(&pod).await?;
    let pod = ctx.api::<Pod>().get("pod-qos-class").await?;
    let qos = pod.status.and_then(|s| s.qos_class);
    must_eq!(qos.as_deref(), Some("Guaranteed"), "status.qosClass");
    Ok(())
}

/// Pods, patch status: a merge patch of /status setting message, reason and an annotation MUST
/// succeed and the returned pod MUST carry all three.
async fn patch_pod_status(ctx: &Ctx) -> CaseResult {
    let pod = pause_pod(ctx, "pod-patch-status", json!({}), Value::Null)?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("pod-patch-status").await?;
    let patch = json!({
        "metadata": {"annotations": {"patchedstatus": "true"}},
        "status": {"message": "Patched by e2e test", "reason": "E2E"},
    });
    let patched = ctx
        .api::<Pod>()
        .patch_status(
            "pod-patch-status",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let status = patched.status.clone().unwrap_or_default();
    must_eq!(
        status.message.as_deref(),
        Some("Patched by e2e test"),
        "status.message"
    );
    must_eq!(status.reason.as_deref(), Some("E2E"), "status.reason");
    let annotation = patched
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("patchedstatus"))
        .cloned();
    must_eq!(
        annotation.as_deref(),
        Some("true"),
        "the patchedstatus annotation"
    );
    Ok(())
}

/// Wait until the pod satisfies `ok`.
async fn wait_pod(
    ctx: &Ctx,
    name: &str,
    what: &str,
    timeout: Duration,
    ok: fn(&Pod) -> bool,
) -> CaseResult<Pod> {
    let pods = ctx.api::<Pod>();
    ctx.wait(&format!("pod {name}: {what}"), timeout, || async {
        let p = pods.get(name).await?;
        Ok(if ok(&p) {
            Ok(p)
        } else {
            Err(describe_status(&p))
        })
    })
    .await
}

/// Pods, lifecycle and PodStatus: a pod with a static label MUST be created and run ready; patching
/// its labels MUST succeed and show; replacing its status (Ready and ContainersReady True) MUST
/// succeed and show; deleting it MUST succeed and it MUST then be gone from a list by its label.
/// (Upstream follows these steps with a watch; here each result is read back.)
async fn pod_lifecycle(ctx: &Ctx) -> CaseResult {
    let name = "pod-test";
    let pod = pause_pod(ctx, name, json!({"test-pod-static": "true"}), Value::Null)?;
    ctx.create_pod(&pod).await?;
    let pods = ctx.api::<Pod>();
    ctx.wait_ready(name).await?;
    let patch = json!({"metadata": {"labels": {"test-pod": "patched"}}});
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_pod(ctx, name, "label test-pod=patched", SHORT, |p| {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("test-pod").map(String::as_str) == Some("patched"))
    })
    .await?;
    let mut update = pods.get_status(name).await?;
    let mut replaced = 0;
    for c in update
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .into_iter()
        .flatten()
    {
        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
            c.status = "True".into();
            replaced += 1;
        }
    }
    must_eq!(
        replaced,
        2,
        "Ready and ContainersReady conditions in the status"
    );
    let updated = pods
        .replace_status(name, &PostParams::default(), &update)
        .await?;
    for t in ["Ready", "ContainersReady"] {
        must_eq!(
            condition(&updated, t).as_deref(),
            Some("True"),
            "{t} after the status update"
        );
    }
    delete_and_wait_gone(ctx, name, 1).await?;
    let left = pods
        .list(&crate::ctx::by_label("test-pod-static", "true"))
        .await?;
    must!(
        left.items.is_empty(),
        "pods with test-pod-static=true remain after the delete"
    );
    Ok(())
}

/// Security Context, privileged false: `ip link add` in an unprivileged container MUST fail with
/// "Operation not permitted".
async fn unprivileged(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(
        ctx,
        "busybox-privileged-false",
        "Never",
        "ip link add dummy0 type dummy || true",
        json!({"securityContext": {"privileged": false}}),
    )?;
    ctx.expect_output(&pod, "c", &["Operation not permitted"])
        .await?;
    Ok(())
}

/// Security Context, allowPrivilegeEscalation false (uid 1000): the container MUST NOT be able to gain
/// privileges. Upstream runs its `nonewprivs` image (a setuid binary printing its effective uid, which
/// must stay 1000); kiln has no such image, so the container reads the kernel's no_new_privs flag of
/// its process, which is what makes every setuid exec keep uid 1000: it MUST be 1, and the uid 1000.
async fn no_privilege_escalation(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(
        ctx,
        "alpine-nnp-false",
        "Never",
        "id -u; grep NoNewPrivs /proc/self/status",
        json!({"securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": false}}),
    )?;
    let log = ctx.expect_output(&pod, "c", &["1000"]).await?;
    let nnp = log
        .lines()
        .find_map(|l| l.strip_prefix("NoNewPrivs:"))
        .map(str::trim);
    must_eq!(nnp, Some("1"), "NoNewPrivs of the container's process");
    Ok(())
}

/// Sysctls, supported: a pod setting the safe sysctl kernel.shm_rmid_forced=1 MUST run to success and
/// `sysctl kernel.shm_rmid_forced` in it MUST print the value 1.
async fn sysctls_supported(ctx: &Ctx) -> CaseResult {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "sysctl-pod"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]},
            "containers": [{"name": "test-container", "image": ctx.images().busybox(),
                            "command": ["/bin/sysctl", "kernel.shm_rmid_forced"]}],
        },
    }))?;
    ctx.expect_output(&pod, "test-container", &["kernel.shm_rmid_forced = 1"])
        .await?;
    Ok(())
}

/// Sysctls, invalid: creating a pod with sysctls "foo-" and "bar.." (invalid names) and the valid
/// kernel.shmmax and safe-and-unsafe MUST be rejected, naming the two invalid ones and only them.
async fn sysctls_invalid(ctx: &Ctx) -> CaseResult {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "sysctl-invalid"},
        "spec": {
            "securityContext": {"sysctls": [
                {"name": "foo-", "value": "bar"},
                {"name": "kernel.shmmax", "value": "100000000"},
                {"name": "safe-and-unsafe", "value": "100000000"},
                {"name": "bar..", "value": "42"},
            ]},
            "containers": [{"name": "test-container", "image": ctx.images().busybox()}],
        },
    }))?;
    let err = match ctx.api::<Pod>().create(&PostParams::default(), &pod).await {
        Ok(_) => {
            return Err(CaseError::Failed(
                "a pod with invalid sysctls was created".into(),
            ))
        }
        Err(e) => e.to_string(),
    };
    for bad in ["foo-", "bar.."] {
        must!(
            err.contains(&format!("Invalid value: \"{bad}\"")),
            "the error does not name {bad:?}: {err}"
        );
    }
    for good in ["safe-and-unsafe", "kernel.shmmax"] {
        must!(
            !err.contains(good),
            "the error names the valid {good:?}: {err}"
        );
    }
    Ok(())
}

/// Upstream's var-expansion pod: busybox `dapi-container` with the env, an emptyDir `workdir1` and
/// the mounts, restartPolicy Never.
fn expansion_pod(
    ctx: &Ctx,
    name: &str,
    script: Option<&str>,
    env: Value,
    mounts: Value,
    annotations: Value,
) -> CaseResult<Pod> {
    let mut c = json!({"name": "dapi-container", "image": ctx.images().busybox(),
                       "env": env, "volumeMounts": mounts});
    if let Some(s) = script {
        c["command"] = json!(["sh", "-c", s]);
    }
    from_json(json!({
        "metadata": {"name": name, "labels": {"name": name}, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [c],
            "volumes": [{"name": "workdir1", "emptyDir": {}}],
        },
    }))
}

/// Variable Expansion, subpath: subPathExpr $(POD_NAME) (the pod's name) MUST create that directory
/// in the volume: `test -d` on it through a second mount prints 0.
async fn subpath_substituted(ctx: &Ctx) -> CaseResult {
    let name = "var-expansion-subpath";
    let pod = expansion_pod(
        ctx,
        name,
        Some(&format!("test -d /testcontainer/{name};echo $?")),
        json!([{"name": "POD_NAME", "value": name}]),
        json!([
            {"name": "workdir1", "mountPath": "/logscontainer", "subPathExpr": "$(POD_NAME)"},
            {"name": "workdir1", "mountPath": "/testcontainer"},
        ]),
        json!({}),
    )?;
    let log = ctx.expect_output(&pod, "dapi-container", &["0"]).await?;
    must_eq!(log.trim(), "0", "the output of test -d");
    Ok(())
}

/// The container's waiting reason and message, if it waits.
fn waiting(pod: &Pod) -> Option<(String, String)> {
    let w = statuses(pod, false).first()?.state.clone()?.waiting?;
    Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
}

/// Upstream's testPodFailSubpath: the container MUST fail to be created with
/// CreateContainerConfigError (within 2 min), and never run; the pod is then deleted.
async fn subpath_fails(ctx: &Ctx, value: &str) -> CaseResult {
    let name = "var-expansion-fail";
    let pod = expansion_pod(
        ctx,
        name,
        None,
        json!([{"name": "POD_NAME", "value": value}]),
        json!([{"name": "workdir1", "mountPath": "/logscontainer", "subPathExpr": "$(POD_NAME)"}]),
        json!({}),
    )?;
    ctx.create_pod(&pod).await?;
    wait_config_error(ctx, name).await?;
    delete_and_wait_gone(ctx, name, 30).await
}

/// Wait for the container to wait with CreateContainerConfigError; it MUST not run meanwhile.
async fn wait_config_error(ctx: &Ctx, name: &str) -> CaseResult {
    let pods = ctx.api::<Pod>();
    ctx.wait(
        &format!("{name}: CreateContainerConfigError"),
        SHORT,
        || async {
            let p = pods.get(name).await?;
            if phase(&p) == "Running" || phase(&p) == "Succeeded" {
                return Err(CaseError::Failed(format!(
                    "the container ran though its subpath is invalid: {}",
                    describe_status(&p)
                )));
            }
            Ok(match waiting(&p) {
                // The error must be the expansion's, not a kubelet refusing every subPathExpr.
                Some((_, m)) if m.contains("not supported") => {
                    return Err(CaseError::Failed(format!(
                        "the kubelet does not support subPathExpr: {m}"
                    )))
                }
                Some((r, _)) if r == "CreateContainerConfigError" => Ok(()),
                _ => Err(describe_status(&p)),
            })
        },
    )
    .await
}

/// Variable Expansion, subpath with backticks (the value ".."): the container MUST NOT start
/// (CreateContainerConfigError).
async fn subpath_dotdot_fails(ctx: &Ctx) -> CaseResult {
    subpath_fails(ctx, "..").await
}

/// Variable Expansion, subpath with an absolute path ("/tmp"): the container MUST NOT start
/// (CreateContainerConfigError).
async fn subpath_absolute_fails(ctx: &Ctx) -> CaseResult {
    subpath_fails(ctx, "/tmp").await
}

/// The pod of the last two entries: subPathExpr $(ANNOTATION)/$(POD_NAME), ANNOTATION from the
/// annotation `mysubpath`, and the whole volume at /volume_mount.
fn annotated_subpath_pod(ctx: &Ctx, name: &str, annotations: Value) -> CaseResult<Pod> {
    expansion_pod(
        ctx,
        name,
        Some("tail -f /dev/null"),
        json!([
            {"name": "POD_NAME", "value": "foo"},
            {"name": "ANNOTATION", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                "fieldPath": "metadata.annotations['mysubpath']"}}},
        ]),
        json!([
            {"name": "workdir1", "mountPath": "/subpath_mount", "subPathExpr": "$(ANNOTATION)/$(POD_NAME)"},
            {"name": "workdir1", "mountPath": "/volume_mount"},
        ]),
        annotations,
    )
}

async fn set_annotation(ctx: &Ctx, name: &str, value: &str) -> CaseResult {
    let patch = json!({"metadata": {"annotations": {"mysubpath": value}}});
    ctx.api::<Pod>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Variable Expansion, failing subpath fixed later: without the annotation the expansion is absolute
/// ("/foo") and the pod MUST NOT run (upstream waits 2 min for it not to; here until the kubelet
/// reports CreateContainerConfigError); once the annotation mysubpath=mypath is added the pod MUST
/// run (within 2 min), and MUST then be deletable.
async fn subpath_fixed_later(ctx: &Ctx) -> CaseResult {
    let name = "var-expansion-fixed";
    let pod = annotated_subpath_pod(ctx, name, json!({"notmysubpath": "mypath"}))?;
    ctx.create_pod(&pod).await?;
    wait_config_error(ctx, name).await?;
    set_annotation(ctx, name, "mypath").await?;
    wait_pod(ctx, name, "Running", SHORT, |p| phase(p) == "Running").await?;
    delete_and_wait_gone(ctx, name, 30).await
}

/// Variable Expansion, subpath writes: with mysubpath=mypath the pod MUST run; a file written at
/// /volume_mount/mypath/foo MUST show in /subpath_mount; changing the annotation MUST leave the pod
/// running; the pod MUST be deletable.
async fn subpath_writes(ctx: &Ctx) -> CaseResult {
    let name = "var-expansion-writes";
    let pod = annotated_subpath_pod(ctx, name, json!({"mysubpath": "mypath"}))?;
    ctx.create_pod(&pod).await?;
    wait_pod(ctx, name, "Running", SHORT, |p| phase(p) == "Running").await?;
    let sh = ["/bin/sh", "-c"];
    ctx.exec(
        name,
        "dapi-container",
        &[sh[0], sh[1], "touch /volume_mount/mypath/foo/test.log"],
    )
    .await
    .map_err(|e| CaseError::Failed(format!("writing to the subpath: {e}")))?;
    ctx.exec(
        name,
        "dapi-container",
        &[sh[0], sh[1], "test -f /subpath_mount/test.log"],
    )
    .await
    .map_err(|e| CaseError::Failed(format!("the file is not in the subpath mount: {e}")))?;
    set_annotation(ctx, name, "mynewpath").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_pod(ctx, name, "Running", SHORT, |p| phase(p) == "Running").await?;
    delete_and_wait_gone(ctx, name, 30).await
}
