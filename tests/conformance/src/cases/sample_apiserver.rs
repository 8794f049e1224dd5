//! The Aggregator entry's fixture, as upstream's SetUpSampleAPIServer builds it: the serving
//! certificate (setupServerCert for `sample-api.<ns>.svc`) in a Secret, RBAC (a ClusterRole to read
//! namespaces, admission and flow-control objects, `system:auth-delegator`, and the kube-system
//! RoleBinding to `extension-apiserver-authentication-reader`, all for the namespace's default
//! service account), the server in a Deployment behind the Service `sample-api` (7443 → 443),
//! and the APIService `v1alpha1.wardle.example.com` with the CA as its caBundle; then the wait
//! until the aggregated API answers. [`cleanup`] removes every cluster-scoped piece.
//!
//! The server is kiln's agnhost `sample-apiserver`. Upstream's pod has an etcd sidecar for the
//! sample server's storage; kiln's keeps its objects in memory (one replica), so the pod has that
//! one container and no etcd image is needed.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};

use super::field_validation::raw;
use super::webhook_server::server_cert;
use crate::ctx::{from_json, to_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};

pub const GROUP: &str = "wardle.example.com";
pub const VERSION: &str = "v1alpha1";
pub const APISERVICE: &str = "v1alpha1.wardle.example.com";
const DEPLOYMENT: &str = "sample-apiserver-deployment";
const SECRET: &str = "sample-apiserver-secret";
const SERVICE: &str = "sample-api";
/// aggregatorServicePort.
const SERVICE_PORT: i32 = 7443;
const CERTS: &str = "/apiserver.local.config/certificates";

/// generateSampleAPIServerObjectNames.
pub struct Names {
    pub namespace: String,
    role_binding: String,
    cluster_role: String,
    cluster_role_binding: String,
    auth_delegator: String,
}

impl Names {
    pub fn new(ns: &str) -> Names {
        Names {
            namespace: ns.to_string(),
            role_binding: format!("wardler-auth-reader-{ns}"),
            cluster_role: format!("sample-apiserver-reader-{ns}"),
            cluster_role_binding: format!("wardler:{ns}sample-apiserver-reader-{ns}"),
            auth_delegator: format!("wardler:{ns}:auth-delegator"),
        }
    }
}

/// A request to the cluster, its status and JSON body.
pub async fn call(
    ctx: &Ctx,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &str,
) -> CaseResult<(u16, Value)> {
    let reply = raw(ctx, method, uri, content_type, body.as_bytes()).await?;
    Ok((
        reply.code,
        serde_json::from_str(&reply.body).unwrap_or(Value::String(reply.body)),
    ))
}

/// A request that MUST succeed; its JSON body.
pub async fn must_call(
    ctx: &Ctx,
    what: &str,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &str,
) -> CaseResult<Value> {
    let (code, v) = call(ctx, method, uri, content_type, body).await?;
    if !(200..300).contains(&code) {
        return Err(CaseError::Failed(format!(
            "{what}: {method} {uri} answered {code}: {v}"
        )));
    }
    Ok(v)
}

fn sa_subject(ns: &str) -> Value {
    json!([{"kind": "ServiceAccount", "name": "default", "namespace": ns}])
}

/// Everything up to the APIService; then waits until the group answers.
pub async fn set_up(ctx: &Ctx, n: &Names) -> CaseResult {
    let ns = &n.namespace;
    let (ca, cert, key) = server_cert(SERVICE, ns)?;
    let pp = PostParams::default();
    let secret: Secret = from_json(json!({"metadata": {"name": SECRET}, "type": "Opaque",
        "stringData": {"tls.crt": cert, "tls.key": key}}))?;
    ctx.api::<Secret>().create(&pp, &secret).await?;

    let read = ["get", "list", "watch"];
    let role: ClusterRole = from_json(json!({"metadata": {"name": n.cluster_role}, "rules": [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": read},
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["*"], "verbs": read},
        {"apiGroups": ["flowcontrol.apiserver.k8s.io"],
         "resources": ["prioritylevelconfigurations", "flowschemas"], "verbs": read},
    ]}))?;
    ctx.all::<ClusterRole>().create(&pp, &role).await?;
    let crbs: Api<ClusterRoleBinding> = ctx.all();
    for (name, role) in [
        (&n.cluster_role_binding, n.cluster_role.as_str()),
        (&n.auth_delegator, "system:auth-delegator"),
    ] {
        let b: ClusterRoleBinding = from_json(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": sa_subject(ns)}))?;
        crbs.create(&pp, &b).await?;
    }

    let image = ctx.images().agnhost();
    let labels = json!({"app": "sample-apiserver", "apiserver": "true"});
    let deployment: Deployment = from_json(json!({
        "metadata": {"name": DEPLOYMENT, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "sample-apiserver",
                        "image": image,
                        "command": ["/agnhost"],
                        "args": ["sample-apiserver", "--etcd-servers=http://127.0.0.1:2379",
                            format!("--tls-cert-file={CERTS}/tls.crt"),
                            format!("--tls-private-key-file={CERTS}/tls.key"),
                            "--audit-log-path=-", "--audit-log-maxage=0", "--audit-log-maxbackup=0"],
                        "readinessProbe": {
                            "httpGet": {"scheme": "HTTPS", "port": 443, "path": "/readyz"},
                            "initialDelaySeconds": 20, "periodSeconds": 1,
                            "successThreshold": 1, "failureThreshold": 3
                        },
                        "volumeMounts": [{"name": "apiserver-certs", "readOnly": true,
                            "mountPath": CERTS}]
                    }],
                    "volumes": [{"name": "apiserver-certs", "secret": {"secretName": SECRET}}]
                }
            }
        }
    }))?;
    let deployments: Api<Deployment> = ctx.api();
    deployments.create(&pp, &deployment).await?;
    // WaitForDeploymentRevisionAndImage(…, "1", image)
    ctx.wait(
        "the sample-apiserver deployment at revision 1 with its image",
        POD_START,
        || async {
            let d = deployments.get(DEPLOYMENT).await?;
            let rev = d
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("deployment.kubernetes.io/revision").cloned());
            let images: Vec<String> = to_json(&d)["spec"]["template"]["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["image"].as_str().map(String::from))
                .collect();
            Ok(if rev.as_deref() == Some("1") && images.contains(&image) {
                Ok(())
            } else {
                Err(format!("revision {rev:?}, images {images:?}"))
            })
        },
    )
    .await?;

    let service: Service = from_json(json!({
        "metadata": {"name": SERVICE, "labels": {"test": "aggregator"}},
        "spec": {"selector": {"apiserver": "true"}, "ports": [{"protocol": "TCP",
            "port": SERVICE_PORT, "targetPort": 443}]}
    }))?;
    ctx.api::<Service>().create(&pp, &service).await?;
    let sa: ServiceAccount = from_json(json!({"metadata": {"name": "sample-apiserver"}}))?;
    ctx.api::<ServiceAccount>().create(&pp, &sa).await?;
    let rb: RoleBinding = from_json(json!({
        "metadata": {"name": n.role_binding,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "", "kind": "Role", "name": "extension-apiserver-authentication-reader"},
        "subjects": sa_subject(ns)}))?;
    Api::<RoleBinding>::namespaced(ctx.client.clone(), "kube-system")
        .create(&pp, &rb)
        .await?;

    // WaitForDeploymentComplete
    ctx.wait(
        "the sample-apiserver deployment to complete",
        POD_START,
        || async {
            let d = deployments.get(DEPLOYMENT).await?;
            let gen = d.metadata.generation.unwrap_or(0);
            let s = d.status.clone().unwrap_or_default();
            let done = s.observed_generation.unwrap_or(0) >= gen
                && s.updated_replicas == Some(1)
                && s.available_replicas == Some(1);
            Ok(if done { Ok(()) } else { Err(format!("{s:?}")) })
        },
    )
    .await?;

    let apiservice = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {"service": {"namespace": ns, "name": SERVICE, "port": SERVICE_PORT},
            "group": GROUP, "version": VERSION,
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
            "groupPriorityMinimum": 2000, "versionPriority": 200}});
    must_call(
        ctx,
        &format!("creating apiservice {APISERVICE}"),
        "POST",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        "application/json",
        &apiservice.to_string(),
    )
    .await?;

    let waited = ctx
        .wait(
            "the sample-apiserver to be ready to handle requests",
            Duration::from_secs(60),
            || async {
                let (code, body) = call(
                    ctx,
                    "GET",
                    &format!("/apis/{GROUP}/{VERSION}/namespaces/default/flunders"),
                    "application/json",
                    "",
                )
                .await?;
                let message = body["message"].as_str().unwrap_or("");
                match code {
                    200..=299 => Ok(Ok(())),
                    403 | 503 => Ok(Err(format!("{code}: {message}"))),
                    404 if message
                        .starts_with("the server could not find the requested resource") =>
                    {
                        Ok(Err(format!("{code}: {message}")))
                    }
                    _ => Err(CaseError::Failed(format!(
                        "listing flunders answered {code}: {body}"
                    ))),
                }
            },
        )
        .await;
    if let Err(e) = waited {
        return Err(CaseError::Failed(format!(
            "gave up waiting for apiservice wardle to come up successfully: {e}\n{}",
            debug_info(ctx).await
        )));
    }
    Ok(())
}

/// What upstream logs when the wait fails: the APIService, the pods and their logs.
pub async fn debug_info(ctx: &Ctx) -> String {
    let uri = format!("/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}");
    let mut out = match call(ctx, "GET", &uri, "application/json", "").await {
        Ok((_, v)) => format!("current APIService: {}", v["status"]),
        Err(e) => format!("current APIService: {e}"),
    };
    let pods: Api<Pod> = ctx.api();
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for p in list.items {
            let name = p.metadata.name.clone().unwrap_or_default();
            let log = ctx
                .logs(&name, "sample-apiserver")
                .await
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            out.push_str(&format!(
                "\npod {name}: {}\nlogs of {name}/sample-apiserver (last lines, newest first):\n{}",
                crate::ctx::describe_status(&p),
                tail.join("\n")
            ));
        }
    }
    out
}

/// cleanupSampleAPIServer: the APIService first (so discovery stops naming the group), then
/// the namespaced pieces and the cluster-scoped RBAC.
pub async fn cleanup(ctx: &Ctx, n: &Names) {
    let dp = DeleteParams::default();
    let _ = call(
        ctx,
        "DELETE",
        &format!("/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}"),
        "application/json",
        "",
    )
    .await;
    let _ = ctx.api::<Deployment>().delete(DEPLOYMENT, &dp).await;
    let _ = ctx.api::<Secret>().delete(SECRET, &dp).await;
    let _ = ctx.api::<Service>().delete(SERVICE, &dp).await;
    let _ = ctx
        .api::<ServiceAccount>()
        .delete("sample-apiserver", &dp)
        .await;
    let _ = Api::<RoleBinding>::namespaced(ctx.client.clone(), "kube-system")
        .delete(&n.role_binding, &dp)
        .await;
    let crbs: Api<ClusterRoleBinding> = ctx.all();
    let _ = crbs.delete(&n.auth_delegator, &dp).await;
    let _ = ctx.all::<ClusterRole>().delete(&n.cluster_role, &dp).await;
    let _ = crbs.delete(&n.cluster_role_binding, &dp).await;
}
