//! sig-node entries about a container's life: liveness and readiness probes, lifecycle hooks, the
//! PreStop hook of a deleted pod, the image's default command and arguments, and the restart policies'
//! effect on a container that exits. Each case restates the entry's MUSTs in its doc comment.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::DeleteParams;
use serde_json::{json, Value};

use super::runtime::{busybox_pod, condition, started, statuses};
use super::{case, Case};
use crate::ctx::{describe_status, from_json, is_ready, phase, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Probing container should be restarted with a exec \"cat /tmp/health\" liveness probe [NodeConformance] [Conformance]",
        "container-probe",
        liveness_exec_restarted
    ),
    case!(
        "[sig-node] Probing container should *not* be restarted with a exec \"cat /tmp/health\" liveness probe [NodeConformance] [Conformance]",
        "container-probe",
        liveness_exec_kept
    ),
    case!(
        "[sig-node] Probing container should be restarted with a /healthz http liveness probe [NodeConformance] [Conformance]",
        "container-probe",
        liveness_http_restarted
    ),
    case!(
        "[sig-node] Probing container should *not* be restarted with a tcp:8080 liveness probe [NodeConformance] [Conformance]",
        "container-probe",
        liveness_tcp_kept
    ),
    case!(
        "[sig-node] Probing container should have monotonically increasing restart count [NodeConformance] [Conformance]",
        "container-probe",
        liveness_monotonic
    ),
    case!(
        "[sig-node] Probing container should *not* be restarted with a /healthz http liveness probe [NodeConformance] [Conformance]",
        "container-probe",
        liveness_http_kept
    ),
    case!(
        "[sig-node] Probing container should *not* be restarted with a GRPC liveness probe [NodeConformance] [Conformance]",
        "container-probe",
        liveness_grpc_kept
    ),
    case!(
        "[sig-node] Probing container should be restarted with a GRPC liveness probe [NodeConformance] [Conformance]",
        "container-probe",
        liveness_grpc_restarted
    ),
    case!(
        "[sig-node] Probing container with readiness probe should not be ready before initial delay and never restart [NodeConformance] [Conformance]",
        "container-probe",
        readiness_initial_delay
    ),
    case!(
        "[sig-node] Probing container with readiness probe that fails should never be ready and never restart [NodeConformance] [Conformance]",
        "container-probe",
        readiness_failing
    ),
    case!(
        "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook properly [NodeConformance] [Conformance]",
        "container-lifecycle-hook",
        hook_poststart_exec
    ),
    case!(
        "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop exec hook properly [NodeConformance] [Conformance]",
        "container-lifecycle-hook",
        hook_prestop_exec
    ),
    case!(
        "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly [NodeConformance] [Conformance]",
        "container-lifecycle-hook",
        hook_poststart_http
    ),
    case!(
        "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop http hook properly [NodeConformance] [Conformance]",
        "container-lifecycle-hook",
        hook_prestop_http
    ),
    case!(
        "[sig-node] PreStop should call prestop when killing a pod [Conformance]",
        "prestop",
        prestop_when_killing
    ),
    case!(
        "[sig-node] Containers should use the image defaults if command and args are blank [NodeConformance] [Conformance]",
        "containers",
        image_defaults
    ),
    case!(
        "[sig-node] Containers should be able to override the image's default arguments (container cmd) [NodeConformance] [Conformance]",
        "containers",
        override_arguments
    ),
    case!(
        "[sig-node] Containers should be able to override the image's default command (container entrypoint) [NodeConformance] [Conformance]",
        "containers",
        override_command
    ),
    case!(
        "[sig-node] Containers should be able to override the image's default command and arguments [NodeConformance] [Conformance]",
        "containers",
        override_command_and_arguments
    ),
    case!(
        "[sig-node] Container Runtime blackbox test when starting a container that exits should run with the expected status [NodeConformance] [Conformance]",
        "container-runtime",
        exits_with_expected_status
    ),
];

/// Upstream's defaultObservationTimeout: how long a liveness case watches the restart count.
const OBSERVE: Duration = Duration::from_secs(240);

/// The container of kiln's agnhost image: the binary as command, the subcommand and flags as args.
pub(super) fn agnhost(ctx: &Ctx, name: &str, args: &[&str]) -> Value {
    json!({"name": name, "image": ctx.images().agnhost(), "command": ["/agnhost"], "args": args})
}

/// Upstream's SetAffinity: a required node affinity on the node's name.
pub(super) fn on_node(node: &str) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]},
        ]}],
    }}})
}

/// The pods the probe entries use, as upstream's helpers build them.
#[derive(Clone, Copy)]
enum Shape {
    /// busyBoxPodSpec: busybox running `sh -c <script>`.
    Busybox(&'static str),
    /// livenessPodSpec: agnhost `liveness` (/healthz on 8080 healthy for 10 s, then 500).
    Liveness,
    /// testWebServerPodSpec: agnhost `test-webserver` on 80.
    Webserver,
    /// gRPCServerPodSpec: agnhost `grpc-health-checking` (gRPC health on 5000, HTTP on 8080).
    Grpc,
}

/// The probe pod of `shape` with the given liveness and readiness probes.
fn probe_pod(ctx: &Ctx, shape: Shape, liveness: Value, readiness: Value) -> CaseResult<Pod> {
    let (name, mut container) = match shape {
        Shape::Busybox(script) => (
            "busybox-probe",
            json!({"name": "busybox", "image": ctx.images().busybox(),
                   "command": ["/bin/sh", "-c", script]}),
        ),
        Shape::Liveness => (
            "liveness-probe",
            agnhost(ctx, "agnhost-container", &["liveness"]),
        ),
        Shape::Webserver => {
            let mut c = agnhost(ctx, "test-webserver", &["test-webserver"]);
            c["ports"] = json!([{"containerPort": 80}]);
            ("test-webserver", c)
        }
        Shape::Grpc => (
            "test-grpc",
            json!({"name": "agnhost", "image": ctx.images().agnhost(),
                   "command": ["/agnhost", "grpc-health-checking"],
                   "ports": [{"containerPort": 5000}, {"containerPort": 8080}]}),
        ),
    };
    if !liveness.is_null() {
        container["livenessProbe"] = liveness;
    }
    if !readiness.is_null() {
        container["readinessProbe"] = readiness;
    }
    from_json(json!({
        "metadata": {"name": name, "labels": {"test": "liveness"}},
        "spec": {"containers": [container]},
    }))
}

fn status_of(pod: &Pod, container: &str) -> Option<ContainerStatus> {
    statuses(pod, true)
        .into_iter()
        .chain(statuses(pod, false))
        .find(|s| s.name == container)
}

fn restarts(pod: &Pod, container: &str) -> i32 {
    status_of(pod, container).map_or(0, |s| s.restart_count)
}

/// How long the container's previous run lasted (its last terminated state), in seconds.
fn last_run_secs(pod: &Pod, container: &str) -> Option<i64> {
    let s = status_of(pod, container)?;
    let t = s.last_state?.terminated?;
    Some(t.finished_at?.0.as_second() - t.started_at?.0.as_second())
}

/// Upstream's RunLivenessTest: create the pod, wait until its container has run, then watch its restart
/// count for `timeout` (plus 10 s per restart already seen): it MUST never go down, and MUST reach
/// `want` more restarts (or, for `want` 0, stay where it was). A restart MUST be the probe's doing: the
/// killed run lasted at least `min_run` seconds (the probe's initial delay), not a crash at start.
async fn liveness_test(
    ctx: &Ctx,
    pod: Pod,
    want: i32,
    timeout: Duration,
    min_run: i64,
) -> CaseResult {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .map(|c| c.name.clone())
        .unwrap_or_default();
    ctx.create_pod(&pod).await?;
    let pods = ctx.api::<Pod>();
    let first = ctx
        .wait("the container to leave Waiting", timeout, || async {
            let p = pods.get(&name).await?;
            Ok(if status_of(&p, &container).is_some_and(|s| started(&s)) {
                Ok(p)
            } else {
                Err(describe_status(&p))
            })
        })
        .await?;
    let initial = restarts(&first, &container);
    let deadline = Instant::now() + timeout + Duration::from_secs(10 * initial.max(0) as u64);
    let (mut last, mut observed, mut seen) = (initial, 0, first);
    while Instant::now() < deadline {
        seen = pods.get(&name).await?;
        let count = restarts(&seen, &container);
        must!(
            count >= last,
            "the restart count went down from {last} to {count}"
        );
        observed = count - initial;
        if want > 0 && observed >= want {
            break;
        }
        last = count;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    if want == 0 {
        must_eq!(
            observed,
            0,
            "restarts of {name} in {}s ({})",
            timeout.as_secs(),
            describe_status(&seen)
        );
        return Ok(());
    }
    must!(
        observed >= want,
        "{name} restarted {observed} times in {}s, want {want}: {}",
        timeout.as_secs(),
        describe_status(&seen)
    );
    let ran = last_run_secs(&seen, &container);
    must!(
        ran.is_some_and(|s| s + 1 >= min_run),
        "{name}'s killed run lasted {ran:?} s, less than the probe's initial delay {min_run} s: it ended on its own"
    );
    Ok(())
}

/// A liveness entry as data: the pod, its probe, the restarts expected, how long to watch, and the
/// shortest killed run (the probe's initial delay).
async fn liveness_case(
    ctx: &Ctx,
    shape: Shape,
    probe: Value,
    want: i32,
    timeout: Duration,
) -> CaseResult {
    let min_run = probe["initialDelaySeconds"].as_i64().unwrap_or(0);
    let pod = probe_pod(ctx, shape, probe, Value::Null)?;
    liveness_test(ctx, pod, want, timeout, min_run).await
}

const HEALTH_GOES_AWAY: &str = "echo ok >/tmp/health; sleep 10; rm -rf /tmp/health; sleep 600";
const HEALTH_STAYS: &str = "echo ok >/tmp/health; sleep 600";

fn cat_health() -> Value {
    json!({"exec": {"command": ["cat", "/tmp/health"]},
           "initialDelaySeconds": 15, "timeoutSeconds": 5, "failureThreshold": 1})
}

fn healthz(initial_delay: i64) -> Value {
    json!({"httpGet": {"path": "/healthz", "port": 8080},
           "initialDelaySeconds": initial_delay, "failureThreshold": 1})
}

fn grpc(port: i32, initial_delay: i64) -> Value {
    json!({"grpc": {"port": port}, "initialDelaySeconds": initial_delay,
           "timeoutSeconds": 5, "failureThreshold": 1})
}

/// Probing, liveness exec: /tmp/health is removed 10 s after start; the `cat /tmp/health` probe MUST
/// then fail and the container MUST be restarted (restart count 1).
async fn liveness_exec_restarted(ctx: &Ctx) -> CaseResult {
    let shape = Shape::Busybox(HEALTH_GOES_AWAY);
    liveness_case(ctx, shape, cat_health(), 1, OBSERVE).await
}

/// Probing, liveness exec, no restart: /tmp/health stays; the probe MUST keep succeeding and the
/// restart count MUST stay 0.
async fn liveness_exec_kept(ctx: &Ctx) -> CaseResult {
    liveness_case(ctx, Shape::Busybox(HEALTH_STAYS), cat_health(), 0, OBSERVE).await
}

/// Probing, liveness http: /healthz fails 10 s after start; the container MUST be restarted (1).
async fn liveness_http_restarted(ctx: &Ctx) -> CaseResult {
    liveness_case(ctx, Shape::Liveness, healthz(15), 1, OBSERVE).await
}

/// Probing, liveness tcp: the socket on 8080 stays open though /healthz fails; the tcp probe MUST keep
/// succeeding and the restart count MUST stay 0.
async fn liveness_tcp_kept(ctx: &Ctx) -> CaseResult {
    let probe =
        json!({"tcpSocket": {"port": 8080}, "initialDelaySeconds": 15, "failureThreshold": 1});
    liveness_case(ctx, Shape::Liveness, probe, 0, OBSERVE).await
}

/// Probing, multiple restarts: every run's /healthz fails 10 s after its start; the restart count
/// MUST increase monotonically, up to 5 restarts (upstream allows 2 min of back-off + 4 min + 2 min per
/// restart).
async fn liveness_monotonic(ctx: &Ctx) -> CaseResult {
    let timeout = Duration::from_secs(120) + OBSERVE + Duration::from_secs(4 * 120);
    liveness_case(ctx, Shape::Liveness, healthz(5), 5, timeout).await
}

/// Probing, liveness http on the web server's `/`: it never fails, so the restart count MUST stay 0.
async fn liveness_http_kept(ctx: &Ctx) -> CaseResult {
    let probe = json!({"httpGet": {"path": "/", "port": 80}, "initialDelaySeconds": 15,
                       "timeoutSeconds": 5, "failureThreshold": 5});
    liveness_case(ctx, Shape::Webserver, probe, 0, OBSERVE).await
}

/// Probing, liveness gRPC on the server's health service (5000): it MUST keep succeeding; restart
/// count 0.
async fn liveness_grpc_kept(ctx: &Ctx) -> CaseResult {
    liveness_case(ctx, Shape::Grpc, grpc(5000, 15), 0, OBSERVE).await
}

/// Probing, liveness gRPC on a port nothing serves (2333): the probe MUST fail and the container MUST
/// be restarted (1).
async fn liveness_grpc_restarted(ctx: &Ctx) -> CaseResult {
    liveness_case(ctx, Shape::Grpc, grpc(2333, 60), 1, OBSERVE).await
}

/// Probing, readiness with initial delay (15 s): the pod MUST become ready, and only after the delay
/// (Ready's transition time minus the container's start ≥ 15 s); restart count 0.
async fn readiness_initial_delay(ctx: &Ctx) -> CaseResult {
    let probe = json!({"httpGet": {"path": "/", "port": 80}, "initialDelaySeconds": 15});
    let pod = probe_pod(ctx, Shape::Webserver, Value::Null, probe)?;
    ctx.create_pod(&pod).await?;
    let pod = ctx.wait_ready("test-webserver").await?;
    let ready_at = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.clone())
        .ok_or_else(|| CaseError::Failed("no Ready condition transition time".into()))?;
    let started_at = status_of(&pod, "test-webserver")
        .and_then(|s| s.state?.running?.started_at)
        .ok_or_else(|| CaseError::Failed(format!("not running: {}", describe_status(&pod))))?;
    let after = ready_at.0.as_second() - started_at.0.as_second();
    must!(
        after >= 15,
        "the pod became ready {after} s after its container started, before the 15 s initial delay"
    );
    must_eq!(restarts(&pod, "test-webserver"), 0, "the restart count");
    Ok(())
}

/// Probing, failing readiness (port 81, nothing there): for a minute the pod MUST never be ready, and
/// its restart count MUST be 0.
async fn readiness_failing(ctx: &Ctx) -> CaseResult {
    let probe = json!({"httpGet": {"path": "/", "port": 81}});
    let pod = probe_pod(ctx, Shape::Webserver, Value::Null, probe)?;
    ctx.create_pod(&pod).await?;
    let pods = ctx.api::<Pod>();
    let end = Instant::now() + Duration::from_secs(60);
    let mut pod = pods.get("test-webserver").await?;
    while Instant::now() < end {
        pod = pods.get("test-webserver").await?;
        must!(
            !is_ready(&pod),
            "the pod is ready though its readiness probe fails: {}",
            describe_status(&pod)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    must_eq!(restarts(&pod, "test-webserver"), 0, "the restart count");
    Ok(())
}

/// Which hook a lifecycle entry sets, and how.
#[derive(Clone, Copy, PartialEq)]
enum Hook {
    PostStart,
    PreStop,
}

impl Hook {
    fn field(self) -> &'static str {
        match self {
            Hook::PostStart => "postStart",
            Hook::PreStop => "preStop",
        }
    }
    fn msg(self) -> &'static str {
        match self {
            Hook::PostStart => "poststart",
            Hook::PreStop => "prestop",
        }
    }
}

/// Wait until the handler pod's log shows `GET /echo?msg=<msg>`.
async fn wait_handler_log(
    ctx: &Ctx,
    pod: &str,
    container: &str,
    msg: &str,
    timeout: Duration,
) -> CaseResult {
    let want = format!("GET /echo?msg={msg}");
    ctx.wait(&format!("{want:?} in {pod}'s log"), timeout, || async {
        let log = ctx.logs(pod, container).await?;
        Ok(if log.contains(&want) {
            Ok(())
        } else {
            Err(format!("{} bytes of log without it", log.len()))
        })
    })
    .await
}

/// Delete a pod with the given grace period and wait until it is gone.
pub(super) async fn delete_and_wait_gone(ctx: &Ctx, name: &str, grace: u32) -> CaseResult {
    let pods = ctx.api::<Pod>();
    let dp = DeleteParams {
        grace_period_seconds: Some(grace),
        ..Default::default()
    };
    pods.delete(name, &dp).await?;
    ctx.wait(&format!("pod {name} gone"), POD_START, || async {
        Ok(match pods.get_opt(name).await? {
            None => Ok(()),
            Some(p) => Err(describe_status(&p)),
        })
    })
    .await
}

/// Upstream's lifecycle-hook flow: a netexec handler pod on a schedulable node logs every request; the
/// test pod carries a netexec sidecar (restartable init container, started once it answers) and the
/// hooked container. A PostStart hook MUST reach the handler within 2 min of the pod running; after the
/// pod is deleted (grace 15 s), a PreStop hook MUST have reached it within 30 s.
async fn hook_case(ctx: &Ctx, hook: Hook, http: bool) -> CaseResult {
    let node = ctx.schedulable_node().await?;
    let handler = "pod-handle-http-request";
    let handler_c = "container-handle-http-request";
    let handler_pod: Pod = from_json(json!({
        "metadata": {"name": handler},
        "spec": {"containers": [agnhost(ctx, handler_c, &["netexec"])], "affinity": on_node(&node)},
    }))?;
    ctx.create_pod(&handler_pod).await?;
    let target = ctx
        .wait_running(handler)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .ok_or_else(|| CaseError::Failed("the handler pod has no IP".into()))?;
    let url = if target.contains(':') {
        format!("[{target}]")
    } else {
        target.clone()
    };
    let msg = hook.msg();
    let (name, mut container) = if http {
        let name = format!("pod-with-{msg}-http-hook");
        let path = format!("/dial?host={target}&port=8080&request=echo%3Fmsg%3D{msg}");
        let c = json!({"name": name, "image": ctx.images().pause(),
                       "lifecycle": {hook.field(): {"httpGet": {"path": path, "port": 8080}}}});
        (name, c)
    } else {
        let name = format!("pod-with-{msg}-exec-hook");
        // Upstream curls the handler; kiln's agnhost image carries busybox, whose client is wget.
        let cmd = format!("wget -q -O- http://{url}:8080/echo?msg={msg}");
        let mut c = agnhost(ctx, &name, &["pause"]);
        c["lifecycle"] = json!({hook.field(): {"exec": {"command": ["sh", "-c", cmd]}}});
        (name, c)
    };
    container["name"] = json!(name);
    let mut sidecar = agnhost(ctx, "container-redirect", &["netexec", "--udp-port", "-1"]);
    sidecar["restartPolicy"] = json!("Always");
    sidecar["startupProbe"] = json!({"httpGet": {"path": "/echo?msg=startup", "port": 8080}});
    let mut spec = json!({"initContainers": [sidecar], "containers": [container]});
    if http {
        spec["affinity"] = on_node(&node);
    }
    let pod: Pod = from_json(json!({"metadata": {"name": name}, "spec": spec}))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running(&name).await?;
    if hook == Hook::PostStart {
        wait_handler_log(ctx, handler, handler_c, msg, Duration::from_secs(120)).await?;
    }
    delete_and_wait_gone(ctx, &name, 15).await?;
    if hook == Hook::PreStop {
        wait_handler_log(ctx, handler, handler_c, msg, Duration::from_secs(30)).await?;
    }
    Ok(())
}

/// Lifecycle hook, PostStart exec: the hook MUST be invoked after the container starts (it calls the
/// handler pod).
async fn hook_poststart_exec(ctx: &Ctx) -> CaseResult {
    hook_case(ctx, Hook::PostStart, false).await
}

/// Lifecycle hook, PreStop exec: the hook MUST be invoked before the container is terminated.
async fn hook_prestop_exec(ctx: &Ctx) -> CaseResult {
    hook_case(ctx, Hook::PreStop, false).await
}

/// Lifecycle hook, PostStart httpGet (same node as the handler): the hook MUST be invoked.
async fn hook_poststart_http(ctx: &Ctx) -> CaseResult {
    hook_case(ctx, Hook::PostStart, true).await
}

/// Lifecycle hook, PreStop httpGet (same node as the handler): the hook MUST be invoked before the
/// container is terminated.
async fn hook_prestop_http(ctx: &Ctx) -> CaseResult {
    hook_case(ctx, Hook::PreStop, true).await
}

/// PreStop, pod deletion: a server pod is created, then a tester pod whose PreStop hook calls the
/// server; when the tester is deleted, the server MUST receive the PreStop call (within 2 min).
/// Upstream's server is agnhost `nettest` (a /write-/read state store polled through the API
/// server's pod proxy); kiln's agnhost has no `nettest`, so the server is `netexec` and the call is
/// seen in its log (read through the API server too).
async fn prestop_when_killing(ctx: &Ctx) -> CaseResult {
    let server: Pod = from_json(json!({
        "metadata": {"name": "server"},
        "spec": {"containers": [{
            "name": "agnhost-container", "image": ctx.images().agnhost(),
            "command": ["/agnhost"], "args": ["netexec", "--http-port", "8080"],
            "ports": [{"containerPort": 8080}],
        }]},
    }))?;
    ctx.create_pod(&server).await?;
    let ip = ctx
        .wait_running("server")
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .ok_or_else(|| CaseError::Failed("the server pod has no IP".into()))?;
    let tester: Pod = from_json(json!({
        "metadata": {"name": "tester"},
        "spec": {"containers": [{
            "name": "tester", "image": ctx.images().busybox(),
            "command": ["sleep", "600"],
            "lifecycle": {"preStop": {"exec": {"command":
                ["wget", "-O-", format!("http://{ip}:8080/echo?msg=prestop")]}}},
        }]},
    }))?;
    ctx.create_pod(&tester).await?;
    ctx.wait_running("tester").await?;
    ctx.api::<Pod>()
        .delete("tester", &DeleteParams::default())
        .await?;
    wait_handler_log(
        ctx,
        "server",
        "agnhost-container",
        "prestop",
        Duration::from_secs(120),
    )
    .await
}

/// Upstream's entrypointTestPod: agnhost with only the given command and args (none: the image's).
fn entrypoint_pod(ctx: &Ctx, command: &[&str], args: &[&str]) -> CaseResult<Pod> {
    let mut c = json!({"name": "agnhost-container", "image": ctx.images().agnhost()});
    if !command.is_empty() {
        c["command"] = json!(command);
    }
    if !args.is_empty() {
        c["args"] = json!(args);
    }
    from_json(json!({
        "metadata": {"name": "client-containers"},
        "spec": {"containers": [c], "restartPolicy": "Never"},
    }))
}

/// Containers, without command and args: the image's entrypoint and arguments (agnhost `pause`) MUST
/// run: the log says "Paused" (upstream gives it 3 s once the pod runs).
async fn image_defaults(ctx: &Ctx) -> CaseResult {
    let pod = entrypoint_pod(ctx, &[], &[])?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("client-containers").await?;
    ctx.wait("\"Paused\" in the log", Duration::from_secs(3), || async {
        let log = ctx.logs("client-containers", "agnhost-container").await?;
        Ok(if log.contains("Paused") {
            Ok(())
        } else {
            Err(format!("{log:?}"))
        })
    })
    .await
}

/// Run an entrypoint pod to success: its log MUST be the argv line `want`.
async fn entrypoint_case(ctx: &Ctx, command: &[&str], args: &[&str], want: &str) -> CaseResult {
    let pod = entrypoint_pod(ctx, command, args)?;
    ctx.expect_output(&pod, "agnhost-container", &[want])
        .await?;
    Ok(())
}

/// Containers, args: with args set, the image's entrypoint MUST run with them.
async fn override_arguments(ctx: &Ctx) -> CaseResult {
    let args = ["entrypoint-tester", "override", "arguments"];
    let want = "[/agnhost entrypoint-tester override arguments]";
    entrypoint_case(ctx, &[], &args, want).await
}

/// Containers, command: with command set, it MUST replace the image's entrypoint.
async fn override_command(ctx: &Ctx) -> CaseResult {
    let want = "[/agnhost-2 entrypoint-tester]";
    entrypoint_case(ctx, &["/agnhost-2"], &["entrypoint-tester"], want).await
}

/// Containers, command and args: both MUST replace the image's.
async fn override_command_and_arguments(ctx: &Ctx) -> CaseResult {
    let args = ["entrypoint-tester", "override", "arguments"];
    let want = "[/agnhost-2 entrypoint-tester override arguments]";
    entrypoint_case(ctx, &["/agnhost-2"], &args, want).await
}

/// A container that fails its first run, succeeds its second, then runs forever (the runs are
/// counted in a memory-backed emptyDir).
const EXITS_SCRIPT: &str = "f=/restart-count/restartCount
count=$(echo 'hello' >> $f ; wc -l $f | awk {'print $1'})
if [ $count -eq 1 ]; then
	exit 1
fi
if [ $count -eq 2 ]; then
	exit 0
fi
while true; do sleep 1; done
";

/// (container name, restart policy, phase, running (else terminated), restart count, ready)
const EXITS: &[(&str, &str, &str, bool, i32, bool)] = &[
    ("terminate-cmd-rpa", "Always", "Running", true, 2, true),
    (
        "terminate-cmd-rpof",
        "OnFailure",
        "Succeeded",
        false,
        1,
        false,
    ),
    ("terminate-cmd-rpn", "Never", "Failed", false, 0, false),
];

/// Container Runtime, restart policies: with Always the container MUST be restarted after each exit
/// (2 restarts, then Running and Ready); with OnFailure only after the failing exit (1 restart, then
/// Succeeded, terminated); with Never not at all (0, Failed, terminated). Each pod MUST then be
/// deletable.
async fn exits_with_expected_status(ctx: &Ctx) -> CaseResult {
    let timeout = Duration::from_secs(300);
    let pods = ctx.api::<Pod>();
    for &(name, policy, want_phase, want_running, want_restarts, want_ready) in EXITS {
        let mut pod = busybox_pod(
            ctx,
            name,
            policy,
            EXITS_SCRIPT,
            json!({"name": name,
                   "volumeMounts": [{"name": "restart-count", "mountPath": "/restart-count"}]}),
        )?;
        if let Some(spec) = pod.spec.as_mut() {
            spec.volumes = Some(from_json(json!([
                {"name": "restart-count", "emptyDir": {"medium": "Memory"}}
            ]))?);
        }
        ctx.create_pod(&pod).await?;
        ctx.wait(
            &format!("{name}: restart count {want_restarts}"),
            timeout,
            || async {
                let p = pods.get(name).await?;
                Ok(if restarts(&p, name) == want_restarts {
                    Ok(())
                } else {
                    Err(describe_status(&p))
                })
            },
        )
        .await?;
        let p = ctx
            .wait(&format!("{name}: phase {want_phase}"), timeout, || async {
                let p = pods.get(name).await?;
                Ok(if phase(&p) == want_phase {
                    Ok(p)
                } else {
                    Err(describe_status(&p))
                })
            })
            .await?;
        must_eq!(
            condition(&p, "Ready").as_deref() == Some("True"),
            want_ready,
            "{name}: pod Ready"
        );
        let state = status_of(&p, name)
            .and_then(|s| s.state)
            .unwrap_or_default();
        let running = state.running.is_some();
        must!(
            if want_running {
                running
            } else {
                state.terminated.is_some()
            },
            "{name}: the container should be {}: {}",
            if want_running {
                "running"
            } else {
                "terminated"
            },
            describe_status(&p)
        );
        must_eq!(restarts(&p, name), want_restarts, "{name}: restart count");
        delete_and_wait_gone(ctx, name, 30).await?;
    }
    Ok(())
}
