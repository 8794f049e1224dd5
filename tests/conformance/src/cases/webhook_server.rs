//! The sample webhook the AdmissionWebhook entries register: agnhost's `webhook` subcommand in a
//! Deployment behind the Service `e2e-test-webhook` (8443 → 8444), serving a certificate for
//! `e2e-test-webhook.<namespace>.svc` from a CA of the case's own — upstream's BeforeEach
//! (setupServerCert, deployWebhookAndService, labelNamespace, the markers namespace), and the
//! webhook fixtures its entries share.
//!
//! Every webhook is scoped by a namespace or object selector on the case's unique label, so cases
//! running side by side never see each other's hooks; [`WebhookServer::teardown`] removes the
//! markers namespace and every webhook configuration named after the case.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use rand::Rng;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::{json, Value};

use crate::ctx::{from_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};

/// One of upstream's sample servers: an agnhost subcommand in a Deployment behind a Service, its
/// certificate in a Secret; the names and ports upstream's BeforeEach gives it.
#[derive(Debug)]
pub struct Sample {
    pub subcommand: &'static str,
    pub service: &'static str,
    secret: &'static str,
    deployment: &'static str,
    container: &'static str,
    volume: &'static str,
    /// The `app` label of the pods.
    app: &'static str,
    /// The label (`"true"`) the Service selects.
    selector: &'static str,
    service_port: i32,
    container_port: i32,
}

/// webhook.go's deployWebhookAndService: agnhost `webhook`.
pub const ADMISSION: Sample = Sample {
    subcommand: "webhook",
    service: "e2e-test-webhook",
    secret: "sample-webhook-secret",
    deployment: "sample-webhook-deployment",
    container: "sample-webhook",
    volume: "webhook-certs",
    app: "sample-webhook",
    selector: "webhook",
    service_port: 8443,
    container_port: 8444,
};

/// crd_conversion_webhook.go's deployCustomResourceWebhookAndService: agnhost
/// `crd-conversion-webhook`.
pub const CONVERSION: Sample = Sample {
    subcommand: "crd-conversion-webhook",
    service: "e2e-test-crd-conversion-webhook",
    secret: "sample-custom-resource-conversion-webhook-secret",
    deployment: "sample-crd-conversion-webhook-deployment",
    container: "sample-crd-conversion-webhook",
    volume: "crd-conversion-webhook-certs",
    app: "sample-crd-conversion-webhook",
    selector: "crd-webhook",
    service_port: 9443,
    container_port: 9444,
};

/// Upstream's wait.PollUntilContextTimeout(…, 100ms, 30s, …) for webhook effects.
pub const SETTLE: Duration = Duration::from_secs(30);

pub struct WebhookServer {
    /// The case's namespace, also its unique label key (upstream's f.UniqueName).
    pub ns: String,
    /// Where readiness markers are created (labelled `<ns>-markers: "true"`); empty for the
    /// conversion webhook, which has none.
    pub markers: String,
    /// The CA that signed the server's certificate, base64 for `caBundle`.
    pub ca_bundle: String,
    pub sample: &'static Sample,
}

fn cert_error(e: rcgen::Error) -> CaseError {
    CaseError::Failed(format!("making the webhook's certificate: {e}"))
}

/// setupServerCert: a CA and a serving certificate for `<service>.<namespace>.svc`.
pub(super) fn server_cert(service: &str, ns: &str) -> CaseResult<(String, String, String)> {
    let ca_key = KeyPair::generate().map_err(cert_error)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
    ca.distinguished_name
        .push(DnType::CommonName, "e2e-server-cert-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).map_err(cert_error)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().map_err(cert_error)?;
    let host = format!("{service}.{ns}.svc");
    let mut params = CertificateParams::new(vec![host.clone()]).map_err(cert_error)?;
    params.distinguished_name.push(DnType::CommonName, host);
    let cert = params.signed_by(&key, &issuer).map_err(cert_error)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

impl WebhookServer {
    /// Label the namespace, make the markers namespace, and run the webhook until its Service
    /// has a ready endpoint.
    pub async fn deploy(ctx: &Ctx) -> CaseResult<WebhookServer> {
        let ns = ctx.ns.clone();
        let namespaces: Api<Namespace> = ctx.all();
        namespaces
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {ns.as_str(): "true"}}})),
            )
            .await?;
        let suffix: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(5)
            .map(|c| char::from(c).to_ascii_lowercase())
            .collect();
        let markers = format!("webhook-markers-{suffix}");
        namespaces
            .create(
                &PostParams::default(),
                &from_json(json!({"metadata": {"name": markers,
                    "labels": {format!("{ns}-markers"): "true"}}}))?,
            )
            .await?;
        WebhookServer::run(ctx, &ADMISSION, markers).await
    }

    /// The conversion webhook's BeforeEach: its server only (no labels, no markers).
    pub async fn deploy_conversion(ctx: &Ctx) -> CaseResult<WebhookServer> {
        WebhookServer::run(ctx, &CONVERSION, String::new()).await
    }

    async fn run(ctx: &Ctx, sample: &'static Sample, markers: String) -> CaseResult<WebhookServer> {
        let server = WebhookServer {
            ns: ctx.ns.clone(),
            markers,
            ca_bundle: String::new(),
            sample,
        };
        match server.start(ctx).await {
            Ok(ca) => Ok(WebhookServer {
                ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca),
                ..server
            }),
            Err(e) => {
                server.teardown(ctx).await;
                Err(e)
            }
        }
    }

    /// The Secret, Deployment and Service; returns the CA's PEM.
    async fn start(&self, ctx: &Ctx) -> CaseResult<String> {
        let x = self.sample;
        let (ca, cert, key) = server_cert(x.service, &self.ns)?;
        let pp = PostParams::default();
        let secret: Secret = from_json(json!({
            "metadata": {"name": x.secret}, "type": "Opaque",
            "stringData": {"tls.crt": cert, "tls.key": key}
        }))?;
        ctx.api::<Secret>().create(&pp, &secret).await?;
        let labels = json!({"app": x.app, x.selector: "true"});
        let port = x.container_port;
        let deployment: Deployment = from_json(json!({
            "metadata": {"name": x.deployment, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "strategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [{
                            "name": x.container,
                            "image": ctx.images().agnhost(),
                            "command": ["/agnhost"],
                            "args": [x.subcommand,
                                "--tls-cert-file=/webhook.local.config/certificates/tls.crt",
                                "--tls-private-key-file=/webhook.local.config/certificates/tls.key",
                                "-v=4", format!("--port={port}")],
                            "ports": [{"containerPort": port}],
                            "readinessProbe": {
                                "httpGet": {"scheme": "HTTPS", "port": port, "path": "/readyz"},
                                "periodSeconds": 1, "successThreshold": 1, "failureThreshold": 30
                            },
                            "volumeMounts": [{"name": x.volume, "readOnly": true,
                                "mountPath": "/webhook.local.config/certificates"}]
                        }],
                        "volumes": [{"name": x.volume, "secret": {"secretName": x.secret}}]
                    }
                }
            }
        }))?;
        let deployments: Api<Deployment> = ctx.api();
        deployments.create(&pp, &deployment).await?;
        ctx.wait(
            "the webhook deployment to be available",
            POD_START,
            || async {
                let d = deployments.get(x.deployment).await?;
                let ready = d.status.as_ref().and_then(|s| s.available_replicas);
                Ok(if ready == Some(1) {
                    Ok(())
                } else {
                    Err(format!("{:?}", d.status))
                })
            },
        )
        .await?;
        let service: Service = from_json(json!({
            "metadata": {"name": x.service, "labels": {"test": x.selector}},
            "spec": {"selector": {x.selector: "true"}, "ports": [{"protocol": "TCP",
                "port": x.service_port, "targetPort": port}]}
        }))?;
        ctx.api::<Service>().create(&pp, &service).await?;
        let slices: Api<EndpointSlice> = ctx.api();
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={}", x.service));
        ctx.wait("the webhook service's endpoint", SETTLE, || async {
            let ready = slices
                .list(&lp)
                .await?
                .items
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            Ok(if ready == 1 {
                Ok(())
            } else {
                Err(format!("{ready} ready endpoints"))
            })
        })
        .await?;
        Ok(ca)
    }

    /// Delete the markers namespace and every webhook configuration whose name starts with the
    /// case's namespace.
    pub async fn teardown(&self, ctx: &Ctx) {
        if !self.markers.is_empty() {
            let namespaces: Api<Namespace> = ctx.all();
            let _ = namespaces
                .delete(&self.markers, &DeleteParams::background())
                .await;
        }
        let validating: Api<ValidatingWebhookConfiguration> = ctx.all();
        if let Ok(list) = validating.list(&ListParams::default()).await {
            for c in list
                .items
                .iter()
                .filter(|c| c.name_any().starts_with(&self.ns))
            {
                let _ = validating
                    .delete(&c.name_any(), &DeleteParams::default())
                    .await;
            }
        }
        let mutating: Api<MutatingWebhookConfiguration> = ctx.all();
        if let Ok(list) = mutating.list(&ListParams::default()).await {
            for c in list
                .items
                .iter()
                .filter(|c| c.name_any().starts_with(&self.ns))
            {
                let _ = mutating
                    .delete(&c.name_any(), &DeleteParams::default())
                    .await;
            }
        }
    }

    /// A clientConfig naming the Service and `path`.
    pub fn client_config(&self, path: &str) -> Value {
        json!({
            "service": {"namespace": self.ns, "name": self.sample.service, "path": path,
                "port": self.sample.service_port},
            "caBundle": self.ca_bundle,
        })
    }

    /// A webhook calling `path` on `operations` of the core/v1 `resources`, scoped to the case's
    /// namespace (upstream's fixtures' common shape).
    pub fn hook(&self, name: &str, operations: &[&str], resources: &[&str], path: &str) -> Value {
        json!({
            "name": name,
            "rules": [{"operations": operations, "apiGroups": [""], "apiVersions": ["v1"],
                "resources": resources}],
            "clientConfig": self.client_config(path),
            "sideEffects": "None",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "namespaceSelector": {"matchLabels": {self.ns.as_str(): "true"}},
        })
    }

    /// A webhook on CREATE of configmaps, scoped to the case's namespace.
    pub fn configmap_hook(&self, name: &str, path: &str) -> Value {
        self.hook(name, &["CREATE"], &["configmaps"], path)
    }

    /// newDenyConfigMapWebhookFixture: /configmaps on CREATE, UPDATE, DELETE, skipping namespaces
    /// labelled `skip-webhook-admission: yes`.
    pub fn deny_configmap(&self) -> Value {
        let mut hook = self.configmap_hook("deny-unwanted-configmap-data.k8s.io", "/configmaps");
        hook["rules"][0]["operations"] = json!(["CREATE", "UPDATE", "DELETE"]);
        hook["namespaceSelector"]["matchExpressions"] = json!([{
            "key": "skip-webhook-admission", "operator": "NotIn", "values": ["yes"]}]);
        hook
    }

    /// newMutateConfigMapWebhookFixture: /mutating-configmaps on CREATE.
    pub fn mutate_configmap(&self, stage: u8) -> Value {
        self.configmap_hook(
            &format!("adding-configmap-data-stage-{stage}.k8s.io"),
            "/mutating-configmaps",
        )
    }

    /// The is-ready fixture: /always-deny for labelled configmaps in the markers namespace,
    /// failing open while the route to the Service is being set up.
    fn is_ready(&self, name: &str) -> Value {
        let mut hook = self.configmap_hook(name, "/always-deny");
        hook["failurePolicy"] = json!("Ignore");
        hook["namespaceSelector"] =
            json!({"matchLabels": {format!("{}-markers", self.ns): "true"}});
        hook["objectSelector"] = json!({"matchLabels": {self.ns.as_str(): "true"}});
        hook
    }

    pub fn validating_is_ready(&self) -> Value {
        self.is_ready("validating-is-webhook-configuration-ready.k8s.io")
    }

    pub fn mutating_is_ready(&self) -> Value {
        self.is_ready("mutating-is-webhook-configuration-ready.k8s.io")
    }

    /// waitWebhookConfigurationReady: create marker configmaps until one is denied.
    pub async fn wait_ready(&self, ctx: &Ctx) -> CaseResult {
        let markers: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &self.markers);
        let mut n = 0u32;
        ctx.wait("the webhook configuration to be ready", SETTLE, || {
            n += 1;
            let name = format!("marker-{n}");
            let markers = markers.clone();
            let labels = json!({self.ns.as_str(): "true"});
            async move {
                let marker: ConfigMap =
                    from_json(json!({"metadata": {"name": name, "labels": labels}}))?;
                match markers.create(&PostParams::default(), &marker).await {
                    Err(kube::Error::Api(s)) if s.message.contains("denied") => Ok(Ok(())),
                    Err(e) => Err(e.into()),
                    Ok(_) => {
                        let _ = markers.delete(&name, &DeleteParams::default()).await;
                        Ok(Err("a marker was admitted".to_string()))
                    }
                }
            }
        })
        .await
    }

    /// Create a validating configuration (named by the caller; it must start with the case's
    /// namespace so teardown finds it).
    pub async fn validating(
        &self,
        ctx: &Ctx,
        name: &str,
        labels: Value,
        webhooks: Vec<Value>,
    ) -> CaseResult<ValidatingWebhookConfiguration> {
        let api: Api<ValidatingWebhookConfiguration> = ctx.all();
        let config = from_json(json!({
            "metadata": {"name": name, "labels": labels}, "webhooks": webhooks}))?;
        Ok(api.create(&PostParams::default(), &config).await?)
    }

    pub async fn mutating(
        &self,
        ctx: &Ctx,
        name: &str,
        labels: Value,
        webhooks: Vec<Value>,
    ) -> CaseResult<MutatingWebhookConfiguration> {
        let api: Api<MutatingWebhookConfiguration> = ctx.all();
        let config = from_json(json!({
            "metadata": {"name": name, "labels": labels}, "webhooks": webhooks}))?;
        Ok(api.create(&PostParams::default(), &config).await?)
    }
}
