//! What a case works with: a namespace of its own (made before, deleted after, as upstream's e2e
//! framework does), typed API handles, the test images, kubectl, and waits that report what they last
//! saw when they run out.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource};
use rand::Rng;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{CaseError, CaseResult};

/// How long a pod may take to start or finish, as upstream's framework.PodStartTimeout (5 min).
pub const POD_START: Duration = Duration::from_secs(300);
/// How often waits poll (upstream polls every 2 s; kiln's watches make events faster than that).
const POLL: Duration = Duration::from_millis(500);

/// The test images, from the lab registry by default (`kiln lab up` pushes them): kiln's own
/// agnhost-compatible image, busybox (also the `httpd` stand-in) and dnsutils (`jessie-dnsutils`).
#[derive(Debug, Clone)]
pub struct Images {
    /// `10.250.0.1:5000/kiln` in a lab.
    pub prefix: String,
}

impl Images {
    pub fn agnhost(&self) -> String {
        format!("{}/agnhost:1", self.prefix)
    }
    pub fn busybox(&self) -> String {
        format!("{}/busybox:1", self.prefix)
    }
    /// Upstream's `httpd` image serves on port 80; busybox's httpd does here.
    pub fn httpd(&self) -> String {
        self.busybox()
    }
    pub fn pause(&self) -> String {
        format!("{}/pause:1", self.prefix)
    }
    pub fn dnsutils(&self) -> String {
        format!("{}/dnsutils:1", self.prefix)
    }
}

/// The cluster under test, shared by every case of a run.
pub struct Cluster {
    pub client: Client,
    /// Passed to kubectl; None uses kubectl's own default (KUBECONFIG, ~/.kube/config).
    pub kubeconfig: Option<PathBuf>,
    pub kubectl: String,
    pub images: Images,
}

/// One case's view: the cluster and a fresh namespace.
pub struct Ctx {
    pub cluster: Arc<Cluster>,
    pub client: Client,
    pub ns: String,
}

impl Ctx {
    /// Make the case's namespace (`<base>-<5 random letters>`) and wait for its default
    /// ServiceAccount, which pods need before they can be created.
    pub async fn new(cluster: Arc<Cluster>, base: &str) -> CaseResult<Ctx> {
        let suffix: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            .take(5)
            .map(char::from)
            .collect();
        let ns = format!("{base}-{suffix}");
        let client = cluster.client.clone();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let obj: Namespace = from_json(serde_json::json!({
            "metadata": {"name": ns, "labels": {"e2e-framework": base, "e2e-run": "kiln-conformance"}}
        }))?;
        namespaces.create(&PostParams::default(), &obj).await?;
        let ctx = Ctx {
            cluster,
            client,
            ns,
        };
        let sas: Api<ServiceAccount> = ctx.api();
        ctx.wait(
            "the namespace's default ServiceAccount",
            Duration::from_secs(60),
            || async { Ok(sas.get_opt("default").await?.ok_or("not yet")) },
        )
        .await?;
        Ok(ctx)
    }

    /// Delete the namespace without waiting: the namespace controller empties it.
    pub async fn cleanup(&self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces
            .delete(&self.ns, &DeleteParams::background())
            .await;
    }

    /// Wait until the case's namespace is gone (its pods deleted), polling; gives up quietly after
    /// `limit`: the next case then starts with whatever capacity there is, as without the wait.
    pub async fn wait_namespace_gone(&self, limit: Duration) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match namespaces.get_opt(&self.ns).await {
                Ok(None) => return,
                Ok(Some(_)) | Err(_) => tokio::time::sleep(Duration::from_secs(2)).await,
            }
        }
    }

    /// A handle on a namespaced kind in the case's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A handle on a cluster-scoped kind.
    pub fn all<K>(&self) -> Api<K>
    where
        K: Resource<Scope = ClusterResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }

    /// Ready, schedulable nodes without NoSchedule/NoExecute taints (upstream's
    /// GetReadySchedulableNodes: a control-plane node keeps its pods off); fails when there is none.
    pub async fn ready_schedulable_nodes(&self) -> CaseResult<Vec<Node>> {
        let nodes = self.all::<Node>().list(&ListParams::default()).await?.items;
        let out: Vec<Node> = nodes.into_iter().filter(is_ready_schedulable).collect();
        if out.is_empty() {
            return Err(CaseError::Failed("no ready schedulable node".into()));
        }
        Ok(out)
    }

    /// The first ready schedulable node, as upstream's GetRandomReadySchedulableNode picks.
    pub async fn schedulable_node(&self) -> CaseResult<String> {
        let first = self.ready_schedulable_nodes().await?.swap_remove(0);
        Ok(first.metadata.name.unwrap_or_default())
    }

    pub fn images(&self) -> &Images {
        &self.cluster.images
    }

    /// Poll `f` until it returns `Ok(Ok(value))`; `Ok(Err(last))` means "not yet" (kept for the
    /// timeout's message), `Err` ends the wait at once.
    pub async fn wait<T, E, F, Fut>(&self, what: &str, timeout: Duration, mut f: F) -> CaseResult<T>
    where
        E: std::fmt::Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = CaseResult<Result<T, E>>>,
    {
        let start = Instant::now();
        loop {
            let last = match f().await? {
                Ok(v) => return Ok(v),
                Err(e) => e.to_string(),
            };
            if start.elapsed() >= timeout {
                return Err(CaseError::Timeout {
                    what: what.to_string(),
                    after: timeout,
                    last,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Create a pod in the namespace.
    pub async fn create_pod(&self, pod: &Pod) -> CaseResult<Pod> {
        Ok(self
            .api::<Pod>()
            .create(&PostParams::default(), pod)
            .await?)
    }

    /// Wait for the pod's phase to be Running (upstream's WaitForPodNameRunningInNamespace); a pod
    /// that ends first fails the wait.
    pub async fn wait_running(&self, name: &str) -> CaseResult<Pod> {
        let pods: Api<Pod> = self.api();
        self.wait(&format!("pod {name} Running"), POD_START, || async {
            let pod = pods.get(name).await?;
            match phase(&pod) {
                "Running" => Ok(Ok(pod)),
                "Succeeded" | "Failed" => Err(CaseError::Failed(format!(
                    "pod {name} ended ({}) before it was seen Running: {}",
                    phase(&pod),
                    describe_status(&pod)
                ))),
                _ => Ok(Err(describe_status(&pod))),
            }
        })
        .await
    }

    /// Wait for the pod to be Running and Ready.
    pub async fn wait_ready(&self, name: &str) -> CaseResult<Pod> {
        let pods: Api<Pod> = self.api();
        self.wait(&format!("pod {name} Ready"), POD_START, || async {
            let pod = pods.get(name).await?;
            if phase(&pod) == "Running" && is_ready(&pod) {
                Ok(Ok(pod))
            } else {
                Ok(Err(describe_status(&pod)))
            }
        })
        .await
    }

    /// Wait for the pod to succeed (upstream's WaitForPodSuccessInNamespace): Failed fails the case.
    pub async fn wait_succeeded(&self, name: &str) -> CaseResult<Pod> {
        let pods: Api<Pod> = self.api();
        self.wait(&format!("pod {name} Succeeded"), POD_START, || async {
            let pod = pods.get(name).await?;
            match phase(&pod) {
                "Succeeded" => Ok(Ok(pod)),
                "Failed" => Err(CaseError::Failed(format!(
                    "pod {name} Failed: {}",
                    describe_status(&pod)
                ))),
                _ => Ok(Err(describe_status(&pod))),
            }
        })
        .await
    }

    /// A container's log.
    pub async fn logs(&self, pod: &str, container: &str) -> CaseResult<String> {
        let params = kube::api::LogParams {
            container: Some(container.to_string()),
            ..Default::default()
        };
        Ok(self.api::<Pod>().logs(pod, &params).await?)
    }

    /// Upstream's TestContainerOutput: run the pod to success, then its container's log MUST contain
    /// every expected string. Returns the log.
    pub async fn expect_output(
        &self,
        pod: &Pod,
        container: &str,
        expected: &[&str],
    ) -> CaseResult<String> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.create_pod(pod).await?;
        self.wait_succeeded(&name).await?;
        let mut log = self.logs(&name, container).await?;
        if log.is_empty() && !expected.is_empty() {
            // containerd before 1.6.22 / 1.7.2 (Debian 12 ships 1.6.20) may close a container's
            // output pipe before draining it when the container exits right after writing: the
            // whole output of a short pod is lost (kiln preflight warns of it). An empty log is
            // that loss, not a wrong answer; the pod runs once more, under the same name, and its
            // output is then checked as before.
            eprintln!(
                "kiln-conformance: {}/{name}: the succeeded pod's log is empty (containerd lost its output?); running it once more",
                self.ns
            );
            let pods: Api<Pod> = self.api();
            pods.delete(&name, &DeleteParams::default()).await?;
            self.wait(&format!("pod {name} gone"), POD_START, || async {
                Ok(match pods.get_opt(&name).await? {
                    None => Ok(()),
                    Some(p) => Err(describe_status(&p)),
                })
            })
            .await?;
            self.create_pod(pod).await?;
            self.wait_succeeded(&name).await?;
            log = self.logs(&name, container).await?;
        }
        for want in expected {
            crate::must!(
                log.contains(want),
                "log of {name}/{container} lacks {want:?}; it is:\n{log}"
            );
        }
        Ok(log)
    }

    /// Run kubectl (with the run's kubeconfig) and return its stdout; a non-zero exit is an error
    /// carrying stderr.
    pub async fn kubectl(&self, args: &[&str]) -> CaseResult<String> {
        let mut cmd = tokio::process::Command::new(&self.cluster.kubectl);
        if let Some(k) = &self.cluster.kubeconfig {
            cmd.arg("--kubeconfig").arg(k);
        }
        cmd.args(args);
        let out = cmd.output().await.map_err(|source| CaseError::Io {
            what: format!("running {}", self.cluster.kubectl),
            source,
        })?;
        if !out.status.success() {
            return Err(CaseError::Kubectl {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl exec` in the case's namespace: the command's stdout.
    pub async fn exec(&self, pod: &str, container: &str, cmd: &[&str]) -> CaseResult<String> {
        let mut args = vec!["-n", &self.ns, "exec", pod, "-c", container, "--"];
        args.extend_from_slice(cmd);
        self.kubectl(&args).await
    }
}

/// Build a typed object from JSON (cases write their objects as upstream's manifests read).
pub fn from_json<T: DeserializeOwned>(v: serde_json::Value) -> CaseResult<T> {
    serde_json::from_value(v).map_err(|source| CaseError::Json {
        what: std::any::type_name::<T>().to_string(),
        source,
    })
}

/// An object as JSON, for reading fields the typed structs make long-winded.
pub fn to_json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// List options selecting `key=value`.
pub fn by_label(key: &str, value: &str) -> kube::api::ListParams {
    kube::api::ListParams::default().labels(&format!("{key}={value}"))
}

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's phase and its containers' states in one line, for waits' messages.
pub fn describe_status(pod: &Pod) -> String {
    let Some(s) = &pod.status else {
        return "no status yet".into();
    };
    let mut out = format!("phase {}", s.phase.as_deref().unwrap_or("(none)"));
    if let Some(reason) = &s.reason {
        out.push_str(&format!(" reason {reason}"));
    }
    for c in s
        .init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
    {
        let state = c.state.as_ref().map(to_json).unwrap_or_default();
        out.push_str(&format!("; {} {}", c.name, state));
    }
    out
}

/// Ready, not cordoned, without a NoSchedule or NoExecute taint.
pub fn is_ready_schedulable(n: &Node) -> bool {
    let spec = n.spec.clone().unwrap_or_default();
    let tainted = spec
        .taints
        .iter()
        .flatten()
        .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    ready && !tainted && !spec.unschedulable.unwrap_or(false)
}
