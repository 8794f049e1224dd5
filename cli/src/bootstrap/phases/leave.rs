//! Phase leave-cluster (first in reset): while the rest of the cluster keeps running, a host being reset
//! is drained (cordoned, its pods evicted as their PodDisruptionBudgets allow, so their controllers
//! recreate them elsewhere), its Node deleted, and — for a control plane — its store member removed,
//! so the remaining members keep a quorum that counts only live members. Skipped when the whole
//! control plane is being reset or the API is down.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams};

use super::member_client::MemberClient;
use super::*;

/// Bound on each API call here: a reset must not hang on a dead control plane.
const API_TIMEOUT: Duration = Duration::from_secs(10);

fn err(host: &str, e: impl std::fmt::Display) -> BootstrapError {
    BootstrapError::phase("leave-cluster", host, e.to_string())
}

async fn bounded<T, E: std::fmt::Display>(
    host: &str,
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, BootstrapError> {
    match tokio::time::timeout(API_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| err(host, format!("{what}: {e}"))),
        Err(_) => Err(err(
            host,
            format!("{what}: no answer within {API_TIMEOUT:?}"),
        )),
    }
}

/// How long a drain waits for evicted pods to be gone.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until `pods` are gone; force-deletes (grace 0) the ones left at `limit`. Returns how many.
async fn wait_gone(client: &kube::Client, pods: &[(String, String)], limit: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let mut left = vec![];
        for (ns, name) in pods {
            let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
            if !matches!(
                tokio::time::timeout(API_TIMEOUT, api.get_opt(name)).await,
                Ok(Ok(None))
            ) {
                left.push((ns, name));
            }
        }
        if left.is_empty() {
            return 0;
        }
        if tokio::time::Instant::now() >= deadline {
            for (ns, name) in &left {
                let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
                let _ = tokio::time::timeout(
                    API_TIMEOUT,
                    api.delete(name, &DeleteParams::default().grace_period(0)),
                )
                .await;
            }
            return left.len();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How long a drain retries an eviction that a PodDisruptionBudget refuses: long enough for the
/// pods that replace evicted ones elsewhere to become ready and give the budget room again.
const BUDGET_TIMEOUT: Duration = Duration::from_secs(300);
/// Pause between refused evictions: doubling up to kubectl drain's fixed 5 s.
const BUDGET_RETRY_FIRST: Duration = Duration::from_secs(1);
const BUDGET_RETRY_MAX: Duration = Duration::from_secs(5);

/// The budget a refused eviction names and why, from upstream's DisruptionBudget cause ("The
/// disruption budget web needs 2 healthy pods and has 2 currently").
pub fn refusing_budget(status: &kube::core::Status) -> (String, String) {
    let cause = status
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"));
    let Some(cause) = cause else {
        return ("(unknown)".into(), status.message.clone());
    };
    let name = cause
        .message
        .strip_prefix("The disruption budget ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or("(unknown)");
    (name.to_string(), cause.message.clone())
}

/// Evicts one pod through the eviction API, waiting out its disruption budget for up to `limit`.
/// Ok(false): the pod was already gone.
async fn evict_within_budget(
    client: &kube::Client,
    ns: &str,
    name: &str,
    limit: Duration,
) -> Result<bool, String> {
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = BUDGET_RETRY_FIRST;
    loop {
        match tokio::time::timeout(API_TIMEOUT, api.evict(name, &EvictParams::default())).await {
            Ok(Ok(_)) => return Ok(true),
            Ok(Err(kube::Error::Api(e))) if e.code == 404 => return Ok(false),
            Ok(Err(kube::Error::Api(e))) if e.code == 429 => {
                let (budget, why) = refusing_budget(&e);
                if tokio::time::Instant::now() + pause > deadline {
                    return Err(format!(
                        "evicting pod {ns}/{name}: PodDisruptionBudget {ns}/{budget} still refuses it after {}s ({why}); \
                         scale the workload up, or relax or delete the budget, and run the reset again",
                        limit.as_secs()
                    ));
                }
                tracing::info!(
                    "evicting pod {ns}/{name}: {} {why} (will retry after {}s)",
                    e.message,
                    pause.as_secs()
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(BUDGET_RETRY_MAX);
            }
            Ok(Err(e)) => return Err(format!("evicting pod {ns}/{name}: {e}")),
            Err(_) => return Err(format!("evicting pod {ns}/{name}: no answer")),
        }
    }
}

/// The admin client without kube-rs's own retry of 429/503/504: a refused eviction must come back
/// at once, for the drain's loop to report and retry it within its own bound.
async fn drain_client(ctx: &Context) -> Result<kube::Client, String> {
    let path = ctx.admin_conf();
    let kc = kube::config::Kubeconfig::read_from(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?;
    cfg.default_retry = false;
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

/// Pods a drain leaves alone: mirror pods (the kubelet owns them) and DaemonSet pods (they would come
/// straight back), like `kubectl drain --ignore-daemonsets`.
pub fn evictable(pod: &Pod) -> bool {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let daemon = pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "DaemonSet"));
    !mirror && !daemon
}

pub(super) async fn leave_cluster(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let cfg = &ctx.cluster.config;
    let staying: Vec<&crate::config::Host> = cfg
        .controllers()
        .filter(|c| !ctx.opts.only_hosts.is_empty() && !ctx.opts.only_hosts.contains(&c.name))
        .collect();
    if staying.is_empty() {
        return Ok(Outcome::Skipped(
            "the whole control plane is being reset".into(),
        ));
    }
    if !ctx.admin_conf().exists() {
        return Ok(Outcome::Skipped(
            "no admin.conf in the state directory".into(),
        ));
    }
    let client = match tokio::time::timeout(API_TIMEOUT, drain_client(ctx)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Ok(Outcome::Skipped(format!("cluster not reachable: {e}"))),
        Err(_) => return Ok(Outcome::Skipped("cluster not reachable".into())),
    };
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let mut done = vec![];
    let node = match tokio::time::timeout(API_TIMEOUT, nodes.get_opt(host)).await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Ok(Outcome::Skipped(format!("cluster not reachable: {e}"))),
        Err(_) => return Ok(Outcome::Skipped("cluster not reachable".into())),
    };
    if node.is_some() {
        bounded(
            host,
            "cordoning the node",
            nodes.patch(
                host,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
            ),
        )
        .await?;
        let pods: kube::Api<Pod> = kube::Api::all(client.clone());
        let on_node = bounded(
            host,
            "listing the node's pods",
            pods.list(&ListParams::default().fields(&format!("spec.nodeName={host}"))),
        )
        .await?;
        // Like `kubectl drain`: every pod's eviction at once, each retried while its
        // PodDisruptionBudget refuses it (429), so one guarded pod does not hold up the others.
        let targets: Vec<(String, String)> = on_node
            .items
            .iter()
            .filter(|p| evictable(p))
            .filter_map(|p| Some((p.metadata.namespace.clone()?, p.metadata.name.clone()?)))
            .collect();
        let results = futures::future::join_all(
            targets
                .iter()
                .map(|(ns, name)| evict_within_budget(&client, ns, name, BUDGET_TIMEOUT)),
        )
        .await;
        let mut evicted = vec![];
        for ((ns, name), result) in targets.into_iter().zip(results) {
            match result {
                Ok(true) => evicted.push((ns, name)),
                Ok(false) => {}
                Err(e) => return Err(err(host, e)),
            }
        }
        // Like `kubectl drain`: wait (bounded) until the kubelet, still running, has stopped them; what
        // is left then is removed at once, as the pod garbage collector would once the node is gone.
        let forced = wait_gone(&client, &evicted, ctx.opts.wait_timeout.min(DRAIN_TIMEOUT)).await;
        let evicted_n = evicted.len();
        bounded(
            host,
            "deleting the node",
            nodes.delete(host, &DeleteParams::default()),
        )
        .await?;
        let forced = if forced == 0 {
            String::new()
        } else {
            format!(", {forced} not stopped in time and deleted")
        };
        done.push(format!(
            "drained ({evicted_n} pods evicted{forced}) and deleted node {host}"
        ));
    }
    Ok(if done.is_empty() {
        Outcome::Skipped(format!("{host} is not a node"))
    } else {
        Outcome::Done(done.join("; "))
    })
}

/// Phase store-member-leave (after leave-cluster): a controller reset while other controllers stay
/// leaves the kiln-store, removed through a staying member, so their quorum counts only live
/// members. A phase of its own so a cluster on an external etcd skips it by the phase table.
pub(super) async fn store_member_leave(
    ctx: &Context,
    host: &str,
) -> Result<Outcome, BootstrapError> {
    let err = |e: String| BootstrapError::phase("store-member-leave", host, e);
    let staying: Vec<&crate::config::Host> = ctx
        .cluster
        .config
        .controllers()
        .filter(|c| !ctx.opts.only_hosts.is_empty() && !ctx.opts.only_hosts.contains(&c.name))
        .collect();
    if staying.is_empty() {
        return Ok(Outcome::Skipped(
            "the whole control plane is being reset".into(),
        ));
    }
    if !ctx.host(host).is_controller() {
        return Ok(Outcome::Skipped(format!("{host} is no store member")));
    }
    let peer = staying[0];
    let mut store = MemberClient::connect(&peer.node_address(), &ctx.pki_dir(&peer.name))
        .await
        .map_err(|e| err(e.to_string()))?;
    let removed = store
        .remove_member(host)
        .await
        .map_err(|e| err(e.to_string()))?;
    // Back in the cluster it must join again (`kiln join --control-plane`), not found a new store.
    super::store_start::forget(ctx, host);
    Ok(if removed {
        Outcome::Done(format!("removed store member {host} (via {})", peer.name))
    } else {
        Outcome::Skipped(format!("{host} is no store member"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn refused_evictions_name_their_budget() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 429, "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}
        }))
        .unwrap();
        assert_eq!(
            refusing_budget(&status),
            (
                "web".to_string(),
                "The disruption budget web needs 2 healthy pods and has 2 currently".to_string()
            )
        );
        let bare: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 429, "message": "Too many requests"
        }))
        .unwrap();
        assert_eq!(refusing_budget(&bare).0, "(unknown)");
    }

    #[test]
    fn drain_skips_mirror_and_daemonset_pods() {
        assert!(evictable(&pod(
            serde_json::json!({"metadata": {"name": "web"}})
        )));
        assert!(!evictable(&pod(
            serde_json::json!({"metadata": {"name": "s",
            "annotations": {"kubernetes.io/config.mirror": "x"}}})
        )));
        assert!(!evictable(&pod(
            serde_json::json!({"metadata": {"name": "d",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]}})
        )));
    }
}
