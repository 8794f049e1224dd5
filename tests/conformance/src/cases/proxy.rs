//! sig-network "Proxy version v1" entries, written from upstream's test/e2e/network/proxy.go: the
//! API server's pods/proxy and services/proxy subresources carry every HTTP method (with and without
//! a path after `/proxy`) to agnhost's porter, redirect `…/proxy` to `…/proxy/` for GET and HEAD, and
//! reach a pod's and a service's ports by number, by name and over TLS, rewriting the page's links
//! to go through the proxy again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::must;

pub const CASES: &[Case] = &[
    case!(
        "[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service Proxy [Conformance]",
        "proxy",
        valid_responses_proxy
    ),
    case!(
        "[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service ProxyWithPath [Conformance]",
        "proxy",
        valid_responses_proxy_with_path
    ),
    case!(
        "[sig-network] Proxy version v1 should proxy through a service and a pod [Conformance]",
        "proxy",
        through_service_and_pod
    ),
];

/// proxyAttempts: every expectation of the service-and-pod table is tried this many times.
const PROXY_ATTEMPTS: usize = 20;
/// proxyHTTPCallTimeout: no proxied call may take longer.
const PROXY_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// requestRetryTimeout: how long a method's valid answer may take to come.
const REQUEST_RETRY: Duration = Duration::from_secs(60);

/// One request through the API server; redirects are not followed (the client's CheckRedirect
/// returns ErrUseLastResponse upstream). The status and the body.
async fn request(ctx: &Ctx, method: &str, path: &str) -> CaseResult<(u16, Vec<u8>)> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(kube::client::Body::empty())
        .map_err(|e| CaseError::Failed(format!("building {method} {path}: {e}")))?;
    let resp = ctx.client.send(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await?;
    Ok((status, body.to_vec()))
}

/// The test pod both method entries use: porter answering `{"Method": …, "Body": "foo"}` on :80.
async fn porter_pod(ctx: &Ctx, labels: Value) -> CaseResult<()> {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "agnhost", "labels": labels},
        "spec": {
            "containers": [{
                "name": "agnhost",
                "image": ctx.images().agnhost(),
                "command": ["/agnhost", "porter", "--json-response"],
                "env": [{"name": "SERVE_PORT_80", "value": "foo"}]
            }],
            "restartPolicy": "Never"
        }
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("agnhost").await?;
    Ok(())
}

async fn port_80_service(ctx: &Ctx, name: &str, labels: Value) -> CaseResult<()> {
    let svc: Service = from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "ports": [{"port": 80, "targetPort": 80, "protocol": "TCP"}],
            "selector": labels
        }
    }))?;
    ctx.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    Ok(())
}

/// validateProxyVerbRequest, polled: the answer MUST be 200 and, but for HEAD, porter's JSON
/// naming the request's method and the value `msg`.
async fn valid_verb_response(ctx: &Ctx, path: &str, method: &str, msg: &str) -> CaseResult {
    ctx.wait(
        &format!("a valid {method} answer from {path}"),
        REQUEST_RETRY,
        || async {
            let (status, body) = request(ctx, method, path).await?;
            let text = String::from_utf8_lossy(&body).into_owned();
            if method == "HEAD" {
                return Ok(if status == 200 {
                    Ok(())
                } else {
                    Err(format!("status {status}"))
                });
            }
            let answer: Value = match serde_json::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    return Ok(Err(format!(
                        "status {status}, not porter's JSON ({e}): {text}"
                    )))
                }
            };
            Ok(
                if status == 200 && answer["Body"] == msg && answer["Method"] == method {
                    Ok(())
                } else {
                    Err(format!("status {status}: {text}"))
                },
            )
        },
    )
    .await
}

/// validateRedirectRequest: the answer MUST be 301.
async fn redirected(ctx: &Ctx, path: &str, method: &str) -> CaseResult {
    let (status, body) = request(ctx, method, path).await?;
    must!(
        status == 301,
        "{method} {path}: the resp.StatusCode returned: {status} ({})",
        String::from_utf8_lossy(&body)
    );
    Ok(())
}

/// Proxy: DELETE, OPTIONS, PATCH, POST and PUT on the pod's and the service's `…/proxy?method=X`
/// MUST reach porter (200, its JSON with the method); GET and HEAD there MUST be answered 301.
async fn valid_responses_proxy(ctx: &Ctx) -> CaseResult {
    let labels = json!({"e2e-test": "proxy-endpoints"});
    porter_pod(ctx, labels.clone()).await?;
    let svc = "e2e-proxy-test-service";
    port_80_service(ctx, svc, labels).await?;
    let pod_url = format!("/api/v1/namespaces/{}/pods/agnhost/proxy", ctx.ns);
    let svc_url = format!("/api/v1/namespaces/{}/services/{svc}/proxy", ctx.ns);
    for verb in ["DELETE", "OPTIONS", "PATCH", "POST", "PUT"] {
        valid_verb_response(ctx, &format!("{pod_url}?method={verb}"), verb, "foo").await?;
    }
    for verb in ["DELETE", "OPTIONS", "PATCH", "POST", "PUT"] {
        valid_verb_response(ctx, &format!("{svc_url}?method={verb}"), verb, "foo").await?;
    }
    for verb in ["GET", "HEAD"] {
        redirected(ctx, &format!("{pod_url}?method={verb}"), verb).await?;
        redirected(ctx, &format!("{svc_url}?method={verb}"), verb).await?;
    }
    Ok(())
}

/// ProxyWithPath: every method on the pod's and the service's `…/proxy/some/path/with/X` MUST
/// be answered 200 by porter (with its JSON, but for HEAD).
async fn valid_responses_proxy_with_path(ctx: &Ctx) -> CaseResult {
    let labels = json!({"test": "response"});
    porter_pod(ctx, labels.clone()).await?;
    port_80_service(ctx, "test-service", labels).await?;
    let verbs = ["DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"];
    for verb in verbs {
        let path = format!(
            "/api/v1/namespaces/{}/pods/agnhost/proxy/some/path/with/{verb}",
            ctx.ns
        );
        valid_verb_response(ctx, &path, verb, "foo").await?;
    }
    for verb in verbs {
        let path = format!(
            "/api/v1/namespaces/{}/services/test-service/proxy/some/path/with/{verb}",
            ctx.ns
        );
        valid_verb_response(ctx, &path, verb, "foo").await?;
    }
    Ok(())
}

/// The porter deployment of the service-and-pod entry (e2edeployment.NewDeployment, Recreate).
fn porter_deployment(ctx: &Ctx, name: &str, labels: &Value) -> Value {
    let env: Vec<Value> = [
        ("SERVE_PORT_80", r#"<a href="/rewriteme">test</a>"#),
        ("SERVE_PORT_1080", r#"<a href="/rewriteme">test</a>"#),
        ("SERVE_PORT_160", "foo"),
        ("SERVE_PORT_162", "bar"),
        ("SERVE_TLS_PORT_443", r#"<a href="/tlsrewriteme">test</a>"#),
        ("SERVE_TLS_PORT_460", "tls baz"),
        ("SERVE_TLS_PORT_462", "tls qux"),
    ]
    .iter()
    .map(|(k, v)| json!({"name": k, "value": v}))
    .collect();
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": name,
                        "image": ctx.images().agnhost(),
                        "command": ["/agnhost", "porter"],
                        "env": env,
                        "ports": [
                            {"containerPort": 80},
                            {"name": "dest1", "containerPort": 160},
                            {"name": "dest2", "containerPort": 162},
                            {"name": "tlsdest1", "containerPort": 460},
                            {"name": "tlsdest2", "containerPort": 462}
                        ],
                        "readinessProbe": {
                            "httpGet": {"port": 80},
                            "initialDelaySeconds": 1,
                            "timeoutSeconds": 5,
                            "periodSeconds": 10
                        }
                    }]
                }
            }
        }
    })
}

/// WaitForDeploymentComplete: every replica updated and available, the generation observed.
async fn deployment_complete(ctx: &Ctx, name: &str) -> CaseResult {
    let deployments = ctx.api::<Deployment>();
    ctx.wait(
        &format!("deployment {name} complete"),
        POD_START,
        || async {
            let d = deployments.get(name).await?;
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let generation = d.metadata.generation.unwrap_or(0);
            let s = d.status.clone().unwrap_or_default();
            let done = s.observed_generation.unwrap_or(0) >= generation
                && s.updated_replicas.unwrap_or(0) == want
                && s.replicas.unwrap_or(0) == want
                && s.available_replicas.unwrap_or(0) == want;
            Ok(if done {
                Ok(())
            } else {
                Err(format!("status {s:?}"))
            })
        },
    )
    .await
}

/// waitForEndpoint: the service's Endpoints MUST get an address within a minute.
async fn endpoint_ready(ctx: &Ctx, name: &str) -> CaseResult {
    let endpoints = ctx.api::<Endpoints>();
    ctx.wait(
        &format!("endpoints {}/{name}", ctx.ns),
        Duration::from_secs(60),
        || async {
            let ready = endpoints.get_opt(name).await?.is_some_and(|e| {
                e.subsets
                    .as_ref()
                    .and_then(|s| s.first())
                    .and_then(|s| s.addresses.as_ref())
                    .is_some_and(|a| !a.is_empty())
            });
            Ok(if ready { Ok(()) } else { Err("not ready yet") })
        },
    )
    .await
}

/// `scheme:name:port` as net.JoinSchemeNamePort writes it.
fn join_scheme_name_port(scheme: &str, name: &str, port: &str) -> String {
    match (scheme, port) {
        (_, "") => name.to_string(),
        ("", p) => format!("{name}:{p}"),
        (s, p) => format!("{s}:{name}:{p}"),
    }
}

/// doProxy: one GET of `path` (an error status is an error, as the REST client's Do().Raw()).
async fn do_proxy(ctx: &Ctx, attempt: usize, path: &str, want: &str) -> Option<String> {
    let start = Instant::now();
    // kube-rs retries a 503 with backoff for minutes; a call that outlives the bound fails anyway.
    let got = tokio::time::timeout(PROXY_CALL_TIMEOUT, request(ctx, "GET", path)).await;
    let took = start.elapsed();
    let (status, body) = match got {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Some(format!("{attempt}: path {path} gave error: {e}")),
        Err(_) => {
            return Some(format!(
                "{attempt}: path {path} took more than {PROXY_CALL_TIMEOUT:?} (no answer; a 503 is retried by the client)"
            ))
        }
    };
    let body = String::from_utf8_lossy(&body).into_owned();
    let mut errs = Vec::new();
    if !(200..300).contains(&status) {
        return Some(format!(
            "{attempt} ({status}; {took:?}): path {path} gave status error: {body}"
        ));
    }
    if status != 200 {
        errs.push(format!("{attempt}: path {path} gave status: {status}"));
    }
    if body != want {
        errs.push(format!("{attempt}: path {path}: wanted {want}, got {body}"));
    }
    if took > PROXY_CALL_TIMEOUT {
        errs.push(format!(
            "{attempt}: path {path} took {took:?} > {PROXY_CALL_TIMEOUT:?}"
        ));
    }
    (!errs.is_empty()).then(|| errs.join("\n"))
}

/// Through a service and a pod: a porter deployment behind a four-port service; every entry of
/// the table (service ports by name with and without `http:`, TLS ports with `https:`, the pod's
/// ports by number, its first port when none is named, TLS with `https:`) MUST answer 200 with the
/// port's text, links rewritten under the proxy path, each of 20 times.
async fn through_service_and_pod(ctx: &Ctx) -> CaseResult {
    let labels = json!({"proxy-service-target": "true"});
    let svc: Service = from_json(json!({
        "metadata": {"generateName": "proxy-service-"},
        "spec": {
            "selector": labels,
            "ports": [
                {"name": "portname1", "port": 80, "targetPort": "dest1"},
                {"name": "portname2", "port": 81, "targetPort": 162},
                {"name": "tlsportname1", "port": 443, "targetPort": "tlsdest1"},
                {"name": "tlsportname2", "port": 444, "targetPort": 462}
            ]
        }
    }))?;
    let svc = ctx
        .api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    let name = svc.metadata.name.clone().unwrap_or_default();

    let deployment: Deployment = from_json(porter_deployment(ctx, &name, &labels))?;
    let deployments = ctx.api::<Deployment>();
    deployments
        .create(&PostParams::default(), &deployment)
        .await?;
    let result = proxy_table(ctx, &name).await;
    let _ = deployments.delete(&name, &DeleteParams::default()).await;
    result
}

async fn proxy_table(ctx: &Ctx, name: &str) -> CaseResult {
    deployment_complete(ctx, name).await?;
    let pods = ctx
        .api::<Pod>()
        .list(&ListParams::default().labels("proxy-service-target=true"))
        .await?
        .items;
    let pod = pods
        .iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .and_then(|p| p.metadata.name.clone())
        .ok_or_else(|| CaseError::Failed(format!("no pod of deployment {name}")))?;
    endpoint_ready(ctx, name).await?;

    let prefix = format!("/api/v1/namespaces/{}", ctx.ns);
    let svc_url = |s: &str, p: &str| {
        format!(
            "{prefix}/services/{}/proxy",
            join_scheme_name_port(s, name, p)
        )
    };
    let pod_url =
        |s: &str, p: &str| format!("{prefix}/pods/{}/proxy", join_scheme_name_port(s, &pod, p));
    let link = |url: String, to: &str| format!(r#"<a href="{url}/{to}">test</a>"#);
    let expectations: BTreeMap<String, String> = [
        (svc_url("", "portname1"), "foo".to_string()),
        (svc_url("http", "portname1"), "foo".into()),
        (svc_url("", "portname2"), "bar".into()),
        (svc_url("http", "portname2"), "bar".into()),
        (svc_url("https", "tlsportname1"), "tls baz".into()),
        (svc_url("https", "tlsportname2"), "tls qux".into()),
        (pod_url("", ""), link(pod_url("", ""), "rewriteme")),
        (pod_url("", "1080"), link(pod_url("", "1080"), "rewriteme")),
        (
            pod_url("http", "1080"),
            link(pod_url("http", "1080"), "rewriteme"),
        ),
        (pod_url("", "160"), "foo".into()),
        (pod_url("http", "160"), "foo".into()),
        (pod_url("", "162"), "bar".into()),
        (pod_url("http", "162"), "bar".into()),
        (
            pod_url("https", "443"),
            link(pod_url("https", "443"), "tlsrewriteme"),
        ),
        (pod_url("https", "460"), "tls baz".into()),
        (pod_url("https", "462"), "tls qux".into()),
    ]
    .into_iter()
    .map(|(url, want)| (format!("{url}/"), want))
    .collect();

    let mut errs = Vec::new();
    for attempt in 0..PROXY_ATTEMPTS {
        let round = futures::future::join_all(
            expectations
                .iter()
                .map(|(path, want)| do_proxy(ctx, attempt, path, want)),
        )
        .await;
        errs.extend(round.into_iter().flatten());
        // A failed round fails the case; the remaining rounds could only add to the list.
        if !errs.is_empty() {
            break;
        }
    }
    if errs.is_empty() {
        return Ok(());
    }
    let logs = ctx
        .logs(&pod, name)
        .await
        .unwrap_or_else(|e| format!("(no logs: {e})"));
    // The first round's worth of errors says what is wrong; the rest are counted.
    let shown = errs.len().min(expectations.len());
    Err(CaseError::Failed(format!(
        "{}{}\npod {pod} logs: {logs}",
        errs[..shown].join("\n"),
        if errs.len() > shown {
            format!("\n… and {} more", errs.len() - shown)
        } else {
            String::new()
        }
    )))
}
