//! disruption: keeps every PodDisruptionBudget's status current — expectedPods, desiredHealthy,
//! currentHealthy, disruptionsAllowed, the DisruptionAllowed condition, observedGeneration and the
//! disruptedPods the eviction handler records — so evictions can be judged against it (upstream's
//! pkg/controller/disruption). Status is written with the budget's resourceVersion: an eviction that
//! spent a disruption meanwhile wins, and the budget is synced again from what it wrote. Also resets
//! DisruptionTarget conditions that evictions left on pods that were never deleted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, NORMAL, WARNING};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{self, applier, trigger_self, Action, ReconcileRequest};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};

use crate::context::{spawn_reflector_with_changes, Context};
use crate::disruption_owners::{find, Reference};
use crate::disruption_plan::{
    cleared_disruption_target, controller_refs_to_resolve, fail_safe, plan, selects,
    stale_disruption_target, Owners, PlanError,
};

#[derive(Debug, thiserror::Error)]
pub enum DisruptionError {
    #[error("{action} for PodDisruptionBudget {pdb}: {source}")]
    Api {
        action: &'static str,
        pdb: String,
        source: kube::Error,
    },
}

struct State {
    ctx: Context,
    pods: Store<Pod>,
}

pub async fn run(ctx: Context) {
    // Pod events trigger syncs only once the pod cache holds them, so a sync never counts a pod
    // that the event it runs for just deleted.
    let (pods, pod_changes, _pods_task) = spawn_reflector_with_changes::<Pod>(&ctx.client);
    if pods.wait_until_ready().await.is_err() {
        return;
    }
    let (pdb_store, pdb_writer) = reflector::store();
    let budgets = reflector::reflector(
        pdb_writer,
        watcher(
            Api::<PodDisruptionBudget>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .applied_objects();
    let cleanups = Arc::new(Mutex::new(HashSet::new()));
    let (for_pods, event_ctx) = (pdb_store.clone(), ctx.clone());
    let (cleanup_ctx, cleanup_pods) = (ctx.clone(), pods.clone());
    let pod_triggers = pod_changes
        .inspect(move |pod| schedule_cleanup(&cleanup_ctx, &cleanup_pods, &cleanups, pod))
        .flat_map(move |pod| futures::stream::iter(budgets_of(&for_pods, &event_ctx, &pod)))
        .map(|pdb| Ok(ReconcileRequest::from(pdb)));
    let state = Arc::new(State { ctx, pods });
    applier(
        |pdb, st| Box::pin(reconcile(pdb, st)),
        error_policy,
        state,
        pdb_store,
        futures::stream::select(trigger_self(budgets, ()), pod_triggers),
        controller::Config::default(),
    )
    .for_each(|_| async {})
    .await;
}

/// The budgets a pod event concerns. A pod several budgets select is misconfigured (evictions of
/// it fail); upstream warns on the pod, and kiln syncs every one of them.
fn budgets_of(
    store: &Store<PodDisruptionBudget>,
    ctx: &Context,
    pod: &Pod,
) -> Vec<ObjectRef<PodDisruptionBudget>> {
    let matching: Vec<Arc<PodDisruptionBudget>> = store
        .state()
        .into_iter()
        .filter(|pdb| selects(pdb, pod))
        .collect();
    if matching.len() > 1 {
        let msg = format!(
            "Pod {:?}/{:?} matches multiple PodDisruptionBudgets.  Chose {:?} arbitrarily.",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            matching[0].metadata.name.as_deref().unwrap_or_default(),
        );
        tracing::info!("{msg}");
        let (recorder, reference) = (ctx.recorder.clone(), object_reference(pod));
        tokio::spawn(async move {
            let _ = recorder
                .record(&reference, WARNING, "MultiplePodDisruptionBudgets", &msg)
                .await;
        });
    }
    matching
        .iter()
        .map(|pdb| ObjectRef::from_obj(pdb.as_ref()))
        .collect()
}

fn api_err<'a>(
    action: &'static str,
    pdb: &'a str,
) -> impl FnOnce(kube::Error) -> DisruptionError + 'a {
    move |source| DisruptionError::Api {
        action,
        pdb: pdb.to_string(),
        source,
    }
}

async fn event(st: &State, pdb: &PodDisruptionBudget, type_: &str, reason: &str, msg: &str) {
    let _ = st
        .ctx
        .recorder
        .record(&object_reference(pdb), type_, reason, msg)
        .await;
}

/// The controllers of the pods, for a budget counted against their scale.
async fn owners(st: &State, pdb: &PodDisruptionBudget, pods: &[&Pod]) -> Result<Owners, PlanError> {
    let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
    let mut owners = Owners::new();
    for (api_version, kind, name, uid) in controller_refs_to_resolve(pdb, pods) {
        let r = Reference {
            api_version: &api_version,
            kind: &kind,
            name: &name,
            uid: &uid,
        };
        let found = find(&st.ctx.client, ns, &r)
            .await
            .map_err(PlanError::Lookup)?;
        owners.insert(uid.clone(), found);
    }
    Ok(owners)
}

async fn write_status(
    st: &State,
    pdb: &PodDisruptionBudget,
    status: k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus,
    key: &str,
) -> Result<(), DisruptionError> {
    let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
    let name = pdb.metadata.name.as_deref().unwrap_or_default();
    let mut updated = pdb.clone();
    updated.status = Some(status);
    // The cached resourceVersion makes this a compare-and-swap against the eviction handler.
    Api::<PodDisruptionBudget>::namespaced(st.ctx.client.clone(), ns)
        .replace_status(name, &PostParams::default(), &updated)
        .await
        .map_err(api_err("updating status", key))?;
    Ok(())
}

async fn reconcile(
    pdb: Arc<PodDisruptionBudget>,
    st: Arc<State>,
) -> Result<Action, DisruptionError> {
    let ns = pdb.metadata.namespace.clone().unwrap_or_default();
    let name = pdb.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let cached = st.pods.state();
    let pods: Vec<&Pod> = cached
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| selects(&pdb, p))
        .collect();
    if pods.is_empty() {
        event(&st, &pdb, NORMAL, "NoPods", "No matching pods found").await;
    }
    let now = Timestamp::now();
    let planned = match owners(&st, &pdb, &pods).await {
        Ok(owners) => plan(&pdb, &pods, &owners, now),
        Err(e) => Err(e),
    };
    let p = match planned {
        Ok(p) => p,
        Err(e) => {
            event(
                &st,
                &pdb,
                WARNING,
                "CalculateExpectedPodCountFailed",
                &format!("Failed to calculate the number of expected pods: {e}"),
            )
            .await;
            tracing::warn!(pdb = %key, error = %e, "failed to sync PDB");
            write_status(&st, &pdb, fail_safe(&pdb, &e.to_string(), now), &key).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    if !p.unmanaged.is_empty() {
        tracing::debug!(pdb = %key, pods = ?p.unmanaged, "found unmanaged pods associated with this PDB");
        let selector = go_selector(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()));
        event(&st, &pdb, WARNING, "UnmanagedPods", &format!(
            "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.")).await;
    }
    for pod_name in &p.not_deleted {
        tracing::info!(pdb = %key, pod = %pod_name, "pod was expected to be deleted but it wasn't, updating PDB");
        if let Some(pod) = pods
            .iter()
            .find(|q| q.metadata.name.as_deref() == Some(pod_name))
        {
            // Upstream's message names the namespace twice.
            let msg = format!("Pod was expected by PDB {ns}/{ns} to be deleted but it wasn't");
            let _ = st
                .ctx
                .recorder
                .record(&object_reference(*pod), WARNING, "NotDeleted", &msg)
                .await;
        }
    }
    if p.write {
        match write_status(&st, &pdb, p.status.clone(), &key).await {
            Ok(()) => {}
            // An eviction changed the budget since the cache saw it: its watch event syncs again.
            Err(DisruptionError::Api {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 409 => return Ok(Action::requeue(Duration::from_secs(1))),
            Err(e) => return Err(e),
        }
        tracing::debug!(pdb = %key, allowed = p.status.disruptions_allowed,
            current = p.status.current_healthy, desired = p.status.desired_healthy, "synced");
    }
    Ok(match p.recheck_at {
        Some(at) => Action::requeue(Duration::from_secs(
            (at.as_second() - now.as_second()).max(1) as u64,
        )),
        None => Action::requeue(Duration::from_secs(300)),
    })
}

/// A LabelSelector as Go's `%v` prints it (its generated String()), for upstream's event text.
fn go_selector(sel: Option<&LabelSelector>) -> String {
    let Some(sel) = sel else {
        return "nil".into();
    };
    let labels: String = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let exprs: String = sel
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.key,
                e.operator,
                e.values.clone().unwrap_or_default().join(" ")
            )
        })
        .collect();
    format!("&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}")
}

fn error_policy(_pdb: Arc<PodDisruptionBudget>, err: &DisruptionError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "disruption");
    Action::requeue(Duration::from_secs(2))
}

/// A pod carrying an eviction's DisruptionTarget without being deleted gets it reset once it is
/// stale; each pod is scheduled once at a time.
fn schedule_cleanup(
    ctx: &Context,
    pods: &Store<Pod>,
    scheduled: &Arc<Mutex<HashSet<String>>>,
    pod: &Pod,
) {
    let Some(wait) = stale_disruption_target(pod, Timestamp::now()) else {
        return;
    };
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    if !scheduled.lock().expect("cleanups").insert(key.clone()) {
        return;
    }
    let (ctx, pods, scheduled) = (ctx.clone(), pods.clone(), scheduled.clone());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(wait.as_secs().max(0) as u64)).await;
        scheduled.lock().expect("cleanups").remove(&key);
        let Some(pod) = pods.get(&ObjectRef::new(&name).within(&ns)) else {
            return;
        };
        let now = Timestamp::now();
        if stale_disruption_target(&pod, now) != Some(k8s_openapi::jiff::SignedDuration::ZERO) {
            return;
        }
        let mut updated = (*pod).clone();
        let conditions = cleared_disruption_target(&pod, now);
        updated
            .status
            .get_or_insert_with(PodStatus::default)
            .conditions = Some(conditions);
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => tracing::info!(pod = %key, "reset stale DisruptionTarget condition to False"),
            Err(e) => tracing::debug!(pod = %key, error = %e, "clearing DisruptionTarget"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_as_go_does() {
        let sel: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"foo": "bar"},
            "matchExpressions": [{"key": "k", "operator": "In", "values": ["a", "b"]}]
        }))
        .unwrap();
        assert_eq!(
            go_selector(Some(&sel)),
            "&LabelSelector{MatchLabels:map[string]string{foo: bar,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:k,Operator:In,Values:[a b],},},}"
        );
        assert_eq!(go_selector(None), "nil");
    }
}
