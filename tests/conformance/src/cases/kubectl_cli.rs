//! sig-cli entries, written from upstream's test/e2e/kubectl/kubectl.go ("Kubectl client") and
//! test/e2e/kubectl/logs.go ("Kubectl logs"): each drives the real kubectl against the cluster
//! (`--namespace` the case's own), with upstream's manifests as JSON on kubectl's stdin, and checks
//! kubectl's output as upstream does. `kubectl proxy` runs as a child of the case, stopped by the
//! case. Images: agnhost plays upstream's agnhost and its agnhost-based "nautilus" (with the image's
//! data.json from a ConfigMap); busybox's httpd plays httpd; when busybox is that same image, agnhost
//! plays the "other image" (busybox) the image-changing entries switch to.

use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, LogParams};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{case, Case};
use crate::ctx::{by_label, is_ready, phase, to_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-cli] Kubectl client Kubectl api-versions should check if v1 is in available api versions [Conformance]",
        "kubectl",
        api_versions
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl cluster-info should check if Kubernetes control plane services is included in cluster-info [Conformance]",
        "kubectl",
        cluster_info
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl version should check is all data is printed [Conformance]",
        "kubectl",
        version
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl describe should check if kubectl describe prints relevant information for rc and pods [Conformance]",
        "kubectl",
        describe
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl expose should create services for rc [Conformance]",
        "kubectl",
        expose
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl label should update the label on a resource [Conformance]",
        "kubectl",
        label
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl patch should add annotations for pods in rc [Conformance]",
        "kubectl",
        patch_annotations
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl diff should check if kubectl diff finds a difference for Deployments [Conformance]",
        "kubectl",
        diff
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl run pod should create a pod from an image when restart is Never [Conformance]",
        "kubectl",
        run_restart_never
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl replace should update a single-container pod's image [Conformance]",
        "kubectl",
        replace_image
    ),
    case!(
        "[sig-cli] Kubectl client Kubectl server-side dry-run should check if kubectl can dry-run update Pods [Conformance]",
        "kubectl",
        dry_run_update
    ),
    case!(
        "[sig-cli] Kubectl client Proxy server should support proxy with --port 0 [Conformance]",
        "kubectl",
        proxy_port_zero
    ),
    case!(
        "[sig-cli] Kubectl client Proxy server should support --unix-socket=/path [Conformance]",
        "kubectl",
        proxy_unix_socket
    ),
    case!(
        "[sig-cli] Kubectl client Update Demo should create and stop a replication controller [Conformance]",
        "kubectl",
        update_demo_create_stop
    ),
    case!(
        "[sig-cli] Kubectl client Update Demo should scale a replication controller [Conformance]",
        "kubectl",
        update_demo_scale
    ),
    case!(
        "[sig-cli] Kubectl client Guestbook application should create and stop a working application [Conformance]",
        "kubectl",
        guestbook
    ),
    case!(
        "[sig-cli] Kubectl logs logs should be able to retrieve and filter logs [Conformance]",
        "kubectl-logs",
        logs
    ),
];

/// Upstream's `--pod-running-timeout` for `kubectl run` (framework.PodStartShortTimeout).
const POD_RUNNING_TIMEOUT: &str = "--pod-running-timeout=2m0s";
const MINUTE: Duration = Duration::from_secs(60);
/// The pod `kubectl run` makes in the run/replace/dry-run entries.
const HTTPD_POD: &str = "e2e-test-httpd-pod";

// ---- kubectl -------------------------------------------------------------------------------

/// RunKubectlOrDie: kubectl in the case's namespace; its stdout, or the failure with stderr.
async fn kubectl(ctx: &Ctx, args: &[&str]) -> CaseResult<String> {
    let mut all = vec!["--namespace", ctx.ns.as_str()];
    all.extend_from_slice(args);
    ctx.kubectl(&all).await
}

/// A kubectl command in the case's namespace (with the run's kubeconfig), not yet started.
fn kubectl_command(ctx: &Ctx, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&ctx.cluster.kubectl);
    if let Some(k) = &ctx.cluster.kubeconfig {
        cmd.arg("--kubeconfig").arg(k);
    }
    cmd.arg("--namespace").arg(&ctx.ns).args(args);
    cmd
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CaseError {
    let what = what.into();
    move |source| CaseError::Io { what, source }
}

/// kubectl with `input` on its stdin (RunKubectlInput): exit code, stdout, stderr.
async fn kubectl_input_raw(
    ctx: &Ctx,
    input: &str,
    args: &[&str],
) -> CaseResult<(i32, String, String)> {
    let mut child = kubectl_command(ctx, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io_error(format!("running {}", ctx.cluster.kubectl)))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .await
            .map_err(io_error("writing kubectl's stdin"))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(io_error("waiting for kubectl"))?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    ))
}

/// RunKubectlOrDieInput: the manifest (JSON) on stdin; stdout, or the failure with stderr.
async fn kubectl_input(ctx: &Ctx, manifest: &Value, args: &[&str]) -> CaseResult<String> {
    let (code, stdout, stderr) = kubectl_input_raw(ctx, &manifest.to_string(), args).await?;
    if code != 0 {
        return Err(CaseError::Kubectl {
            args: args.join(" "),
            stderr,
        });
    }
    Ok(stdout)
}

/// cleanupKubectlInputs: `delete --grace-period=0 --force -f -` of the manifest, then nothing
/// matching the selectors may be left: no RC or Service, no pod not already terminating, within a
/// minute.
async fn cleanup_inputs(ctx: &Ctx, manifest: &Value, selectors: &[&str]) -> CaseResult {
    kubectl_input(
        ctx,
        manifest,
        &["delete", "--grace-period=0", "--force", "-f", "-"],
    )
    .await?;
    for sel in selectors {
        ctx.wait(&format!("{sel} cleaned up"), MINUTE, || async {
            let left = kubectl(ctx, &["get", "rc,svc", "-l", sel, "--no-headers"]).await?;
            if !left.trim().is_empty() {
                return Ok(Err(format!("resources left running after stop:\n{left}")));
            }
            let pods = ctx
                .api::<Pod>()
                .list(&ListParams::default().labels(sel))
                .await?;
            let alive: Vec<String> = pods
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            Ok(if alive.is_empty() {
                Ok(())
            } else {
                Err(format!("pods left unterminated after stop: {alive:?}"))
            })
        })
        .await?;
    }
    Ok(())
}

/// checkOutputReturnError: each requirement's first string MUST appear on a line at or after the
/// previous requirement's line, and the rest of its strings on that same line.
fn check_output(output: &str, required: &[&[&str]]) -> Result<(), String> {
    let lines: Vec<&str> = output.split('\n').collect();
    let mut at = 0;
    for req in required {
        while at < lines.len() && !lines[at].contains(req[0]) {
            at += 1;
        }
        let Some(line) = lines.get(at) else {
            return Err(format!("failed to find {:?} in:\n{output}", req[0]));
        };
        if let Some(missing) = req[1..].iter().find(|item| !line.contains(*item)) {
            return Err(format!("failed to find {missing:?} in line {line:?}"));
        }
    }
    Ok(())
}

fn check(output: &str, required: &[&[&str]]) -> CaseResult {
    check_output(output, required).map_err(CaseError::Failed)
}

// ---- images and manifests ------------------------------------------------------------------

/// Upstream's busybox where an entry switches a pod from httpd to another image: busybox here
/// also plays httpd, so when the two are one image agnhost is the other one.
fn other_image(ctx: &Ctx) -> String {
    let busybox = ctx.images().busybox();
    if busybox == ctx.images().httpd() {
        ctx.images().agnhost()
    } else {
        busybox
    }
}

/// An agnhost container running `args` (the lab's agnhost image has no entrypoint: `/agnhost` is
/// the command, as upstream's image's ENTRYPOINT).
fn agnhost(ctx: &Ctx, name: &str, args: &[&str], extra: Value) -> Value {
    let mut c = json!({
        "name": name,
        "image": ctx.images().agnhost(),
        "command": ["/agnhost"],
        "args": args,
    });
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

/// agnhost-primary-controller.json.in: one agnhost (its default `pause`) labelled app=agnhost,
/// role=primary, port 6379 named agnhost-server.
fn agnhost_primary_rc(ctx: &Ctx) -> Value {
    let labels = json!({"app": "agnhost", "role": "primary"});
    json!({
        "kind": "ReplicationController",
        "apiVersion": "v1",
        "metadata": {"name": "agnhost-primary", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": labels,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [agnhost(ctx, "agnhost-primary", &["pause"], json!({
                    "ports": [{"name": "agnhost-server", "containerPort": 6379}]
                }))]}
            }
        }
    })
}

/// agnhost-primary-service.json: port 6379 to the named port agnhost-server.
fn agnhost_primary_service() -> Value {
    let labels = json!({"app": "agnhost", "role": "primary"});
    json!({
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {"name": "agnhost-primary", "labels": labels},
        "spec": {"ports": [{"port": 6379, "targetPort": "agnhost-server"}], "selector": labels}
    })
}

/// The Running pods labelled app=agnhost (upstream's ClusterVerification of the kubectl tests).
async fn running_agnhost(ctx: &Ctx) -> CaseResult<Vec<Pod>> {
    let pods = ctx.api::<Pod>().list(&by_label("app", "agnhost")).await?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| phase(p) == "Running")
        .collect())
}

/// waitForOrFailWithDebug: at least `n` Running agnhost pods.
async fn wait_agnhost(ctx: &Ctx, n: usize) -> CaseResult<Vec<Pod>> {
    ctx.wait(&format!("{n} Running agnhost pods"), POD_START, || async {
        let pods = running_agnhost(ctx).await?;
        Ok(if pods.len() >= n {
            Ok(pods)
        } else {
            Err(format!("{} Running", pods.len()))
        })
    })
    .await
}

fn name_of(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

// ---- simple commands -----------------------------------------------------------------------

/// `kubectl api-versions` MUST list v1.
async fn api_versions(ctx: &Ctx) -> CaseResult {
    let out = kubectl(ctx, &["api-versions"]).await?;
    must!(
        out.lines().any(|l| l.trim() == "v1"),
        "no v1 in kubectl api-versions:\n{out}"
    );
    Ok(())
}

/// `kubectl cluster-info` MUST say the Kubernetes control plane is running at an address.
async fn cluster_info(ctx: &Ctx) -> CaseResult {
    let out = kubectl(ctx, &["cluster-info"]).await?;
    for item in ["Kubernetes control plane", "is running at"] {
        must!(
            out.contains(item),
            "missing {item:?} in kubectl cluster-info:\n{out}"
        );
    }
    Ok(())
}

/// `kubectl version` MUST print the client's and the server's versions (`v<major>.<minor>.<…>`,
/// or the long `version.Info{…}` form of kubectl before 1.28).
async fn version(ctx: &Ctx) -> CaseResult {
    let out = kubectl(ctx, &["version"]).await?;
    for item in ["Client Version: ", "Server Version: "] {
        let long = regex::Regex::new(&format!(
            r#"{item}version.Info\{{Major:"\d", Minor:"\d+\+?", GitVersion:"v\d\.\d+\.[\d\w\-\.\+]+", GitCommit:"[0-9a-f]+""#
        ))
        .expect("regex");
        let short = regex::Regex::new(&format!(r"{item}v\d\.\d+\.[\d\w\-\.\+]+")).expect("regex");
        must!(
            long.is_match(&out) || short.is_match(&out),
            "item {item:?} value is not valid in:\n{out}"
        );
    }
    Ok(())
}

// ---- describe, expose, label, patch --------------------------------------------------------

/// `kubectl describe` of the agnhost-primary pod, RC and Service, a node and the namespace MUST
/// print each one's name, namespace, labels, state and the other fields upstream lists, in order.
async fn describe(ctx: &Ctx) -> CaseResult {
    kubectl_input(ctx, &agnhost_primary_rc(ctx), &["create", "-f", "-"]).await?;
    kubectl_input(ctx, &agnhost_primary_service(), &["create", "-f", "-"]).await?;
    wait_agnhost(ctx, 1).await?;
    let ns = ctx.ns.as_str();
    let image = ctx.images().agnhost();
    let image = image.as_str();

    for pod in running_agnhost(ctx).await? {
        let out = kubectl(ctx, &["describe", "pod", &name_of(&pod)]).await?;
        check(
            &out,
            &[
                &["Name:", "agnhost-primary-"],
                &["Namespace:", ns],
                &["Node:"],
                &["Labels:", "app=agnhost"],
                &["role=primary"],
                &["Annotations:"],
                &["Status:", "Running"],
                &["IP:"],
                &["Controlled By:", "ReplicationController/agnhost-primary"],
                &["Image:", image],
                &["State:", "Running"],
                &["QoS Class:", "BestEffort"],
            ],
        )?;
    }

    // The RC's status may lag its pod: upstream retries for a minute.
    let rc_required: &[&[&str]] = &[
        &["Name:", "agnhost-primary"],
        &["Namespace:", ns],
        &["Selector:", "app=agnhost,role=primary"],
        &["Labels:", "app=agnhost"],
        &["role=primary"],
        &["Annotations:"],
        &["Replicas:", "1 current", "1 desired"],
        &[
            "Pods Status:",
            "1 Running",
            "0 Waiting",
            "0 Succeeded",
            "0 Failed",
        ],
        &["Pod Template:"],
        &["Image:", image],
        &["Events:"],
    ];
    ctx.wait("kubectl describe rc agnhost-primary", MINUTE, || async {
        let out = kubectl(ctx, &["describe", "rc", "agnhost-primary"]).await?;
        Ok(check_output(&out, rc_required))
    })
    .await?;

    let out = kubectl(ctx, &["describe", "service", "agnhost-primary"]).await?;
    check(
        &out,
        &[
            &["Name:", "agnhost-primary"],
            &["Namespace:", ns],
            &["Labels:", "app=agnhost"],
            &["role=primary"],
            &["Annotations:"],
            &["Selector:", "app=agnhost", "role=primary"],
            &["Type:", "ClusterIP"],
            &["IP:"],
            &["Port:", "<unset>", "6379/TCP"],
            &["Endpoints:"],
            &["Session Affinity:", "None"],
        ],
    )?;

    let nodes = ctx.all::<Node>().list(&ListParams::default()).await?;
    let node = nodes
        .items
        .first()
        .and_then(|n| n.metadata.name.clone())
        .ok_or_else(|| CaseError::Failed("no nodes".into()))?;
    let out = kubectl(ctx, &["describe", "node", &node]).await?;
    check(
        &out,
        &[
            &["Name:", &node],
            &["Labels:"],
            &["Annotations:"],
            &["CreationTimestamp:"],
            &["Conditions:"],
            &[
                "Type",
                "Status",
                "LastHeartbeatTime",
                "LastTransitionTime",
                "Reason",
                "Message",
            ],
            &["Addresses:"],
            &["Capacity:"],
            &["Version:"],
            &["Kernel Version:"],
            &["OS Image:"],
            &["Container Runtime Version:"],
            &["Kubelet Version:"],
            &["Kube-Proxy Version:"],
            &["Pods:"],
        ],
    )?;

    let out = kubectl(ctx, &["describe", "namespace", ns]).await?;
    check(
        &out,
        &[
            &["Name:", ns],
            &["Labels:"],
            &["Annotations:"],
            &["Status:", "Active"],
        ],
    )
}

/// The service `name` MUST come to have one pod endpoint on 6379 (by its EndpointSlices), one
/// port `port` and target port 6379.
async fn validate_exposed(ctx: &Ctx, name: &str, port: i32) -> CaseResult {
    const AGNHOST_PORT: i32 = 6379;
    let services = ctx.api::<Service>();
    ctx.wait(&format!("service {name}"), MINUTE, || async {
        Ok(services.get_opt(name).await?.ok_or("not yet"))
    })
    .await?;
    let slices = ctx.api::<EndpointSlice>();
    ctx.wait(
        &format!("an endpoint of service {name}"),
        MINUTE,
        || async {
            let list = slices
                .list(&by_label("kubernetes.io/service-name", name))
                .await?;
            // GetContainerPortsByPodUID: every slice port, for each pod endpoint.
            let mut by_pod: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
            for s in &list.items {
                let ports: Vec<i32> = s.ports.iter().flatten().filter_map(|p| p.port).collect();
                for ep in &s.endpoints {
                    if let Some(uid) = ep.target_ref.as_ref().and_then(|r| r.uid.clone()) {
                        by_pod.entry(uid).or_default().extend(&ports);
                    }
                }
            }
            if by_pod.is_empty() {
                return Ok(Err("no endpoint found".to_string()));
            }
            must!(
                by_pod.len() == 1,
                "too many endpoints for {name}: {by_pod:?}"
            );
            for ports in by_pod.values() {
                must_eq!(
                    ports.first().copied(),
                    Some(AGNHOST_PORT),
                    "endpoint port of {name}"
                );
            }
            Ok(Ok(()))
        },
    )
    .await?;
    let svc = services.get(name).await?;
    let ports = svc.spec.and_then(|s| s.ports).unwrap_or_default();
    must_eq!(ports.len(), 1, "ports of service {name}");
    must_eq!(ports[0].port, port, "service port of {name}");
    must_eq!(
        ports[0].target_port.as_ref().map(to_json),
        Some(json!(AGNHOST_PORT)),
        "target port of {name}"
    );
    Ok(())
}

/// `kubectl expose rc` at port 1234 and `kubectl expose service` of that at 2345: each service MUST
/// listen on its port with target port 6379, the agnhost primary's.
async fn expose(ctx: &Ctx) -> CaseResult {
    kubectl_input(ctx, &agnhost_primary_rc(ctx), &["create", "-f", "-"]).await?;
    for pod in wait_agnhost(ctx, 1).await? {
        let name = name_of(&pod);
        ctx.wait(
            &format!("\"Paused\" in the log of {name}"),
            POD_START,
            || async {
                let log = ctx.logs(&name, "agnhost-primary").await?;
                Ok(if log.contains("Paused") {
                    Ok(())
                } else {
                    Err(log)
                })
            },
        )
        .await?;
    }
    kubectl(
        ctx,
        &[
            "expose",
            "rc",
            "agnhost-primary",
            "--name=rm2",
            "--port=1234",
            "--target-port=6379",
        ],
    )
    .await?;
    validate_exposed(ctx, "rm2", 1234).await?;
    kubectl(
        ctx,
        &[
            "expose",
            "service",
            "rm2",
            "--name=rm3",
            "--port=2345",
            "--target-port=6379",
        ],
    )
    .await?;
    validate_exposed(ctx, "rm3", 2345).await
}

/// pause-pod.yaml.in.
fn pause_pod(ctx: &Ctx) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pause", "labels": {"name": "pause"}},
        "spec": {"containers": [{
            "name": "pause",
            "image": ctx.images().pause(),
            "ports": [{"containerPort": 80}]
        }]}
    })
}

/// `kubectl label` on a running pod: the label MUST then be read back by `get -L`; after
/// `label key-` it MUST NOT.
async fn label(ctx: &Ctx) -> CaseResult {
    let manifest = pause_pod(ctx);
    kubectl_input(ctx, &manifest, &["create", "-f", "-"]).await?;
    ctx.wait_ready("pause").await?;
    let (key, value) = ("testing-label", "testing-label-value");
    kubectl(ctx, &["label", "pods", "pause", &format!("{key}={value}")]).await?;
    let out = kubectl(ctx, &["get", "pod", "pause", "-L", key]).await?;
    must!(
        out.contains(value),
        "failed updating label {key} to the pod pause:\n{out}"
    );
    kubectl(ctx, &["label", "pods", "pause", &format!("{key}-")]).await?;
    let out = kubectl(ctx, &["get", "pod", "pause", "-L", key]).await?;
    must!(
        !out.contains(value),
        "failed removing label {key} of the pod pause:\n{out}"
    );
    cleanup_inputs(ctx, &manifest, &["name=pause"]).await
}

/// `kubectl patch` adding annotation x=y to each running pod of the agnhost RC: every pod MUST
/// then carry it.
async fn patch_annotations(ctx: &Ctx) -> CaseResult {
    kubectl_input(ctx, &agnhost_primary_rc(ctx), &["create", "-f", "-"]).await?;
    wait_agnhost(ctx, 1).await?;
    for pod in running_agnhost(ctx).await? {
        kubectl(
            ctx,
            &[
                "patch",
                "pod",
                &name_of(&pod),
                "-p",
                r#"{"metadata":{"annotations":{"x":"y"}}}"#,
            ],
        )
        .await?;
    }
    for pod in running_agnhost(ctx).await? {
        let x = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("x"))
            .map(String::as_str);
        must_eq!(x, Some("y"), "annotation x of pod {}", name_of(&pod));
    }
    Ok(())
}

// ---- diff, run, replace, dry-run -----------------------------------------------------------

/// `kubectl diff` of the live httpd Deployment against the same Deployment declared with another
/// image MUST show both images.
async fn diff(ctx: &Ctx) -> CaseResult {
    let httpd = ctx.images().httpd();
    let other = other_image(ctx);
    let deployment = |image: &str| {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "httpd-deployment"},
            "spec": {
                "selector": {"matchLabels": {"app": "httpd"}},
                "template": {
                    "metadata": {"labels": {"app": "httpd"}},
                    "spec": {"containers": [{
                        "name": "httpd", "image": image, "ports": [{"containerPort": 80}]
                    }]}
                }
            }
        })
    };
    kubectl_input(ctx, &deployment(&httpd), &["create", "-f", "-"]).await?;
    let declared = deployment(&other);
    // kubectl diff exits 1 when it finds differences; more is an error.
    let (code, out, stderr) =
        kubectl_input_raw(ctx, &declared.to_string(), &["diff", "-f", "-"]).await?;
    must!(
        code == 0 || code == 1,
        "kubectl diff -f - exited {code}: {stderr}"
    );
    for item in [&httpd, &other] {
        must!(
            out.contains(item.as_str()),
            "missing {item} in kubectl diff output (exit {code}):\n{out}\n{stderr}"
        );
    }
    kubectl_input(ctx, &declared, &["delete", "-f", "-"]).await?;
    Ok(())
}

/// The single container of pod `name`: its image (upstream's checkContainersImage: exactly one).
async fn only_image(ctx: &Ctx, name: &str) -> CaseResult<(String, Pod)> {
    let pod = ctx.api::<Pod>().get(name).await?;
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    must_eq!(containers.len(), 1, "containers of pod {name}");
    let image = containers[0].image.clone().unwrap_or_default();
    Ok((image, pod))
}

/// `kubectl run --restart=Never` MUST create the pod with the one container of the given image
/// and restart policy Never.
async fn run_restart_never(ctx: &Ctx) -> CaseResult {
    let httpd = ctx.images().httpd();
    kubectl(
        ctx,
        &[
            "run",
            HTTPD_POD,
            "--restart=Never",
            POD_RUNNING_TIMEOUT,
            &format!("--image={httpd}"),
        ],
    )
    .await?;
    let (image, pod) = only_image(ctx, HTTPD_POD).await?;
    must_eq!(image, httpd, "image of pod {HTTPD_POD}");
    must_eq!(
        pod.spec.and_then(|s| s.restart_policy).as_deref(),
        Some("Never"),
        "restart policy of a pod run with --restart=Never"
    );
    kubectl(ctx, &["delete", "pods", HTTPD_POD]).await?;
    Ok(())
}

/// `kubectl run` the httpd pod labelled run=<name>.
async fn run_httpd_pod(ctx: &Ctx) -> CaseResult<String> {
    let httpd = ctx.images().httpd();
    kubectl(
        ctx,
        &[
            "run",
            HTTPD_POD,
            &format!("--image={httpd}"),
            POD_RUNNING_TIMEOUT,
            &format!("--labels=run={HTTPD_POD}"),
        ],
    )
    .await?;
    Ok(httpd)
}

/// `kubectl replace -f -` of the running pod's JSON with its image switched MUST update the
/// pod's image.
async fn replace_image(ctx: &Ctx) -> CaseResult {
    let httpd = run_httpd_pod(ctx).await?;
    // WaitForPodsWithLabelRunning.
    let pods = ctx.api::<Pod>();
    ctx.wait(
        &format!("pods labelled run={HTTPD_POD} Running"),
        POD_START,
        || async {
            let list = pods.list(&by_label("run", HTTPD_POD)).await?.items;
            Ok(
                if !list.is_empty() && list.iter().all(|p| phase(p) == "Running") {
                    Ok(())
                } else {
                    Err(format!(
                        "phases {:?}",
                        list.iter().map(phase).collect::<Vec<_>>()
                    ))
                },
            )
        },
    )
    .await?;
    let pod_json = kubectl(ctx, &["get", "pod", HTTPD_POD, "-o", "json"]).await?;
    must!(
        pod_json.contains(HTTPD_POD),
        "failed to find pod {HTTPD_POD} in {pod_json}"
    );
    let other = other_image(ctx);
    let replaced = pod_json.replacen(&httpd, &other, 1);
    let (code, _, stderr) = kubectl_input_raw(ctx, &replaced, &["replace", "-f", "-"]).await?;
    must_eq!(code, 0, "kubectl replace -f - exit code ({stderr})");
    let (image, _) = only_image(ctx, HTTPD_POD).await?;
    must_eq!(image, other, "image of pod {HTTPD_POD} after the replace");
    kubectl(ctx, &["delete", "pods", HTTPD_POD]).await?;
    Ok(())
}

/// `kubectl patch --dry-run=server` of the pod's image MUST leave the pod's image unchanged.
async fn dry_run_update(ctx: &Ctx) -> CaseResult {
    let httpd = run_httpd_pod(ctx).await?;
    let patch = json!({"spec": {"containers": [{"name": HTTPD_POD, "image": other_image(ctx)}]}});
    kubectl(
        ctx,
        &[
            "patch",
            "pod",
            HTTPD_POD,
            "-p",
            &patch.to_string(),
            "--dry-run=server",
        ],
    )
    .await?;
    let (image, _) = only_image(ctx, HTTPD_POD).await?;
    must_eq!(
        image,
        httpd,
        "image of pod {HTTPD_POD} after a server-side dry-run patch"
    );
    kubectl(ctx, &["delete", "pods", HTTPD_POD]).await?;
    Ok(())
}

// ---- kubectl proxy -------------------------------------------------------------------------

/// A `kubectl proxy` started by the case: its process and the first thing it printed.
async fn start_proxy(ctx: &Ctx, args: &[&str]) -> CaseResult<(tokio::process::Child, String)> {
    let mut all = vec!["proxy"];
    all.extend_from_slice(args);
    let mut child = kubectl_command(ctx, &all)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io_error("starting kubectl proxy"))?;
    let mut buf = [0u8; 128];
    let read = match child.stdout.as_mut() {
        Some(out) => tokio::time::timeout(MINUTE, out.read(&mut buf)).await,
        None => Ok(Ok(0)),
    };
    let n = match read {
        Ok(Ok(n)) if n > 0 => n,
        other => {
            stop(&mut child).await;
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut stderr).await;
            }
            return Err(CaseError::Failed(format!(
                "expected output from kubectl proxy ({other:?}); stderr: {}",
                stderr.trim()
            )));
        }
    };
    Ok((child, String::from_utf8_lossy(&buf[..n]).into_owned()))
}

/// Stop our proxy (by its own process handle) and reap it.
async fn stop(child: &mut tokio::process::Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// An HTTP/1.0 GET over a connected stream (so the answer is not chunked and ends with the
/// connection): status code and body.
async fn http_get<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    path: &str,
) -> CaseResult<(u16, String)> {
    let exchange = async {
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(MINUTE, exchange)
        .await
        .map_err(|_| CaseError::Failed(format!("GET {path}: no answer in a minute")))?
        .map_err(io_error(format!("GET {path}")))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| CaseError::Failed(format!("GET {path}: not an HTTP answer: {text}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| CaseError::Failed(format!("GET {path}: no status in {head:?}")))?;
    Ok((status, body.to_string()))
}

/// getAPIVersions: /api/ MUST answer an APIVersions with at least one version.
fn api_versions_of(status: u16, body: &str) -> CaseResult {
    must_eq!(
        status,
        200,
        "status of GET /api/ through kubectl proxy ({body})"
    );
    let v: Value = serde_json::from_str(body).map_err(|source| CaseError::Json {
        what: "the proxy's /api/ answer".into(),
        source,
    })?;
    let n = v["versions"].as_array().map_or(0, Vec::len);
    must!(
        n >= 1,
        "expected at least one supported apiversion, got {body}"
    );
    Ok(())
}

/// `kubectl proxy -p 0 --disable-filter` MUST say which port it took, and /api/ there MUST list at
/// least one API version.
async fn proxy_port_zero(ctx: &Ctx) -> CaseResult {
    let (mut child, first) = start_proxy(ctx, &["-p", "0", "--disable-filter"]).await?;
    let result = async {
        let re = regex::Regex::new("Starting to serve on 127.0.0.1:([0-9]+)").expect("regex");
        let port: u16 = re
            .captures(&first)
            .and_then(|c| c[1].parse().ok())
            .ok_or_else(|| {
                CaseError::Failed(format!("failed to parse port from proxy stdout: {first}"))
            })?;
        let conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(io_error(format!("connecting to the proxy on port {port}")))?;
        let (status, body) = http_get(conn, "/api/").await?;
        api_versions_of(status, &body)
    }
    .await;
    stop(&mut child).await;
    result
}

/// `kubectl proxy --unix-socket=<path>` MUST serve /api (at least one API version) on that socket.
async fn proxy_unix_socket(ctx: &Ctx) -> CaseResult {
    let dir = std::env::temp_dir().join(format!("kubectl-proxy-unix-{}", ctx.ns));
    std::fs::create_dir_all(&dir).map_err(io_error(format!("creating {}", dir.display())))?;
    let path = dir.join("test");
    let arg = format!("--unix-socket={}", path.display());
    let started = start_proxy(ctx, &[&arg]).await;
    let result = match started {
        Err(e) => Err(e),
        Ok((mut child, _)) => {
            let r = async {
                let conn = tokio::net::UnixStream::connect(&path)
                    .await
                    .map_err(io_error(format!("connecting to {}", path.display())))?;
                let (status, body) = http_get(conn, "/api").await?;
                api_versions_of(status, &body)
            }
            .await;
            stop(&mut child).await;
            r
        }
    };
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    result
}

// ---- Update Demo ---------------------------------------------------------------------------

const UPDATE_DEMO: &str = "name=update-demo";
const NAUTILUS_RC: &str = "update-demo-nautilus";

/// nautilus-rc.yaml.in with agnhost's test-webserver serving the nautilus image's /data.json
/// (`{"image": "nautilus.jpg"}`), which a ConfigMap supplies here.
fn nautilus(ctx: &Ctx) -> Value {
    let labels = json!({"name": "update-demo", "version": "nautilus"});
    let container = agnhost(
        ctx,
        "update-demo",
        &["test-webserver"],
        json!({
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data.json", "subPath": "data.json"}]
        }),
    );
    json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "update-demo-nautilus-data"},
                "data": {"data.json": "{\"image\": \"nautilus.jpg\"}\n"}
            },
            {
                "apiVersion": "v1",
                "kind": "ReplicationController",
                "metadata": {"name": NAUTILUS_RC},
                "spec": {
                    "replicas": 2,
                    "selector": labels,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [container],
                            "volumes": [{"name": "data", "configMap": {"name": "update-demo-nautilus-data"}}]
                        }
                    }
                }
            }
        ]
    })
}

/// getUDData: the pod's data.json through the API server's pods/proxy MUST name nautilus.jpg.
/// Ok(Err) is "not yet"; a 404 from the API server (pods/proxy not served) ends the wait.
async fn ud_data(ctx: &Ctx, pod: &str) -> CaseResult<Result<(), String>> {
    let path = format!("/api/v1/namespaces/{}/pods/{pod}/proxy/data.json", ctx.ns);
    let req = http::Request::get(&path)
        .body(Vec::new())
        .map_err(|e| CaseError::Failed(format!("building GET {path}: {e}")))?;
    match ctx.client.request_text(req).await {
        Ok(body) => {
            let image = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["image"].as_str().map(str::to_string));
            Ok(match image {
                Some(i) if i.contains("nautilus.jpg") => Ok(()),
                _ => Err(format!("data served up in container is inaccurate: {body}")),
            })
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Err(CaseError::Failed(format!(
            "GET {path}: 404 {} (the pods/proxy subresource is not served?)",
            e.message
        ))),
        Err(e) => Ok(Err(format!("GET {path}: {e}"))),
    }
}

/// validateController: exactly `replicas` pods labelled name=update-demo, each with its
/// update-demo container running the expected image and serving the nautilus data.
async fn validate_update_demo(ctx: &Ctx, replicas: usize) -> CaseResult {
    let image = ctx.images().agnhost();
    let pods = ctx.api::<Pod>();
    ctx.wait(
        &format!("{replicas} update-demo pods up"),
        POD_START,
        || async {
            let list = pods
                .list(&ListParams::default().labels(UPDATE_DEMO))
                .await?
                .items;
            if list.len() != replicas {
                return Ok(Err(format!(
                    "replicas for {UPDATE_DEMO}: expected={replicas} actual={}",
                    list.len()
                )));
            }
            for p in &list {
                let name = name_of(p);
                let running = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.name == "update-demo"
                                && c.state.as_ref().is_some_and(|s| s.running.is_some())
                        })
                    });
                if !running {
                    return Ok(Err(format!("{name} is created but not running")));
                }
                let current = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.iter().find(|c| c.name == "update-demo"))
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                if current != image {
                    return Ok(Err(format!(
                        "{name} is running the wrong image: {current}, want {image}"
                    )));
                }
                if let Err(e) = ud_data(ctx, &name).await? {
                    return Ok(Err(e));
                }
            }
            Ok(Ok(()))
        },
    )
    .await
}

/// Update Demo: the nautilus RC MUST run 2 serving replicas; the stop then MUST leave nothing.
async fn update_demo_create_stop(ctx: &Ctx) -> CaseResult {
    let manifest = nautilus(ctx);
    kubectl_input(ctx, &manifest, &["create", "-f", "-"]).await?;
    validate_update_demo(ctx, 2).await?;
    cleanup_inputs(ctx, &manifest, &[UPDATE_DEMO]).await
}

/// Update Demo scale: 2 replicas, `kubectl scale` to 1 (then exactly 1 MUST run), back to 2
/// (then 2 MUST run).
async fn update_demo_scale(ctx: &Ctx) -> CaseResult {
    let manifest = nautilus(ctx);
    kubectl_input(ctx, &manifest, &["create", "-f", "-"]).await?;
    validate_update_demo(ctx, 2).await?;
    for replicas in [1usize, 2] {
        kubectl(
            ctx,
            &[
                "scale",
                "rc",
                NAUTILUS_RC,
                &format!("--replicas={replicas}"),
                "--timeout=5m",
            ],
        )
        .await?;
        validate_update_demo(ctx, replicas).await?;
    }
    cleanup_inputs(ctx, &manifest, &[UPDATE_DEMO]).await
}

// ---- Guestbook -----------------------------------------------------------------------------

/// The guestbook manifests, in upstream's order: the replica, primary and frontend Services, then
/// the frontend (3), primary (1) and replica (2) Deployments, all agnhost's `guestbook`.
fn guestbook_manifests(ctx: &Ctx) -> Vec<Value> {
    let service = |name: &str, labels: Value, port: Value| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {"ports": [port], "selector": labels}
        })
    };
    let deployment = |name: &str, replicas: i32, labels: Value, container: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
            }
        })
    };
    let backend = |role: &str| json!({"app": "agnhost", "role": role, "tier": "backend"});
    let frontend = json!({"app": "guestbook", "tier": "frontend"});
    let gb = |name: &str, args: &[&str], port: i32| {
        agnhost(
            ctx,
            name,
            args,
            json!({
                "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                "ports": [{"containerPort": port}]
            }),
        )
    };
    vec![
        service("agnhost-replica", backend("replica"), json!({"port": 6379})),
        service(
            "agnhost-primary",
            backend("primary"),
            json!({"port": 6379, "targetPort": 6379}),
        ),
        service("frontend", frontend.clone(), json!({"port": 80})),
        deployment(
            "frontend",
            3,
            frontend,
            gb(
                "guestbook-frontend",
                &["guestbook", "--backend-port", "6379"],
                80,
            ),
        ),
        deployment(
            "agnhost-primary",
            1,
            backend("primary"),
            gb("primary", &["guestbook", "--http-port", "6379"], 6379),
        ),
        deployment(
            "agnhost-replica",
            2,
            backend("replica"),
            gb(
                "replica",
                &[
                    "guestbook",
                    "--replicaof",
                    "agnhost-primary",
                    "--http-port",
                    "6379",
                ],
                6379,
            ),
        ),
    ]
}

/// A container of the pod that has ended (exited, or waits to be restarted after exiting): its
/// name, state and last log line, for a failure that says why the app cannot answer.
async fn ended_container(ctx: &Ctx, pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?;
    let c = status.iter().find(|c| {
        c.restart_count > 0 || c.state.as_ref().is_some_and(|s| s.terminated.is_some())
    })?;
    let name = name_of(pod);
    let params = LogParams {
        container: Some(c.name.clone()),
        previous: c.restart_count > 0,
        ..Default::default()
    };
    let log = ctx
        .api::<Pod>()
        .logs(&name, &params)
        .await
        .unwrap_or_default();
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Some(format!(
        "container {} of pod {name} ended ({}); its log ends: {last:?}",
        c.name,
        c.last_state
            .as_ref()
            .or(c.state.as_ref())
            .map(to_json)
            .unwrap_or_default()
    ))
}

/// makeRequestToGuestbook through the API server's services/proxy, until it answers `want`
/// (waitForGuestbookResponse). A 404 from the API server (services/proxy not served) or a
/// frontend container that exited ends the wait.
async fn guestbook_request(
    ctx: &Ctx,
    cmd: &str,
    value: &str,
    want: &str,
    timeout: Duration,
) -> CaseResult {
    let path = format!(
        "/api/v1/namespaces/{}/services/frontend/proxy/guestbook?cmd={cmd}&key=messages&value={value}",
        ctx.ns
    );
    let pods = ctx.api::<Pod>();
    ctx.wait(
        &format!("the guestbook to answer {want} to {cmd}"),
        timeout,
        || async {
            for p in pods
                .list(&ListParams::default().labels("app=guestbook,tier=frontend"))
                .await?
                .items
            {
                if let Some(why) = ended_container(ctx, &p).await {
                    return Err(CaseError::Failed(why));
                }
            }
            let req = http::Request::get(&path)
                .body(Vec::new())
                .map_err(|e| CaseError::Failed(format!("building GET {path}: {e}")))?;
            match ctx.client.request_text(req).await {
                Ok(body) if body == want => Ok(Ok(())),
                Ok(body) => Ok(Err(format!("answer {body:?}"))),
                Err(kube::Error::Api(e)) if e.code == 404 => Err(CaseError::Failed(format!(
                    "GET {path}: 404 {} (the services/proxy subresource is not served?)",
                    e.message
                ))),
                Err(e) => Ok(Err(e.to_string())),
            }
        },
    )
    .await
}

/// Guestbook: the frontend pods MUST run; through the frontend service the store MUST answer
/// empty, take an entry (`Updated`) and then return it.
async fn guestbook(ctx: &Ctx) -> CaseResult {
    let manifests = guestbook_manifests(ctx);
    for m in &manifests {
        kubectl_input(ctx, m, &["create", "-f", "-"]).await?;
    }
    let pods = ctx.api::<Pod>();
    ctx.wait("the frontend pods Running", POD_START, || async {
        let list = pods
            .list(&ListParams::default().labels("app=guestbook,tier=frontend"))
            .await?
            .items;
        for p in &list {
            if let Some(why) = ended_container(ctx, p).await {
                return Err(CaseError::Failed(why));
            }
        }
        Ok(
            if !list.is_empty() && list.iter().all(|p| phase(p) == "Running") {
                Ok(())
            } else {
                Err(format!(
                    "phases {:?}",
                    list.iter().map(phase).collect::<Vec<_>>()
                ))
            },
        )
    })
    .await?;
    guestbook_request(ctx, "get", "", r#"{"data":""}"#, 10 * MINUTE).await?;
    guestbook_request(
        ctx,
        "set",
        "TestEntry",
        r#"{"message":"Updated"}"#,
        3 * MINUTE,
    )
    .await?;
    guestbook_request(ctx, "get", "", r#"{"data":"TestEntry"}"#, 3 * MINUTE).await?;
    for m in &manifests {
        cleanup_inputs(ctx, m, &[]).await?;
    }
    Ok(())
}

// ---- logs ----------------------------------------------------------------------------------

/// `kubectl logs` of a running logs-generator: the log MUST carry its lines; `--tail=1` MUST give
/// one line, `--limit-bytes=1` one byte, `--tail=1 --timestamps` one line starting with an
/// RFC 3339 time; `--since=1s` MUST give fewer lines than `--since=24h`.
async fn logs(ctx: &Ctx) -> CaseResult {
    const POD: &str = "logs-generator";
    let image = format!("--image={}", ctx.images().agnhost());
    kubectl(
        ctx,
        &[
            "run",
            POD,
            &image,
            "--restart=Never",
            POD_RUNNING_TIMEOUT,
            "--command",
            "--",
            "/agnhost",
            "logs-generator",
            "--log-lines-total",
            "100",
            "--run-duration",
            "20s",
        ],
    )
    .await?;
    // CheckPodsRunningReadyOrSucceeded.
    let pods = ctx.api::<Pod>();
    ctx.wait(
        "logs-generator running and ready, or succeeded",
        POD_START,
        || async {
            let p = pods.get(POD).await?;
            Ok(match phase(&p) {
                "Succeeded" => Ok(()),
                "Running" if is_ready(&p) => Ok(()),
                "Failed" => return Err(CaseError::Failed(format!("pod {POD} Failed"))),
                other => Err(format!("phase {other}")),
            })
        },
    )
    .await?;
    ctx.wait(
        "/api/v1/namespaces/kube-system in the log",
        POD_START,
        || async {
            let log = ctx.logs(POD, POD).await?;
            Ok(if log.contains("/api/v1/namespaces/kube-system") {
                Ok(())
            } else {
                Err(log)
            })
        },
    )
    .await?;
    let lines = |out: &str| -> Vec<String> {
        out.trim_end_matches('\n')
            .split('\n')
            .map(str::to_string)
            .collect()
    };

    let out = kubectl(ctx, &["logs", POD, POD, "--tail=1"]).await?;
    must!(!out.is_empty(), "--tail=1 gave nothing");
    must_eq!(lines(&out).len(), 1, "lines of --tail=1 ({out:?})");

    let out = kubectl(ctx, &["logs", POD, POD, "--limit-bytes=1"]).await?;
    must_eq!(lines(&out).len(), 1, "lines of --limit-bytes=1 ({out:?})");
    must_eq!(out.len(), 1, "bytes of --limit-bytes=1 ({out:?})");

    let out = kubectl(ctx, &["logs", POD, POD, "--tail=1", "--timestamps"]).await?;
    let l = lines(&out);
    must_eq!(l.len(), 1, "lines of --tail=1 --timestamps ({out:?})");
    let words: Vec<&str> = l[0].split(' ').collect();
    must!(words.len() > 1, "no timestamp and line in {out:?}");
    let rfc3339 =
        regex::Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
            .expect("regex");
    must!(
        rfc3339.is_match(words[0]),
        "expected {:?} to be RFC3339 or RFC3339Nano",
        words[0]
    );

    // The granularity is a second: wait past two so the start-up lines are older than 1s.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let recent_out = kubectl(ctx, &["logs", POD, POD, "--since=1s"]).await?;
    let older_out = kubectl(ctx, &["logs", POD, POD, "--since=24h"]).await?;
    let (recent, older) = (
        recent_out.split('\n').count(),
        older_out.split('\n').count(),
    );
    must!(
        recent < older,
        "expected recent({recent}) to be less than older({older})\nrecent lines:\n{recent_out}\nolder lines:\n{older_out}"
    );
    kubectl(ctx, &["delete", "pod", POD]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_output_walks_lines_in_order() {
        let out = "Name: a\nNamespace: ns\nLabels: app=x\n  role=y\n";
        assert!(check_output(out, &[&["Name:", "a"], &["Labels:", "app=x"], &["role=y"]]).is_ok());
        assert!(check_output(out, &[&["Labels:"], &["Name:"]]).is_err());
        assert!(check_output(out, &[&["Namespace:", "other"]]).is_err());
    }
}
