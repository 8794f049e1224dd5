//! sig-node entries about how containers run and end: termination messages, init containers, failing
//! and read-only containers, security contexts, empty-key ConfigMaps and Secrets, the pod UID. Each case
//! restates the entry's MUSTs in its doc comment.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod, Secret};
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{describe_status, from_json, phase, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Container Runtime blackbox test on terminated container should report termination message if TerminationMessagePath is set as non-root user and at a non-default path [NodeConformance] [Conformance]",
        "container-runtime",
        termination_message_custom_path
    ),
    case!(
        "[sig-node] Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance] [Conformance]",
        "container-runtime",
        termination_message_from_logs
    ),
    case!(
        "[sig-node] Container Runtime blackbox test on terminated container should report termination message as empty when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance] [Conformance]",
        "container-runtime",
        termination_message_empty
    ),
    case!(
        "[sig-node] Container Runtime blackbox test on terminated container should report termination message from file when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance] [Conformance]",
        "container-runtime",
        termination_message_from_file
    ),
    case!(
        "[sig-node] InitContainer [NodeConformance] should invoke init containers on a RestartNever pod [Conformance]",
        "init-container",
        init_restart_never
    ),
    case!(
        "[sig-node] InitContainer [NodeConformance] should invoke init containers on a RestartAlways pod [Conformance]",
        "init-container",
        init_restart_always
    ),
    case!(
        "[sig-node] InitContainer [NodeConformance] should not start app containers if init containers fail on a RestartAlways pod [Conformance]",
        "init-container",
        init_fails_restart_always
    ),
    case!(
        "[sig-node] InitContainer [NodeConformance] should not start app containers and fail the pod if init containers fail on a RestartNever pod [Conformance]",
        "init-container",
        init_fails_restart_never
    ),
    case!(
        "[sig-node] Kubelet when scheduling a busybox command that always fails in a pod should have an terminated reason [NodeConformance] [Conformance]",
        "kubelet-test",
        always_fails_terminated_reason
    ),
    case!(
        "[sig-node] Kubelet when scheduling a busybox command that always fails in a pod should be possible to delete [NodeConformance] [Conformance]",
        "kubelet-test",
        always_fails_deletable
    ),
    case!(
        "[sig-node] Kubelet when scheduling a read only busybox container should not write to root filesystem [LinuxOnly] [NodeConformance] [Conformance]",
        "kubelet-test",
        read_only_rootfs
    ),
    case!(
        "[sig-node] Security Context When creating a pod with readOnlyRootFilesystem should run the container with writable rootfs when readOnlyRootFilesystem=false [NodeConformance] [Conformance]",
        "security-context-test",
        writable_rootfs
    ),
    case!(
        "[sig-node] Security Context When creating a container with runAsUser should run the container with uid 65534 [LinuxOnly] [NodeConformance] [Conformance]",
        "security-context-test",
        run_as_user_65534
    ),
    case!(
        "[sig-node] Security Context should support container.SecurityContext.RunAsUser And container.SecurityContext.RunAsGroup [LinuxOnly] [Conformance]",
        "security-context",
        container_run_as_user_and_group
    ),
    case!(
        "[sig-node] Security Context should support pod.Spec.SecurityContext.RunAsUser And pod.Spec.SecurityContext.RunAsGroup [LinuxOnly] [Conformance]",
        "security-context",
        pod_run_as_user_and_group
    ),
    case!(
        "[sig-node] ConfigMap should fail to create ConfigMap with empty key [Conformance]",
        "configmap",
        configmap_empty_key
    ),
    case!(
        "[sig-node] Secrets should fail to create secret due to empty secret key [Conformance]",
        "secrets",
        secret_empty_key
    ),
    case!(
        "[sig-node] Downward API should provide pod UID as env vars [NodeConformance] [Conformance]",
        "downward-api",
        downward_pod_uid
    ),
];

/// A one-container busybox pod running `sh -c <script>`; `extra` is merged into the container.
pub(super) fn busybox_pod(
    ctx: &Ctx,
    name: &str,
    restart: &str,
    script: &str,
    extra: serde_json::Value,
) -> CaseResult<Pod> {
    let mut container = json!({
        "name": "c",
        "image": ctx.images().busybox(),
        "command": ["/bin/sh", "-c", script],
    });
    if let (Some(c), Some(e)) = (container.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    from_json(json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": restart, "containers": [container]},
    }))
}

/// Wait until the pod ends (Succeeded or Failed) and return it.
pub(super) async fn wait_ended(ctx: &Ctx, name: &str) -> CaseResult<Pod> {
    let pods = ctx.api::<Pod>();
    ctx.wait(&format!("pod {name} to end"), POD_START, || async {
        let pod = pods.get(name).await?;
        Ok(match phase(&pod) {
            "Succeeded" | "Failed" => Ok(pod),
            _ => Err(describe_status(&pod)),
        })
    })
    .await
}

pub(super) fn statuses(pod: &Pod, init: bool) -> Vec<ContainerStatus> {
    let s = pod.status.clone().unwrap_or_default();
    if init {
        s.init_container_statuses.unwrap_or_default()
    } else {
        s.container_statuses.unwrap_or_default()
    }
}

pub(super) fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// Has the container ever run (running now, or ended)?
pub(super) fn started(s: &ContainerStatus) -> bool {
    s.state
        .as_ref()
        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
}

/// The terminated exit code of a container status, if it has ended.
fn exit_code(s: &ContainerStatus) -> Option<i32> {
    s.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

/// Run a termination-message pod to its end: its phase MUST be `want_phase` and the container's
/// terminated message MUST be exactly `want_message`.
async fn termination_message(
    ctx: &Ctx,
    script: &str,
    extra: serde_json::Value,
    want_phase: &str,
    want_message: &str,
) -> CaseResult {
    let name = "termination-message-container";
    let pod = busybox_pod(ctx, name, "Never", script, extra)?;
    ctx.create_pod(&pod).await?;
    let pod = wait_ended(ctx, name).await?;
    must_eq!(phase(&pod), want_phase, "the pod's phase");
    let st = statuses(&pod, false);
    let message = st
        .first()
        .and_then(|s| s.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.message.clone().unwrap_or_default());
    must_eq!(
        message.as_deref(),
        Some(want_message),
        "the terminated state's message"
    );
    Ok(())
}

/// Container Runtime, TerminationMessagePath: a container running as a non-root user (1000) that writes
/// DONE to a non-default terminationMessagePath MUST succeed with termination message DONE.
async fn termination_message_custom_path(ctx: &Ctx) -> CaseResult {
    termination_message(
        ctx,
        "/bin/echo -n DONE > /dev/termination-custom-log",
        json!({"terminationMessagePath": "/dev/termination-custom-log",
               "securityContext": {"runAsUser": 1000}}),
        "Succeeded",
        "DONE",
    )
    .await
}

/// Container Runtime, TerminationMessagePolicy FallbackToLogsOnError: a failing container that logged
/// DONE MUST fail with termination message DONE (taken from its log).
async fn termination_message_from_logs(ctx: &Ctx) -> CaseResult {
    termination_message(
        ctx,
        "/bin/echo -n DONE; /bin/false",
        json!({"terminationMessagePolicy": "FallbackToLogsOnError"}),
        "Failed",
        "DONE",
    )
    .await
}

/// Container Runtime, FallbackToLogsOnError and success: a succeeding container's termination message
/// MUST be empty (the log is used only on error).
async fn termination_message_empty(ctx: &Ctx) -> CaseResult {
    termination_message(
        ctx,
        "/bin/echo -n DONE; /bin/true",
        json!({"terminationMessagePolicy": "FallbackToLogsOnError"}),
        "Succeeded",
        "",
    )
    .await
}

/// Container Runtime, FallbackToLogsOnError with a file: a succeeding container that wrote OK to
/// /dev/termination-log MUST have termination message OK.
async fn termination_message_from_file(ctx: &Ctx) -> CaseResult {
    termination_message(
        ctx,
        "/bin/echo -n OK > /dev/termination-log; /bin/echo DONE; /bin/true",
        json!({"terminationMessagePolicy": "FallbackToLogsOnError"}),
        "Succeeded",
        "OK",
    )
    .await
}

/// A pod with init containers init1, init2 and app container run1.
fn init_pod(
    ctx: &Ctx,
    name: &str,
    restart: &str,
    init: [&str; 2],
    run1: serde_json::Value,
) -> CaseResult<Pod> {
    let bb = ctx.images().busybox();
    from_json(json!({
        "metadata": {"name": name, "labels": {"name": "foo"}},
        "spec": {
            "restartPolicy": restart,
            "initContainers": [
                {"name": "init1", "image": bb, "command": [init[0]]},
                {"name": "init2", "image": bb, "command": [init[1]]},
            ],
            "containers": [run1],
        },
    }))
}

fn init_statuses_completed(pod: &Pod) -> CaseResult {
    let st = statuses(pod, true);
    must_eq!(st.len(), 2, "init container statuses");
    for s in &st {
        must_eq!(
            exit_code(s),
            Some(0),
            "init container {} terminated exit code",
            s.name
        );
    }
    Ok(())
}

/// InitContainer, RestartNever: two init containers and the app container, all /bin/true, MUST each run
/// to completion in order; the pod MUST succeed with Initialized True.
async fn init_restart_never(ctx: &Ctx) -> CaseResult {
    let bb = ctx.images().busybox();
    let pod = init_pod(
        ctx,
        "pod-init-never",
        "Never",
        ["/bin/true", "/bin/true"],
        json!({"name": "run1", "image": bb, "command": ["/bin/true"]}),
    )?;
    ctx.create_pod(&pod).await?;
    let pod = ctx.wait_succeeded("pod-init-never").await?;
    must_eq!(
        condition(&pod, "Initialized").as_deref(),
        Some("True"),
        "the Initialized condition"
    );
    init_statuses_completed(&pod)
}

/// InitContainer, RestartAlways: the init containers MUST complete and the app container (pause) MUST
/// then run; Initialized True.
async fn init_restart_always(ctx: &Ctx) -> CaseResult {
    let pod = init_pod(
        ctx,
        "pod-init-always",
        "Always",
        ["/bin/true", "/bin/true"],
        json!({"name": "run1", "image": ctx.images().pause()}),
    )?;
    ctx.create_pod(&pod).await?;
    let pod = ctx.wait_running("pod-init-always").await?;
    must_eq!(
        condition(&pod, "Initialized").as_deref(),
        Some("True"),
        "the Initialized condition"
    );
    init_statuses_completed(&pod)
}

/// InitContainer, RestartAlways, a failing init container: init1 (/bin/false) MUST be restarted (three
/// times here) while init2 and the app container never start; the pod MUST stay Pending with
/// Initialized False.
async fn init_fails_restart_always(ctx: &Ctx) -> CaseResult {
    let pod = init_pod(
        ctx,
        "pod-init-fail-always",
        "Always",
        ["/bin/false", "/bin/true"],
        json!({"name": "run1", "image": ctx.images().pause()}),
    )?;
    ctx.create_pod(&pod).await?;
    let pods = ctx.api::<Pod>();
    // Back-off 10 s, 20 s, 40 s: three restarts take a bit over a minute.
    let pod = ctx
        .wait(
            "init1 restarted 3 times",
            Duration::from_secs(240),
            || async {
                let pod = pods.get("pod-init-fail-always").await?;
                if phase(&pod) != "Pending" {
                    return Err(CaseError::Failed(format!(
                        "the pod left Pending: {}",
                        describe_status(&pod)
                    )));
                }
                let st = statuses(&pod, false);
                if st.iter().any(started) {
                    return Err(CaseError::Failed(format!(
                        "run1 started though init1 fails: {}",
                        describe_status(&pod)
                    )));
                }
                let init = statuses(&pod, true);
                let restarts = init.first().map(|s| s.restart_count).unwrap_or(0);
                Ok(if restarts >= 3 {
                    Ok(pod)
                } else {
                    Err(describe_status(&pod))
                })
            },
        )
        .await?;
    must_eq!(
        condition(&pod, "Initialized").as_deref(),
        Some("False"),
        "the Initialized condition"
    );
    let init = statuses(&pod, true);
    let init2_started = init.get(1).is_some_and(started);
    must!(
        !init2_started,
        "init2 started though init1 never succeeded: {}",
        describe_status(&pod)
    );
    Ok(())
}

/// InitContainer, RestartNever, a failing init container: init2 (/bin/false) fails once; the pod MUST
/// fail, the app container MUST never start, Initialized False.
async fn init_fails_restart_never(ctx: &Ctx) -> CaseResult {
    let bb = ctx.images().busybox();
    let pod = init_pod(
        ctx,
        "pod-init-fail-never",
        "Never",
        ["/bin/true", "/bin/false"],
        json!({"name": "run1", "image": bb, "command": ["/bin/true"]}),
    )?;
    ctx.create_pod(&pod).await?;
    let pod = wait_ended(ctx, "pod-init-fail-never").await?;
    must_eq!(phase(&pod), "Failed", "the pod's phase");
    must_eq!(
        condition(&pod, "Initialized").as_deref(),
        Some("False"),
        "the Initialized condition"
    );
    let init = statuses(&pod, true);
    must_eq!(
        init.first().and_then(exit_code),
        Some(0),
        "init1's exit code"
    );
    must!(
        init.get(1).and_then(exit_code).is_some_and(|c| c != 0),
        "init2 should have failed: {}",
        describe_status(&pod)
    );
    let run1_started = statuses(&pod, false).iter().any(started);
    must!(
        !run1_started,
        "run1 started though init2 failed: {}",
        describe_status(&pod)
    );
    Ok(())
}

/// Kubelet, failed pod, terminated reason: a container running /bin/false MUST be seen terminated with
/// a non-empty reason.
async fn always_fails_terminated_reason(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(ctx, "bin-false", "Always", "/bin/false", json!({}))?;
    ctx.create_pod(&pod).await?;
    let pods = ctx.api::<Pod>();
    ctx.wait(
        "a terminated state with a reason",
        Duration::from_secs(60),
        || async {
            let pod = pods.get("bin-false").await?;
            let st = statuses(&pod, false);
            let reason = st
                .first()
                .and_then(|s| s.state.as_ref())
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.reason.clone())
                .filter(|r| !r.is_empty());
            Ok(reason.ok_or_else(|| describe_status(&pod)))
        },
    )
    .await?;
    Ok(())
}

/// Kubelet, failed pod, delete: a pod whose container always fails MUST be deletable.
async fn always_fails_deletable(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(ctx, "bin-false-delete", "Always", "/bin/false", json!({}))?;
    ctx.create_pod(&pod).await?;
    ctx.api::<Pod>()
        .delete("bin-false-delete", &DeleteParams::default())
        .await?;
    Ok(())
}

/// Kubelet, pod with read only root file system: writing to / MUST fail; the log says so.
async fn read_only_rootfs(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(
        ctx,
        "busybox-readonly-fs",
        "Always",
        "/bin/echo test > /file; sleep 240",
        json!({"securityContext": {"readOnlyRootFilesystem": true}}),
    )?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("busybox-readonly-fs").await?;
    ctx.wait(
        "the log to report a read-only file system",
        Duration::from_secs(60),
        || async {
            let log = ctx.logs("busybox-readonly-fs", "c").await?;
            Ok(if log.contains("Read-only file system") {
                Ok(())
            } else {
                Err(format!("{log:?}"))
            })
        },
    )
    .await
}

/// Security Context, readOnlyRootFilesystem=false: the container MUST be able to write to /.
async fn writable_rootfs(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(
        ctx,
        "busybox-readonly-false",
        "Never",
        "touch /checkfile",
        json!({"securityContext": {"readOnlyRootFilesystem": false}}),
    )?;
    ctx.create_pod(&pod).await?;
    ctx.wait_succeeded("busybox-readonly-false").await?;
    Ok(())
}

/// Security Context, runAsUser=65534: `id -u` in the container MUST print 65534.
async fn run_as_user_65534(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(
        ctx,
        "busybox-user-65534",
        "Never",
        "id -u",
        json!({"securityContext": {"runAsUser": 65534}}),
    )?;
    ctx.expect_output(&pod, "c", &["65534"]).await?;
    Ok(())
}

/// Security Context, container runAsUser 1001 and runAsGroup 2002: `id -u` and `id -g` MUST print them.
async fn container_run_as_user_and_group(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(
        ctx,
        "security-context-container",
        "Never",
        "id -u; id -g",
        json!({"securityContext": {"runAsUser": 1001, "runAsGroup": 2002}}),
    )?;
    let log = ctx.expect_output(&pod, "c", &["1001", "2002"]).await?;
    must_eq!(log, "1001\n2002\n", "the output of id -u; id -g");
    Ok(())
}

/// Security Context, pod runAsUser 1001 and runAsGroup 2002: `id -u` and `id -g` MUST print them.
async fn pod_run_as_user_and_group(ctx: &Ctx) -> CaseResult {
    let mut pod = busybox_pod(
        ctx,
        "security-context-pod",
        "Never",
        "id -u; id -g",
        json!({}),
    )?;
    if let Some(spec) = pod.spec.as_mut() {
        spec.security_context = Some(from_json(json!({"runAsUser": 1001, "runAsGroup": 2002}))?);
    }
    let log = ctx.expect_output(&pod, "c", &["1001", "2002"]).await?;
    must_eq!(log, "1001\n2002\n", "the output of id -u; id -g");
    Ok(())
}

/// ConfigMap, with empty-key: creating a ConfigMap whose data has the key "" MUST fail.
async fn configmap_empty_key(ctx: &Ctx) -> CaseResult {
    let cm: ConfigMap = from_json(json!({
        "metadata": {"name": "configmap-test-emptykey"},
        "data": {"": "value-1"},
    }))?;
    let created = ctx
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await;
    must!(
        created.is_err(),
        "a ConfigMap with an empty key was created"
    );
    Ok(())
}

/// Secrets, with empty-key: creating a Secret whose data has the key "" MUST fail.
async fn secret_empty_key(ctx: &Ctx) -> CaseResult {
    let s: Secret = from_json(json!({
        "metadata": {"name": "secret-emptykey-test"},
        "data": {"": "dmFsdWUtMQ=="},
    }))?;
    let created = ctx.api::<Secret>().create(&PostParams::default(), &s).await;
    must!(created.is_err(), "a Secret with an empty key was created");
    Ok(())
}

/// DownwardAPI, environment for the pod UID: POD_UID MUST be the pod's metadata.uid.
async fn downward_pod_uid(ctx: &Ctx) -> CaseResult {
    let pod = busybox_pod(
        ctx,
        "downward-api-uid",
        "Never",
        "env",
        json!({"env": [{"name": "POD_UID",
                        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}}}]}),
    )?;
    let log = ctx.expect_output(&pod, "c", &["POD_UID="]).await?;
    let uid = ctx
        .api::<Pod>()
        .get("downward-api-uid")
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    must!(
        log.lines().any(|l| l == format!("POD_UID={uid}")),
        "POD_UID is not the pod's uid {uid}: {log}"
    );
    Ok(())
}
