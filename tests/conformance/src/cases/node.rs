//! sig-node entries: pods, environment (downward API, variable expansion, Service variables), logs,
//! ConfigMaps and Secrets as environment. Each case restates the entry's MUSTs in its doc comment.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::PostParams;
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
        "pods",
        host_ip
    ),
    case!(
        "[sig-node] Pods should contain environment variables for services [NodeConformance] [Conformance]",
        "pods",
        service_env
    ),
    case!(
        "[sig-node] Downward API should provide pod name, namespace and IP address as env vars [NodeConformance] [Conformance]",
        "downward-api",
        downward_pod_env
    ),
    case!(
        "[sig-node] Downward API should provide host IP as an env var [NodeConformance] [Conformance]",
        "downward-api",
        downward_host_ip
    ),
    case!(
        "[sig-node] Variable Expansion should allow composing env vars into new env vars [NodeConformance] [Conformance]",
        "var-expansion",
        compose_env
    ),
    case!(
        "[sig-node] Variable Expansion should allow substituting values in a container's command [NodeConformance] [Conformance]",
        "var-expansion",
        expand_command
    ),
    case!(
        "[sig-node] Variable Expansion should allow substituting values in a container's args [NodeConformance] [Conformance]",
        "var-expansion",
        expand_args
    ),
    case!(
        "[sig-node] Kubelet when scheduling a busybox command in a pod should print the output to logs [NodeConformance] [Conformance]",
        "kubelet-test",
        busybox_logs
    ),
    case!(
        "[sig-node] ConfigMap should be consumable via environment variable [NodeConformance] [Conformance]",
        "configmap",
        configmap_env
    ),
    case!(
        "[sig-node] ConfigMap should be consumable via the environment [NodeConformance] [Conformance]",
        "configmap",
        configmap_env_from
    ),
    case!(
        "[sig-node] Secrets should be consumable from pods in env vars [NodeConformance] [Conformance]",
        "secrets",
        secret_env
    ),
    case!(
        "[sig-node] Secrets should be consumable via the environment [NodeConformance] [Conformance]",
        "secrets",
        secret_env_from
    ),
];

/// A pod whose one container `c` runs `sh -c <script>` in busybox and ends (restartPolicy Never).
fn shell_pod(ctx: &Ctx, name: &str, script: &str, env: serde_json::Value) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "c",
                "image": ctx.images().busybox(),
                "command": ["sh", "-c", script],
                "env": env,
            }],
        },
    }))
}

/// Pods, assigned hostip: a created pod's status MUST carry a valid host IP.
async fn host_ip(ctx: &Ctx) -> CaseResult {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "pod-hostip"},
        "spec": {"containers": [{"name": "test", "image": ctx.images().pause()}]},
    }))?;
    ctx.create_pod(&pod).await?;
    let pod = ctx.wait_running("pod-hostip").await?;
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.host_ip.clone())
        .unwrap_or_default();
    must!(
        ip.parse::<std::net::IpAddr>().is_ok(),
        "status.hostIP {ip:?} is not an IP address"
    );
    let ips: Vec<String> = pod
        .status
        .and_then(|s| s.host_ips)
        .unwrap_or_default()
        .into_iter()
        .map(|h| h.ip)
        .collect();
    must!(
        ips.first() == Some(&ip),
        "status.hostIPs {ips:?} does not start with hostIP {ip}"
    );
    Ok(())
}

/// Pods, service environment variables: with a server pod behind Service `fooservice` (port 8765 →
/// 8080), a pod created afterwards MUST see FOOSERVICE_SERVICE_HOST, _SERVICE_PORT, _PORT,
/// _PORT_8765_TCP(_PORT|_PROTO|_ADDR) with the Service's values.
async fn service_env(ctx: &Ctx) -> CaseResult {
    let server: Pod = from_json(json!({
        "metadata": {"name": "server-envvars", "labels": {"name": "server-envvars"}},
        "spec": {"containers": [{
            "name": "srv",
            "image": ctx.images().busybox(),
            "command": ["httpd", "-f", "-p", "8080"],
            "ports": [{"containerPort": 8080}],
        }]},
    }))?;
    ctx.create_pod(&server).await?;
    ctx.wait_running("server-envvars").await?;
    let svc: Service = from_json(json!({
        "metadata": {"name": "fooservice", "labels": {"name": "fooservice"}},
        "spec": {
            "selector": {"name": "server-envvars"},
            "ports": [{"port": 8765, "targetPort": 8080}],
        },
    }))?;
    let svc = ctx
        .api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    let ip = svc.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    must!(!ip.is_empty(), "fooservice got no clusterIP");
    let client = shell_pod(ctx, "client-envvars", "env", json!([]))?;
    ctx.expect_output(
        &client,
        "c",
        &[
            &format!("FOOSERVICE_SERVICE_HOST={ip}"),
            "FOOSERVICE_SERVICE_PORT=8765",
            &format!("FOOSERVICE_PORT=tcp://{ip}:8765"),
            &format!("FOOSERVICE_PORT_8765_TCP=tcp://{ip}:8765"),
            "FOOSERVICE_PORT_8765_TCP_PROTO=tcp",
            "FOOSERVICE_PORT_8765_TCP_PORT=8765",
            &format!("FOOSERVICE_PORT_8765_TCP_ADDR={ip}"),
        ],
    )
    .await?;
    Ok(())
}

fn field(name: &str, path: &str) -> serde_json::Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}})
}

/// DownwardAPI, environment for name, namespace and ip: POD_NAME, POD_NAMESPACE and POD_IP MUST be
/// the pod's name, namespace and an IP address.
async fn downward_pod_env(ctx: &Ctx) -> CaseResult {
    let pod = shell_pod(
        ctx,
        "downward-api-env",
        "env",
        json!([
            field("POD_NAME", "metadata.name"),
            field("POD_NAMESPACE", "metadata.namespace"),
            field("POD_IP", "status.podIP"),
        ]),
    )?;
    let log = ctx
        .expect_output(
            &pod,
            "c",
            &[
                "POD_NAME=downward-api-env",
                &format!("POD_NAMESPACE={}", ctx.ns),
            ],
        )
        .await?;
    let ip = env_value(&log, "POD_IP");
    must!(
        ip.as_deref()
            .is_some_and(|v| v.parse::<std::net::IpAddr>().is_ok()),
        "POD_IP is {ip:?}, not an IP address"
    );
    Ok(())
}

/// DownwardAPI, environment for host ip: HOST_IP MUST be an IP address (the node's).
async fn downward_host_ip(ctx: &Ctx) -> CaseResult {
    let pod = shell_pod(
        ctx,
        "downward-api-hostip",
        "env",
        json!([field("HOST_IP", "status.hostIP")]),
    )?;
    let log = ctx.expect_output(&pod, "c", &["HOST_IP="]).await?;
    let ip = env_value(&log, "HOST_IP");
    let status_ip = ctx
        .api::<Pod>()
        .get("downward-api-hostip")
        .await?
        .status
        .and_then(|s| s.host_ip);
    must!(
        ip.as_deref()
            .is_some_and(|v| v.parse::<std::net::IpAddr>().is_ok()),
        "HOST_IP is {ip:?}, not an IP address"
    );
    must_eq!(ip, status_ip, "HOST_IP against status.hostIP");
    Ok(())
}

fn env_value(log: &str, key: &str) -> Option<String> {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
}

/// Environment variables, expansion: FOOBAR=$(FOO);;$(BAR) MUST be expanded from FOO and BAR.
async fn compose_env(ctx: &Ctx) -> CaseResult {
    let pod = shell_pod(
        ctx,
        "var-expansion",
        "env",
        json!([
            {"name": "FOO", "value": "foo-value"},
            {"name": "BAR", "value": "bar-value"},
            {"name": "FOOBAR", "value": "$(FOO);;$(BAR)"},
        ]),
    )?;
    ctx.expect_output(
        &pod,
        "c",
        &[
            "FOO=foo-value",
            "BAR=bar-value",
            "FOOBAR=foo-value;;bar-value",
        ],
    )
    .await?;
    Ok(())
}

/// Environment variables, command expansion: $(TEST_VAR) in the command MUST be replaced by its value.
async fn expand_command(ctx: &Ctx) -> CaseResult {
    // The kubelet expands $(TEST_VAR) in the command before the shell sees it.
    let pod = shell_pod(
        ctx,
        "var-expansion-command",
        "echo \"test-value is $(TEST_VAR)\"",
        json!([{"name": "TEST_VAR", "value": "test-value"}]),
    )?;
    ctx.expect_output(&pod, "c", &["test-value is test-value"])
        .await?;
    Ok(())
}

/// Environment variables, command argument expansion: $(TEST_VAR) in args MUST be replaced.
async fn expand_args(ctx: &Ctx) -> CaseResult {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "var-expansion-args"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "c",
                "image": ctx.images().busybox(),
                "command": ["sh", "-c"],
                "args": ["echo \"test-value is $(TEST_VAR)\""],
                "env": [{"name": "TEST_VAR", "value": "test-value"}],
            }],
        },
    }))?;
    ctx.expect_output(&pod, "c", &["test-value is test-value"])
        .await?;
    Ok(())
}

/// Kubelet, log output, default: a busybox pod echoing 'Hello World' MUST have exactly that in its log.
async fn busybox_logs(ctx: &Ctx) -> CaseResult {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "busybox-scheduling"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "c",
                "image": ctx.images().busybox(),
                "command": ["sh", "-c", "echo 'Hello World' ; sleep 6000"],
            }],
        },
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("busybox-scheduling").await?;
    let log = ctx
        .wait(
            "the pod's log",
            std::time::Duration::from_secs(60),
            || async {
                let log = ctx.logs("busybox-scheduling", "c").await?;
                Ok(if log == "Hello World\n" {
                    Ok(log)
                } else {
                    Err(format!("{log:?}"))
                })
            },
        )
        .await?;
    must_eq!(log, "Hello World\n", "the log");
    Ok(())
}

async fn create_configmap(ctx: &Ctx, name: &str, data: serde_json::Value) -> CaseResult {
    let cm: ConfigMap = from_json(json!({"metadata": {"name": name}, "data": data}))?;
    ctx.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

async fn create_secret(ctx: &Ctx, name: &str, data: serde_json::Value) -> CaseResult {
    let s: Secret = from_json(json!({"metadata": {"name": name}, "stringData": data}))?;
    ctx.api::<Secret>()
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

/// ConfigMap, from environment field: a key referenced by configMapKeyRef MUST be the env var's value.
async fn configmap_env(ctx: &Ctx) -> CaseResult {
    create_configmap(ctx, "configmap-test", json!({"data-1": "value-1"})).await?;
    let pod = shell_pod(
        ctx,
        "pod-configmaps",
        "env",
        json!([{"name": "CONFIG_DATA_1", "valueFrom": {"configMapKeyRef": {"name": "configmap-test", "key": "data-1"}}}]),
    )?;
    ctx.expect_output(&pod, "c", &["CONFIG_DATA_1=value-1"])
        .await?;
    Ok(())
}

/// The envFrom entries' shared body: the source `<kind>` named `name` holds data-1..3; a pod with two
/// envFrom entries for it (one with prefix `p-`) MUST see every key, plain and prefixed.
async fn expect_env_from(ctx: &Ctx, pod: &str, reference: &str, name: &str) -> CaseResult {
    let mut pod = shell_pod(ctx, pod, "env", json!([]))?;
    if let Some(spec) = pod.spec.as_mut() {
        // `env` itself, not `sh -c env` as upstream: the lab's busybox is Debian 12's 1.35, whose
        // ash drops variables named like `data-1` (not shell identifiers) before running a child;
        // upstream's busybox image keeps them. The kubelet's share, the process environment, is
        // what this checks either way.
        spec.containers[0].command = Some(vec!["env".to_string()]);
        spec.containers[0].env_from = Some(from_json(json!([
            {reference: {"name": name}},
            {"prefix": "p-", reference: {"name": name}},
        ]))?);
    }
    ctx.expect_output(
        &pod,
        "c",
        &[
            "data-1=value-1",
            "data-2=value-2",
            "data-3=value-3",
            "p-data-1=value-1",
            "p-data-2=value-2",
            "p-data-3=value-3",
        ],
    )
    .await?;
    Ok(())
}

fn three_keys() -> serde_json::Value {
    json!({"data-1": "value-1", "data-2": "value-2", "data-3": "value-3"})
}

/// ConfigMap, from environment variables: envFrom with a prefix MUST expose every key, prefixed.
async fn configmap_env_from(ctx: &Ctx) -> CaseResult {
    create_configmap(ctx, "configmap-envfrom", three_keys()).await?;
    expect_env_from(
        ctx,
        "pod-configmaps-envfrom",
        "configMapRef",
        "configmap-envfrom",
    )
    .await
}

/// Secrets, pod environment field: a key referenced by secretKeyRef MUST be the env var's value.
async fn secret_env(ctx: &Ctx) -> CaseResult {
    create_secret(ctx, "secret-test", json!({"data-1": "value-1"})).await?;
    let pod = shell_pod(
        ctx,
        "pod-secrets",
        "env",
        json!([{"name": "SECRET_DATA", "valueFrom": {"secretKeyRef": {"name": "secret-test", "key": "data-1"}}}]),
    )?;
    ctx.expect_output(&pod, "c", &["SECRET_DATA=value-1"])
        .await?;
    Ok(())
}

/// Secrets, pod environment from source: envFrom (with and without a prefix) MUST expose every key.
async fn secret_env_from(ctx: &Ctx) -> CaseResult {
    create_secret(ctx, "secret-envfrom", three_keys()).await?;
    expect_env_from(ctx, "pod-secrets-envfrom", "secretRef", "secret-envfrom").await
}
