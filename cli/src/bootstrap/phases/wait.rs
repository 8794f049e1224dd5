//! Phases that talk to the running cluster through kube-rs with admin.conf: waits, kiln-config, and the
//! control-plane label and taint.

use std::time::{Duration, Instant};

use super::{Outcome, MANIFESTS};
use crate::bootstrap::{BootstrapError, Context};

pub async fn admin_client(ctx: &Context) -> Result<kube::Client, BootstrapError> {
    let path = ctx.admin_conf();
    let kc = kube::config::Kubeconfig::read_from(&path)
        .map_err(|e| BootstrapError::phase("wait", "local", format!("{}: {e}", path.display())))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| BootstrapError::phase("wait", "local", format!("{}: {e}", path.display())))?;
    kube::Client::try_from(cfg).map_err(|e| BootstrapError::phase("wait", "local", e.to_string()))
}

/// An admin client that talks to `host`'s own API server only (not the balanced address), for the
/// checks a rolling change makes of each controller in turn (upgrade, encryption key rotation).
pub async fn host_admin_client(ctx: &Context, host: &str) -> Result<kube::Client, String> {
    let path = ctx.admin_conf();
    let kc = kube::config::Kubeconfig::read_from(&path).map_err(|e| e.to_string())?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let addr = ctx.host(host).node_address();
    // An IPv6 node address goes in brackets in a URL.
    let addr = if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr
    };
    cfg.cluster_url = format!("https://{addr}:6443")
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

/// One `/readyz` of the API server `client` talks to: Ok when it answers `ok`, else what it said.
pub async fn readyz(client: kube::Client) -> Result<(), String> {
    let req = http::Request::get("/readyz")
        .body(vec![])
        .map_err(|e| e.to_string())?;
    match client.request_text(req).await {
        Ok(b) if b.trim() == "ok" => Ok(()),
        Ok(b) => Err(b),
        Err(e) => Err(e.to_string()),
    }
}

async fn poll<T, F, Fut>(ctx: &Context, what: &str, mut f: F) -> Result<T, BootstrapError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => {
                if e != last {
                    tracing::debug!(what, error = %e, "not yet");
                    last = e;
                }
            }
        }
        if start.elapsed() > ctx.opts.wait_timeout {
            return Err(BootstrapError::Timeout {
                what: if last.is_empty() {
                    what.to_string()
                } else {
                    format!("{what} (last error: {last})")
                },
                seconds: ctx.opts.wait_timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(super) async fn wait_control_plane(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let client = admin_client(ctx).await?;
    let start = Instant::now();
    poll(ctx, "the API server to be ready (/readyz)", || {
        let client = client.clone();
        async move {
            let req = http::Request::get("/readyz")
                .body(vec![])
                .map_err(|e| e.to_string())?;
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => Ok(Some(())),
                Ok(body) => Err(body),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    Ok(Outcome::Done(format!(
        "API server ready after {:.1}s",
        start.elapsed().as_secs_f64()
    )))
}

/// The kubelet's last complaint on `host` (supervisor log or journal), to say why a node never came up —
/// e.g. "the API server rejected bootstrap token abc123 … (expired or deleted?)".
pub async fn kubelet_last_problem(ctx: &Context, host: &str) -> Option<String> {
    let t = ctx.transport(host).await.ok()?;
    let log = t
        .run(
            "tail -n 300 /var/log/kiln/kubelet.log 2>/dev/null || \
             journalctl -u kiln-kubelet -n 300 --no-pager 2>/dev/null; true",
        )
        .await
        .ok()?;
    last_problem(&log)
}

/// The last WARN/ERROR line of a kubelet log, without ANSI colours.
pub fn last_problem(log: &str) -> Option<String> {
    let strip = |l: &str| {
        let mut out = String::new();
        let mut esc = false;
        for c in l.chars() {
            match (esc, c) {
                (false, '\u{1b}') => esc = true,
                (true, 'm') => esc = false,
                (true, _) => {}
                (false, c) => out.push(c),
            }
        }
        out
    };
    log.lines()
        .map(strip)
        .rfind(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(|l| l.trim().to_string())
}

pub(super) async fn wait_node_ready(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    match wait_node_ready_inner(ctx, host).await {
        Err(BootstrapError::Timeout { what, seconds }) => {
            let why = kubelet_last_problem(ctx, host).await;
            Err(BootstrapError::Timeout {
                what: match why {
                    Some(w) => format!("{what}; the kubelet on {host} last said: {w}"),
                    None => what,
                },
                seconds,
            })
        }
        r => r,
    }
}

async fn wait_node_ready_inner(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::Node;
    let client = admin_client(ctx).await?;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    poll(ctx, &format!("node {host} to be Ready"), || {
        let nodes = nodes.clone();
        let host = host.to_string();
        async move {
            let node = nodes.get_opt(&host).await.map_err(|e| e.to_string())?;
            let ready = node
                .and_then(|n| n.status)
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Ok(ready.then_some(()))
        }
    })
    .await?;
    Ok(Outcome::Done("Ready".into()))
}

/// The control plane's mirror pods (one per static manifest on the host) are Running and Ready.
pub(crate) async fn wait_static_pods(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::Pod;
    let t = ctx.transport(host).await?;
    let manifests: Vec<String> = t
        .run(&format!("ls {MANIFESTS} 2>/dev/null; true"))
        .await?
        .lines()
        .filter_map(|l| l.strip_suffix(".yaml").map(|n| format!("{n}-{host}")))
        .collect();
    let client = admin_client(ctx).await?;
    let pods: kube::Api<Pod> = kube::Api::all(client);
    let want = manifests.clone();
    poll(
        ctx,
        &format!("static pods {} to be Ready", want.join(", ")),
        || {
            let pods = pods.clone();
            let want = want.clone();
            let host = host.to_string();
            async move {
                let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={host}"));
                let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
                let ready = |p: &Pod| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                };
                let missing: Vec<&String> = want
                    .iter()
                    .filter(|w| {
                        !list
                            .items
                            .iter()
                            .any(|p| p.metadata.name.as_deref() == Some(w.as_str()) && ready(p))
                    })
                    .collect();
                if missing.is_empty() {
                    Ok(Some(()))
                } else {
                    Err(format!("not Ready yet: {missing:?}"))
                }
            }
        },
    )
    .await?;
    Ok(Outcome::Done(format!("{} Ready", manifests.join(", "))))
}

/// The cluster's configuration in kube-system/kiln-config (like kubeadm-config), for later joins and
/// upgrades to read from the cluster itself. cluster.yaml holds paths, never secrets.
pub(super) async fn upload_config(ctx: &Context) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let text = std::fs::read_to_string(&ctx.cluster.path).map_err(|source| BootstrapError::Io {
        what: "reading",
        path: ctx.cluster.path.clone(),
        source,
    })?;
    let client = admin_client(ctx).await?;
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client, "kube-system");
    let fail = |e: kube::Error| BootstrapError::phase("upload-config", "local", e.to_string());
    let existing = cms.get_opt("kiln-config").await.map_err(fail)?;
    let data = std::collections::BTreeMap::from([("cluster.yaml".to_string(), text)]);
    match existing {
        Some(cm) if cm.data.as_ref() == Some(&data) => Ok(Outcome::Skipped(
            "kube-system/kiln-config up to date".into(),
        )),
        Some(mut cm) => {
            cm.data = Some(data);
            cms.replace("kiln-config", &Default::default(), &cm)
                .await
                .map_err(fail)?;
            Ok(Outcome::Done("kube-system/kiln-config updated".into()))
        }
        None => {
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("kiln-config".into()),
                    namespace: Some("kube-system".into()),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            cms.create(&Default::default(), &cm).await.map_err(fail)?;
            Ok(Outcome::Done("kube-system/kiln-config created".into()))
        }
    }
}

pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Label every controller's node, and taint those that are not also workers, like kubeadm.
pub(super) async fn mark_control_plane(
    ctx: &Context,
    host: &str,
) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::{Node, Taint};
    let client = admin_client(ctx).await?;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let fail = |e: kube::Error| BootstrapError::phase("mark-control-plane", host, e.to_string());
    let mut node = nodes.get(host).await.map_err(fail)?;
    let want_taint = !ctx.host(host).is_worker();
    let labels = node.metadata.labels.get_or_insert_with(Default::default);
    let mut changed = labels
        .insert(CONTROL_PLANE_LABEL.into(), String::new())
        .is_none();
    let spec = node.spec.get_or_insert_with(Default::default);
    let taints = spec.taints.get_or_insert_with(Vec::new);
    let has_taint = taints
        .iter()
        .any(|t| t.key == CONTROL_PLANE_LABEL && t.effect == "NoSchedule");
    if want_taint && !has_taint {
        taints.push(Taint {
            key: CONTROL_PLANE_LABEL.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        changed = true;
    } else if !want_taint && has_taint {
        taints.retain(|t| t.key != CONTROL_PLANE_LABEL);
        changed = true;
    }
    if !changed {
        return Ok(Outcome::Skipped("already marked".into()));
    }
    // Replace with the resourceVersion we read: a concurrent kubelet status write makes this a 409,
    // and a re-run of init converges.
    nodes
        .replace(host, &Default::default(), &node)
        .await
        .map_err(fail)?;
    Ok(Outcome::Done(if want_taint {
        format!("labelled {CONTROL_PLANE_LABEL} and tainted NoSchedule")
    } else {
        format!("labelled {CONTROL_PLANE_LABEL} (also a worker: no taint)")
    }))
}

#[cfg(test)]
mod tests {
    use super::last_problem;

    #[test]
    fn the_last_warning_of_a_kubelet_log_explains_a_missing_node() {
        let log = "\u{1b}[2m2026-11-29T19:00:00Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m starting\n\
                   2026-11-29T19:00:01Z  WARN API server call failed; retrying stage=\"tls-bootstrap\" error=first\n\
                   2026-11-29T19:00:02Z  WARN API server call failed; retrying stage=\"tls-bootstrap\" error=the API server rejected bootstrap token abc123\n\
                   2026-11-29T19:00:03Z  INFO still here\n";
        let p = last_problem(log).unwrap();
        assert!(p.contains("rejected bootstrap token abc123"), "{p}");
        assert_eq!(last_problem("all fine\n"), None);
    }
}
