//! sig-node's Ephemeral Containers entries (test/e2e/common/node/ephemeral_containers.go): an
//! ephemeral container added to a running pod through `pods/ephemeralcontainers` runs (exec and logs
//! reach it), and the subresource lists what was added and takes more through an update. Each case
//! restates the entry's MUSTs in its doc comment.

use std::time::Duration;

use k8s_openapi::api::core::v1::{EphemeralContainer, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{describe_status, from_json, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Ephemeral Containers [NodeConformance] will start an ephemeral container in an existing pod [Conformance]",
        "ephemeral-containers-test",
        starts_ephemeral_container
    ),
    case!(
        "[sig-node] Ephemeral Containers [NodeConformance] should update the ephemeral containers in an existing pod [Conformance]",
        "ephemeral-containers-test",
        updates_ephemeral_containers
    ),
];

const POD: &str = "ephemeral-containers-target-pod";
const DEBUGGER: &str = "debugger";

/// Upstream's AddEphemeralContainerSync waits a minute for the container to run.
const EPHEMERAL_START: Duration = Duration::from_secs(60);

/// The target pod (busybox sleeping), created and running, at generation 1.
async fn target_pod(ctx: &Ctx) -> CaseResult<Pod> {
    let pod: Pod = from_json(json!({
        "metadata": {"name": POD},
        "spec": {"containers": [{
            "name": "test-container-1",
            "image": ctx.images().busybox(),
            "command": ["/bin/sleep"],
            "args": ["10000"],
        }]}
    }))?;
    ctx.create_pod(&pod).await?;
    let pod = ctx.wait_running(POD).await?;
    must_eq!(
        pod.metadata.generation,
        Some(1),
        "the new pod's metadata.generation"
    );
    Ok(pod)
}

/// Upstream's AddEphemeralContainerSync: a strategic merge patch of `pods/ephemeralcontainers`
/// adding `ec` (as kubectl debug sends it), then a wait for it to run.
async fn add_ephemeral_sync(ctx: &Ctx, ec: serde_json::Value) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    let name = ec["name"].as_str().unwrap_or_default().to_string();
    let patch = json!({"spec": {"ephemeralContainers": [ec]}});
    pods.patch_ephemeral_containers(POD, &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    wait_ephemeral_running(ctx, &name).await
}

/// Upstream's WaitForContainerRunning for an ephemeral container: its status shows it running.
async fn wait_ephemeral_running(ctx: &Ctx, name: &str) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    ctx.wait(
        &format!("ephemeral container {name} of {POD} running"),
        EPHEMERAL_START,
        || async {
            let pod = pods.get(POD).await?;
            let status = pod
                .status
                .as_ref()
                .and_then(|s| s.ephemeral_container_statuses.as_ref())
                .and_then(|l| l.iter().find(|c| c.name == name));
            match status.and_then(|c| c.state.as_ref()) {
                Some(s) if s.running.is_some() => Ok(Ok(())),
                Some(s) if s.terminated.is_some() => Err(CaseError::Failed(format!(
                    "ephemeral container {name} ended: {}",
                    to_json(s)
                ))),
                Some(s) => Ok(Err(to_json(s).to_string())),
                None => Ok(Err(format!(
                    "no ephemeral container status yet ({})",
                    describe_status(&pod)
                ))),
            }
        },
    )
    .await
}

/// The debugger both entries add: busybox echoing `polo`, with stdin and a TTY.
fn debugger(ctx: &Ctx) -> serde_json::Value {
    json!({
        "name": DEBUGGER,
        "image": ctx.images().busybox(),
        "command": ["/bin/sh", "-c", "while true; do echo polo; sleep 2; done"],
        "stdin": true,
        "tty": true,
    })
}

/// Adds the debugger and checks what both entries check: the pod's generation is 2, an exec in
/// the ephemeral container answers and its log holds its output.
async fn add_and_check_debugger(ctx: &Ctx) -> CaseResult {
    target_pod(ctx).await?;
    add_ephemeral_sync(ctx, debugger(ctx)).await?;
    let pod = ctx.api::<Pod>().get(POD).await?;
    must_eq!(
        pod.metadata.generation,
        Some(2),
        "metadata.generation after an ephemeral container was added"
    );
    let out = ctx.exec(POD, DEBUGGER, &["/bin/echo", "marco"]).await?;
    must!(
        out.contains("marco"),
        "exec in the ephemeral container printed {out:?}, not marco"
    );
    let log = ctx
        .wait(
            "the ephemeral container's log to hold polo",
            Duration::from_secs(30),
            || async {
                let log = ctx.logs(POD, DEBUGGER).await?;
                Ok(if log.contains("polo") {
                    Ok(log)
                } else {
                    Err(log)
                })
            },
        )
        .await?;
    must!(log.contains("polo"), "log of {DEBUGGER}: {log:?}");
    Ok(())
}

/// Ephemeral Container Creation: adding an ephemeral container to pod.spec MUST result in the
/// container running.
async fn starts_ephemeral_container(ctx: &Ctx) -> CaseResult {
    add_and_check_debugger(ctx).await
}

/// The ephemeral containers of the pod as `pods/ephemeralcontainers` returns them.
async fn ephemeral_names(ctx: &Ctx) -> CaseResult<Vec<String>> {
    let pod = ctx.api::<Pod>().get_ephemeral_containers(POD).await?;
    Ok(pod
        .spec
        .and_then(|s| s.ephemeral_containers)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.name)
        .collect())
}

/// Ephemeral Container, update ephemeral containers: adding an ephemeral container to pod.spec
/// MUST result in the container running. There MUST now be only one ephemeral container found.
/// Updating the pod with another ephemeral container MUST succeed. There MUST now be two ephemeral
/// containers found.
async fn updates_ephemeral_containers(ctx: &Ctx) -> CaseResult {
    add_and_check_debugger(ctx).await?;
    let names = ephemeral_names(ctx).await?;
    must_eq!(
        names.len(),
        1,
        "ephemeral containers after one was added ({names:?})"
    );

    let pods: Api<Pod> = ctx.api();
    let second: EphemeralContainer = from_json(json!({
        "name": "debugger2",
        "image": ctx.images().agnhost(),
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePolicy": "File",
    }))?;
    // retry.RetryOnConflict: read, append, update the subresource.
    let mut attempts = 0;
    loop {
        let mut pod = pods.get(POD).await?;
        if let Some(spec) = pod.spec.as_mut() {
            spec.ephemeral_containers
                .get_or_insert_with(Vec::new)
                .push(second.clone());
        }
        match pods
            .replace_ephemeral_containers(POD, &PostParams::default(), &pod)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => attempts += 1,
            Err(e) => return Err(e.into()),
        }
    }
    let names = ephemeral_names(ctx).await?;
    must_eq!(
        names.len(),
        2,
        "ephemeral containers after a second one was added by update ({names:?})"
    );
    Ok(())
}
