//! job: runs a Job's pods to its completions (upstream's syncJob). Each sync claims the pods,
//! decides with `job_plan`, creates or deletes pods, and then tracks outcomes with the
//! `batch.kubernetes.io/job-tracking` finalizer in three durable steps — record the finished pods'
//! uids in status.uncountedTerminatedPods, remove their finalizers, move them into the counters —
//! so a pod deleted early, a stale cache or a controller restart can neither lose a completion
//! nor count one twice. Terminal conditions go through the interim FailureTarget /
//! SuccessCriteriaMet and land once no pod is left running.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, NORMAL, WARNING};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, applier, Action, ReconcileRequest};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::json;

use crate::context::{spawn_reflector_with_changes, Context};
use crate::job_indexes::Indexes;
use crate::job_plan::{self as plan, PolicyAction};
use crate::pods::controller_ref;
use crate::selector;

/// How long to wait for the watch to show our own writes before trusting the cache again anyway.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(30);
/// Upstream's cap on pods created or deleted in one sync.
const MAX_POD_CHANGES_PER_SYNC: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("{action} for Job {job}: {source}")]
    Api {
        action: &'static str,
        job: String,
        source: kube::Error,
    },
}

/// Our writes the pod cache may not show yet; while it doesn't, pods are read from the API.
#[derive(Default)]
struct Expectations {
    /// Pods we created: the cache must hold at least this many owned pods.
    min_pods: usize,
    /// Pods whose finalizer we removed.
    finalizer_removed: HashSet<String>,
    /// Pods we deleted.
    deleted: HashSet<String>,
    until: Option<Instant>,
}

impl Expectations {
    fn satisfied_by(&self, pods: &[Arc<Pod>]) -> bool {
        if self.until.is_none_or(|t| Instant::now() > t) {
            return true;
        }
        let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
        let stale = |p: &Pod| {
            let u = uid(p);
            (self.finalizer_removed.contains(&u) && plan::has_finalizer(p))
                || (self.deleted.contains(&u) && p.metadata.deletion_timestamp.is_none())
        };
        pods.len() >= self.min_pods && !pods.iter().any(|p| stale(p))
    }
}

struct State {
    ctx: Context,
    pods: Store<Pod>,
    jobs: Store<Job>,
    expectations: Mutex<HashMap<String, Expectations>>,
}

pub async fn run(ctx: Context) {
    let (pods, pod_changes, _pods_task) = spawn_reflector_with_changes::<Pod>(&ctx.client);
    let (jobs, job_changes, _jobs_task) = spawn_reflector_with_changes::<Job>(&ctx.client);
    // Both caches before the first decision: a pod whose Job is not cached yet would otherwise look
    // orphaned and lose its finalizer, and its outcome would never be counted.
    if pods.wait_until_ready().await.is_err() || jobs.wait_until_ready().await.is_err() {
        return;
    }
    let state = Arc::new(State {
        ctx: ctx.clone(),
        pods,
        jobs: jobs.clone(),
        expectations: Mutex::new(HashMap::new()),
    });
    let st = state.clone();
    let pod_triggers = pod_changes
        .flat_map(move |pod| futures::stream::iter(jobs_of(&st, &pod)))
        .map(|job| Ok::<_, watcher::Error>(ReconcileRequest::from(job)));
    let job_triggers = job_changes
        .map(|job: Job| Ok::<_, watcher::Error>(ReconcileRequest::from(ObjectRef::from_obj(&job))));
    applier(
        |job, st| Box::pin(reconcile(job, st)),
        error_policy,
        state,
        jobs,
        futures::stream::select(job_triggers, pod_triggers),
        controller::Config::default(),
    )
    .for_each(|_| async {})
    .await;
}

/// The Jobs a pod event concerns: its controller, or those that could adopt it. A pod still
/// holding our finalizer whose Job is gone or finished is released here (syncOrphanPod).
fn jobs_of(st: &Arc<State>, pod: &Pod) -> Vec<ObjectRef<Job>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    match controller_ref(&pod.metadata) {
        Some(r) if r.kind == "Job" && r.api_version == "batch/v1" => {
            let job = st
                .jobs
                .get(&ObjectRef::new(&r.name).within(&ns))
                .filter(|j| j.metadata.uid.as_deref() == Some(r.uid.as_str()));
            if plan::has_finalizer(pod) && job.as_ref().is_none_or(|j| plan::is_finished(j)) {
                spawn_orphan_release(st, pod);
            }
            vec![ObjectRef::new(&r.name).within(&ns)]
        }
        Some(_) => Vec::new(),
        None => {
            if plan::has_finalizer(pod) {
                spawn_orphan_release(st, pod);
            }
            st.jobs
                .state()
                .iter()
                .filter(|j| j.metadata.namespace.as_deref() == Some(ns.as_str()))
                .filter(|j| {
                    selector::matches(
                        j.spec.as_ref().and_then(|s| s.selector.as_ref()),
                        pod.metadata.labels.as_ref(),
                    )
                })
                .map(|j| ObjectRef::from_obj(j.as_ref()))
                .collect()
        }
    }
}

fn spawn_orphan_release(st: &Arc<State>, pod: &Pod) {
    let client = st.ctx.client.clone();
    let pod = pod.clone();
    tokio::spawn(async move {
        if let Err(e) = remove_finalizer(&client, &pod).await {
            tracing::debug!(error = %e, "releasing an orphan job pod");
        }
    });
}

async fn remove_finalizer(client: &kube::Client, pod: &Pod) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let rest: Vec<&String> = pod
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != plan::TRACKING_FINALIZER)
        .collect();
    // The resourceVersion makes this a compare-and-swap: a pod changed meanwhile is re-read on
    // the next sync instead of losing another writer's finalizer.
    let patch =
        json!({"metadata": {"finalizers": rest, "resourceVersion": pod.metadata.resource_version}});
    match Api::<Pod>::namespaced(client.clone(), &ns)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn api_err<'a>(action: &'static str, job: &'a str) -> impl FnOnce(kube::Error) -> JobError + 'a {
    move |source| JobError::Api {
        action,
        job: job.to_string(),
        source,
    }
}

fn uid_of(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

fn pod_name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

/// Everything one sync works with.
struct Sync<'a> {
    st: &'a State,
    key: String,
    job: Job,
    pods_api: Api<Pod>,
    now: Timestamp,
}

impl Sync<'_> {
    async fn event(&self, type_: &str, reason: &str, message: &str) {
        let _ = self
            .st
            .ctx
            .recorder
            .record(&object_reference(&self.job), type_, reason, message)
            .await;
    }

    fn expect(&self, f: impl FnOnce(&mut Expectations)) {
        let uid = self.job.metadata.uid.clone().unwrap_or_default();
        let mut all = self.st.expectations.lock().expect("expectations");
        let e = all.entry(uid).or_default();
        f(e);
        e.until = Some(Instant::now() + EXPECTATIONS_TIMEOUT);
    }

    /// The pods the Job owns, after adopting matching orphans (with our finalizer) and releasing
    /// owned pods that no longer match.
    async fn claim(&self) -> Result<Vec<Arc<Pod>>, JobError> {
        let ns = self.job.metadata.namespace.clone().unwrap_or_default();
        let uid = self.job.metadata.uid.clone().unwrap_or_default();
        let cached: Vec<Arc<Pod>> = self
            .st
            .pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
            .collect();
        let owned = |p: &Pod| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid);
        let cached_owned: Vec<Arc<Pod>> = cached.iter().filter(|p| owned(p)).cloned().collect();
        let fresh = {
            let mut all = self.st.expectations.lock().expect("expectations");
            let ok = all.get(&uid).is_none_or(|e| e.satisfied_by(&cached_owned));
            if ok {
                all.remove(&uid);
            }
            ok
        };
        let in_ns = if fresh {
            cached
        } else {
            self.pods_api
                .list(&ListParams::default())
                .await
                .map_err(api_err("listing pods", &self.key))?
                .items
                .into_iter()
                .map(Arc::new)
                .collect()
        };
        let sel = self.job.spec.as_ref().and_then(|s| s.selector.as_ref());
        let mut out = Vec::new();
        for pod in in_ns {
            let matches = selector::matches(sel, pod.metadata.labels.as_ref());
            match controller_ref(&pod.metadata) {
                Some(r) if r.uid == uid => {
                    if matches {
                        out.push(pod);
                    } else {
                        self.release(&pod).await?;
                    }
                }
                Some(_) => {}
                None if matches
                    && plan::is_active(&pod)
                    && self.job.metadata.deletion_timestamp.is_none() =>
                {
                    out.push(self.adopt(&pod).await?);
                }
                None => {}
            }
        }
        Ok(out)
    }

    async fn adopt(&self, pod: &Pod) -> Result<Arc<Pod>, JobError> {
        let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
        refs.push(plan::owner_reference(&self.job));
        let mut finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == plan::TRACKING_FINALIZER) {
            finalizers.push(plan::TRACKING_FINALIZER.into());
        }
        let patch = json!({"metadata": {"ownerReferences": refs, "finalizers": finalizers,
            "resourceVersion": pod.metadata.resource_version}});
        let adopted = self
            .pods_api
            .patch(
                pod_name(pod),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(api_err("adopting a pod", &self.key))?;
        tracing::info!(job = %self.key, pod = %pod_name(pod), "adopted");
        Ok(Arc::new(adopted))
    }

    async fn release(&self, pod: &Pod) -> Result<(), JobError> {
        let uid = self.job.metadata.uid.clone().unwrap_or_default();
        let refs: Vec<_> = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.uid != uid)
            .collect();
        let finalizers: Vec<&String> = pod
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != plan::TRACKING_FINALIZER)
            .collect();
        let patch = json!({"metadata": {"ownerReferences": refs, "finalizers": finalizers,
            "resourceVersion": pod.metadata.resource_version}});
        self.pods_api
            .patch(
                pod_name(pod),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(api_err("releasing a pod", &self.key))?;
        Ok(())
    }

    /// Deletes pods (keeping their finalizers: their outcome is still to be counted). Returns how
    /// many deletes went through and how many of those pods were ready.
    async fn delete_pods(&self, pods: &[Arc<Pod>], drop_finalizer: bool) -> (i32, i32) {
        let dp = DeleteParams::default();
        let results = futures::future::join_all(pods.iter().map(|p| async {
            if drop_finalizer && plan::has_finalizer(p) {
                remove_finalizer(&self.st.ctx.client, p).await?;
            }
            match self.pods_api.delete(pod_name(p), &dp).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(e),
            }
        }))
        .await;
        let mut deleted = 0;
        let mut ready = 0;
        let mut uids = HashSet::new();
        for (p, r) in pods.iter().zip(&results) {
            match r {
                Ok(()) => {
                    deleted += 1;
                    ready += crate::pods::is_ready(p) as i32;
                    uids.insert(uid_of(p));
                    self.event(
                        NORMAL,
                        "SuccessfulDelete",
                        &format!("Deleted pod: {}", pod_name(p)),
                    )
                    .await;
                }
                Err(e) => {
                    tracing::warn!(job = %self.key, pod = %pod_name(p), error = %e, "deleting pod")
                }
            }
        }
        self.expect(|e| {
            e.deleted.extend(uids.iter().cloned());
            if drop_finalizer {
                e.finalizer_removed.extend(uids);
            }
        });
        (deleted, ready)
    }

    /// Creates one pod per entry: (completion index, the index's failures so far).
    async fn create_pods(&self, wanted: Vec<(Option<i32>, Option<i32>)>, owned: usize) -> usize {
        let pp = PostParams::default();
        // Slow start, as upstream: batches of 1, 2, 4, ... stop at the first failing batch, so a
        // quota or admission refusal costs one request, not hundreds.
        let mut created = 0;
        let mut batch = 1;
        let mut rest = wanted.as_slice();
        while !rest.is_empty() {
            let (now, later) = rest.split_at(batch.min(rest.len()));
            rest = later;
            let pods: Vec<Pod> = now
                .iter()
                .map(|(ix, failures)| plan::new_pod_with_failures(&self.job, *ix, *failures))
                .collect();
            let results =
                futures::future::join_all(pods.iter().map(|p| self.pods_api.create(&pp, p))).await;
            let mut failed = false;
            for r in results {
                match r {
                    Ok(p) => {
                        created += 1;
                        self.event(
                            NORMAL,
                            "SuccessfulCreate",
                            &format!("Created pod: {}", pod_name(&p)),
                        )
                        .await;
                    }
                    Err(e) => {
                        failed = true;
                        tracing::warn!(job = %self.key, error = %e, "creating pod");
                        self.event(WARNING, "FailedCreate", &format!("Error creating: {e}"))
                            .await;
                    }
                }
            }
            if failed {
                break;
            }
            batch *= 2;
        }
        self.expect(|e| e.min_pods = owned + created);
        created
    }

    async fn write_status(&mut self, status: JobStatus) -> Result<(), JobError> {
        let mut job = self.job.clone();
        job.status = Some(status);
        let name = job.metadata.name.clone().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(
            self.st.ctx.client.clone(),
            job.metadata.namespace.as_deref().unwrap_or_default(),
        );
        self.job = api
            .replace_status(&name, &PostParams::default(), &job)
            .await
            .map_err(api_err("updating status", &self.key))?;
        Ok(())
    }
}

fn failure_type(c: &JobCondition) -> bool {
    c.type_ == plan::FAILURE_TARGET || c.type_ == plan::FAILED
}

async fn reconcile(job: Arc<Job>, st: Arc<State>) -> Result<Action, JobError> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let mut s = Sync {
        st: &st,
        key: format!("{ns}/{name}"),
        job: (*job).clone(),
        pods_api: Api::namespaced(st.ctx.client.clone(), &ns),
        // Whole seconds, as the API keeps timestamps: a status compared after a round trip
        // through the server must not differ by its nanoseconds (that would rewrite it forever).
        now: Timestamp::from_second(Timestamp::now().as_second())
            .unwrap_or_else(|_| Timestamp::now()),
    };
    // managedBy names another controller (JobManagedBy): this Job is not ours to run.
    if job
        .spec
        .as_ref()
        .and_then(|s| s.managed_by.as_deref())
        .is_some_and(|m| m != "kubernetes.io/job-controller")
    {
        return Ok(Action::await_change());
    }
    if plan::is_finished(&s.job) {
        // The outcome is recorded; release whatever still holds our finalizer.
        for p in s.claim().await? {
            if plan::has_finalizer(&p) {
                remove_finalizer(&st.ctx.client, &p)
                    .await
                    .map_err(api_err("removing a finalizer", &s.key))?;
            }
        }
        return Ok(Action::await_change());
    }
    let pods = s.claim().await?;
    sync_job(&mut s, pods).await
}

async fn sync_job(s: &mut Sync<'_>, pods: Vec<Arc<Pod>>) -> Result<Action, JobError> {
    let job = s.job.clone();
    let spec = plan::spec(&job);
    let now = s.now;
    let mut status = job.status.clone().unwrap_or_default();
    let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    let unc_succeeded: HashSet<String> = uncounted.succeeded.iter().flatten().cloned().collect();
    let unc_failed: HashSet<String> = uncounted.failed.iter().flatten().cloned().collect();
    let indexed = plan::is_indexed(&job);
    let completions = spec.completions;

    let active_pods: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| plan::is_active(p))
        .cloned()
        .collect();
    let mut terminating = pods.iter().filter(|p| plan::is_terminating(p)).count() as i32;
    let mut ready = plan::count_ready(&active_pods);
    let new_succeeded = pods
        .iter()
        .filter(|p| plan::has_finalizer(p) && plan::phase(p) == "Succeeded")
        .filter(|p| !unc_succeeded.contains(&uid_of(p)))
        .count() as i32;
    let new_failed = pods
        .iter()
        .filter(|p| plan::has_finalizer(p) && plan::is_pod_failed(p, &job))
        .filter(|p| !unc_failed.contains(&uid_of(p)) && plan::counts_as_failure(&job, p))
        .count() as i32;
    let mut succeeded = status.succeeded.unwrap_or(0) + new_succeeded + unc_succeeded.len() as i32;
    let failed = status.failed.unwrap_or(0) + new_failed + unc_failed.len() as i32;

    if status.start_time.is_none() && !plan::is_suspended(&job) {
        status.start_time = Some(Time(now));
    }
    let mut requeue: Option<Duration> = None;
    let conds = status.conditions.clone().unwrap_or_default();
    let mut finished: Option<JobCondition> =
        plan::find_condition(&conds, plan::SUCCESS_CRITERIA_MET)
            .filter(|c| c.status == "True")
            .cloned();
    if finished.is_none() {
        finished = match plan::find_condition(&conds, plan::FAILURE_TARGET) {
            Some(c) if c.status == "True" => Some(c.clone()),
            _ => plan::fail_job_message(&job, &pods)
                .map(|m| plan::new_condition(plan::FAILURE_TARGET, "PodFailurePolicy", &m, now)),
        };
    }
    if finished.is_none() {
        if failed > spec.backoff_limit.unwrap_or(6)
            || plan::past_backoff_limit_on_failure(&job, &pods)
        {
            finished = Some(plan::new_condition(
                plan::FAILURE_TARGET,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                now,
            ));
        } else if let Some(deadline) = plan::active_deadline(&Job {
            status: Some(status.clone()),
            ..job.clone()
        }) {
            if deadline <= now {
                finished = Some(plan::new_condition(
                    plan::FAILURE_TARGET,
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    now,
                ));
            } else {
                requeue = Some(to_duration(deadline, now));
            }
        }
    }
    let mut succeeded_ix = Indexes::default();
    let mut failed_ix = Indexes::default();
    let per_index = plan::has_backoff_limit_per_index(&job);
    let histories = if per_index {
        plan::index_histories(&job, &pods)
    } else {
        Default::default()
    };
    if indexed {
        succeeded_ix = plan::succeeded_indexes(&job, &pods);
        succeeded = succeeded_ix.total();
        if per_index {
            failed_ix = plan::failed_indexes(&job, &histories);
            if finished.is_none() {
                let max = spec.max_failed_indexes;
                if max.is_some_and(|m| failed_ix.total() > m) {
                    finished = Some(plan::new_condition(
                        plan::FAILURE_TARGET,
                        "MaxFailedIndexesExceeded",
                        "Job has exceeded the specified maximal number of failed indexes",
                        now,
                    ));
                } else if failed_ix.total() > 0
                    && failed_ix.total() + succeeded_ix.total() >= completions.unwrap_or(0)
                {
                    finished = Some(plan::new_condition(
                        plan::FAILURE_TARGET,
                        "FailedIndexes",
                        "Job has failed indexes",
                        now,
                    ));
                }
            }
        }
        if finished.is_none() {
            if let Some(msg) = plan::success_policy_met(&job, &succeeded_ix) {
                finished = Some(plan::new_condition(
                    plan::SUCCESS_CRITERIA_MET,
                    "SuccessPolicy",
                    &msg,
                    now,
                ));
            }
        }
    }

    let mut active = active_pods.len() as i32;
    let mut conditions = conds;
    if finished.is_some() {
        // Ending: stop every running pod (their finalizers stay until they are counted).
        let (deleted, deleted_ready) = s.delete_pods(&active_pods, false).await;
        if deleted != active {
            finished = None;
        }
        active -= deleted;
        terminating += deleted;
        ready -= deleted_ready;
    } else {
        if s.job.metadata.deletion_timestamp.is_none() {
            if plan::is_suspended(&job) {
                let (deleted, deleted_ready) = s.delete_pods(&active_pods, true).await;
                active -= deleted;
                terminating += deleted;
                ready -= deleted_ready;
            } else {
                let want = plan::want_active(&job, succeeded, active);
                let excess = (active - want).max(0) as usize;
                // Pods of finished indexes (succeeded, or failed for good) go first.
                let mut done_ix = succeeded_ix.clone();
                for i in failed_ix.iter() {
                    done_ix.insert(i);
                }
                let victims = plan::pods_for_removal(&job, &active_pods, &done_ix, excess);
                if !victims.is_empty() {
                    let victims: Vec<Arc<Pod>> =
                        victims.into_iter().take(MAX_POD_CHANGES_PER_SYNC).collect();
                    let (deleted, deleted_ready) = s.delete_pods(&victims, true).await;
                    active -= deleted;
                    terminating += deleted;
                    ready -= deleted_ready;
                } else {
                    let held = if plan::only_replace_failed(&job) {
                        terminating
                    } else {
                        0
                    };
                    let diff = (want - held - active).max(0) as usize;
                    // Per-index limits back off each index on its own; otherwise the Job's
                    // failures since its last success hold every new pod back.
                    let wait = if per_index {
                        Duration::ZERO
                    } else {
                        plan::backoff_remaining(&job, &pods, now)
                    };
                    if diff > 0 && !wait.is_zero() {
                        requeue = Some(min_requeue(requeue, wait));
                    } else if diff > 0 {
                        let diff = diff.min(MAX_POD_CHANGES_PER_SYNC);
                        let wanted: Vec<(Option<i32>, Option<i32>)> = if indexed {
                            let pending = plan::first_pending_indexes(
                                &job,
                                &succeeded_ix,
                                &failed_ix,
                                &pods,
                                usize::MAX,
                            );
                            let mut ready_ix = Vec::new();
                            for i in pending {
                                let h = histories.get(&i).cloned().unwrap_or_default();
                                let left = plan::index_backoff_remaining(&h, now);
                                if per_index && !left.is_zero() {
                                    requeue = Some(min_requeue(requeue, left));
                                    continue;
                                }
                                ready_ix.push((Some(i), per_index.then_some(h.failures)));
                                if ready_ix.len() == diff {
                                    break;
                                }
                            }
                            ready_ix
                        } else {
                            vec![(None, None); diff]
                        };
                        active += s.create_pods(wanted, pods.len()).await as i32;
                    }
                }
            }
        }
        let complete = match completions {
            None => succeeded > 0 && active == 0,
            Some(c) => succeeded >= c && active == 0,
        };
        if complete {
            finished = Some(plan::new_condition(
                plan::SUCCESS_CRITERIA_MET,
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
            ));
        } else if plan::is_suspended(&job) {
            if plan::ensure_condition(
                &mut conditions,
                plan::SUSPENDED,
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            ) {
                s.event(NORMAL, "Suspended", "Job suspended").await;
            }
        } else if plan::ensure_condition(
            &mut conditions,
            plan::SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed",
            now,
        ) {
            s.event(NORMAL, "Resumed", "Job resumed").await;
            // activeDeadlineSeconds counts continuous activity: the clock restarts on resume.
            status.start_time = Some(Time(now));
        }
    }
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    status.active = (active > 0).then_some(active);
    status.ready = Some(ready.max(0));
    status.terminating = Some(terminating.max(0));
    if per_index {
        status.failed_indexes = Some(failed_ix.to_string());
    }

    track_and_finish(
        s,
        status,
        &pods,
        finished,
        succeeded_ix,
        &unc_succeeded,
        &unc_failed,
    )
    .await?;

    let unsettled = s
        .job
        .status
        .as_ref()
        .is_some_and(|st| st.terminating.unwrap_or(0) > 0 || st.active.unwrap_or(0) > 0);
    Ok(match requeue {
        Some(d) => Action::requeue(d.max(Duration::from_secs(1))),
        None if plan::is_finished(&s.job) => Action::await_change(),
        // Pods report through the pod watch; this only bounds how long a missed event delays us.
        None if unsettled => Action::requeue(Duration::from_secs(30)),
        None => Action::requeue(Duration::from_secs(300)),
    })
}

fn to_duration(at: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

fn min_requeue(a: Option<Duration>, b: Duration) -> Duration {
    a.map_or(b, |a| a.min(b))
}

/// trackJobStatusAndRemoveFinalizers: records newly finished pods as uncounted, removes their
/// finalizers, moves them into the counters, and lands the terminal condition once nothing is
/// uncounted or still terminating.
async fn track_and_finish(
    s: &mut Sync<'_>,
    mut status: JobStatus,
    pods: &[Arc<Pod>],
    finished: Option<JobCondition>,
    mut succeeded_ix: Indexes,
    unc_succeeded: &HashSet<String>,
    unc_failed: &HashSet<String>,
) -> Result<(), JobError> {
    let job = s.job.clone();
    let indexed = plan::is_indexed(&job);
    let completions = plan::spec(&job).completions.unwrap_or(0);
    let deleting = job.metadata.deletion_timestamp.is_some();
    let ending_in_failure = finished.as_ref().is_some_and(failure_type);

    let mut new_unc_succeeded: Vec<String> = status
        .uncounted_terminated_pods
        .as_ref()
        .and_then(|u| u.succeeded.clone())
        .unwrap_or_default();
    let mut new_unc_failed: Vec<String> = status
        .uncounted_terminated_pods
        .as_ref()
        .and_then(|u| u.failed.clone())
        .unwrap_or_default();
    let with_finalizer: HashSet<String> = pods
        .iter()
        .filter(|p| plan::has_finalizer(p))
        .map(|p| uid_of(p))
        .collect();
    // Uncounted uids whose pod no longer holds the finalizer were released earlier: count them.
    let mut counted = clean_uncounted(
        &mut status,
        &mut new_unc_succeeded,
        &mut new_unc_failed,
        &with_finalizer,
    );

    let mut to_release: Vec<Arc<Pod>> = Vec::new();
    for p in pods.iter().filter(|p| plan::has_finalizer(p)) {
        let failed = plan::is_pod_failed(p, &job);
        let can_release = deleting || finished.is_some() || plan::phase(p) == "Succeeded" || failed;
        if !can_release {
            continue;
        }
        to_release.push(p.clone());
        let uid = uid_of(p);
        if plan::phase(p) == "Succeeded" && !unc_failed.contains(&uid) {
            if indexed {
                // The index is enough to never count a success twice.
                if let Some(i) = plan::completion_index(p).filter(|i| *i < completions) {
                    succeeded_ix.insert(i);
                }
            } else if !unc_succeeded.contains(&uid) && !new_unc_succeeded.contains(&uid) {
                new_unc_succeeded.push(uid);
            }
        } else if failed || ending_in_failure {
            let in_range = !indexed || plan::completion_index(p).is_some_and(|i| i < completions);
            let counts = match job
                .spec
                .as_ref()
                .and_then(|s| s.pod_failure_policy.as_ref())
            {
                Some(policy) => {
                    plan::match_pod_failure_policy(policy, p) != Some(PolicyAction::Ignore)
                }
                None => true,
            };
            if in_range && counts && !unc_failed.contains(&uid) && !new_unc_failed.contains(&uid) {
                new_unc_failed.push(uid);
            }
        }
    }
    if indexed {
        status.completed_indexes = Some(succeeded_ix.to_string());
        status.succeeded = Some(succeeded_ix.total()).filter(|n| *n > 0);
    }
    let mut conditions = status.conditions.clone().unwrap_or_default();
    let mut terminal = None;
    if let Some(cond) = &finished {
        // The interim condition is written before any finalizer goes, so the outcome survives a
        // crash between the two; the final one follows once every pod is counted.
        if plan::find_condition(&conditions, &cond.type_).is_none() {
            conditions.push(cond.clone());
        }
        let final_type = if failure_type(cond) {
            plan::FAILED
        } else {
            plan::COMPLETE
        };
        terminal = Some(plan::new_condition(
            final_type,
            cond.reason.as_deref().unwrap_or(""),
            cond.message.as_deref().unwrap_or(""),
            s.now,
        ));
    }
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
        succeeded: (!new_unc_succeeded.is_empty()).then(|| new_unc_succeeded.clone()),
        failed: (!new_unc_failed.is_empty()).then(|| new_unc_failed.clone()),
    });
    if job.status.as_ref() != Some(&status) {
        s.write_status(status.clone()).await?;
    }

    // Step 2: release the recorded pods.
    let mut released = HashSet::new();
    let results = futures::future::join_all(
        to_release
            .iter()
            .map(|p| remove_finalizer(&s.st.ctx.client, p)),
    )
    .await;
    for (p, r) in to_release.iter().zip(results) {
        match r {
            Ok(()) => {
                released.insert(uid_of(p));
            }
            Err(e) => {
                tracing::warn!(job = %s.key, pod = %pod_name(p), error = %e, "removing the tracking finalizer")
            }
        }
    }
    s.expect(|e| e.finalizer_removed.extend(released.iter().cloned()));
    let still: HashSet<String> = with_finalizer.difference(&released).cloned().collect();
    counted |= clean_uncounted(
        &mut status,
        &mut new_unc_succeeded,
        &mut new_unc_failed,
        &still,
    );
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
        succeeded: (!new_unc_succeeded.is_empty()).then(|| new_unc_succeeded.clone()),
        failed: (!new_unc_failed.is_empty()).then(|| new_unc_failed.clone()),
    });

    // Step 3: the terminal condition, once nothing is uncounted or still stopping.
    let mut finished_now = None;
    if let Some(t) = terminal {
        let all_counted = new_unc_succeeded.is_empty() && new_unc_failed.is_empty();
        if all_counted && status.terminating.unwrap_or(0) == 0 {
            let mut conditions = status.conditions.clone().unwrap_or_default();
            plan::ensure_condition(
                &mut conditions,
                &t.type_,
                "True",
                t.reason.as_deref().unwrap_or(""),
                t.message.as_deref().unwrap_or(""),
                s.now,
            );
            status.conditions = Some(conditions);
            if t.type_ == plan::COMPLETE {
                status.completion_time = Some(Time(s.now));
            }
            finished_now = Some(t);
        }
    }
    if counted || finished_now.is_some() || s.job.status.as_ref() != Some(&status) {
        s.write_status(status).await?;
    }
    if let Some(t) = finished_now {
        if t.type_ == plan::COMPLETE {
            let over = plan::spec(&job)
                .completions
                .is_some_and(|c| s.job.status.as_ref().and_then(|x| x.succeeded).unwrap_or(0) > c);
            if over {
                s.event(
                    WARNING,
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached",
                )
                .await;
            }
            s.event(NORMAL, "Completed", "Job completed").await;
        } else {
            s.event(
                WARNING,
                t.reason.as_deref().unwrap_or(""),
                t.message.as_deref().unwrap_or(""),
            )
            .await;
        }
    }
    Ok(())
}

/// Moves uncounted uids whose pod no longer holds the finalizer into the counters; true when any
/// moved.
fn clean_uncounted(
    status: &mut JobStatus,
    succeeded: &mut Vec<String>,
    failed: &mut Vec<String>,
    with_finalizer: &HashSet<String>,
) -> bool {
    let (before_s, before_f) = (succeeded.len(), failed.len());
    succeeded.retain(|u| with_finalizer.contains(u));
    failed.retain(|u| with_finalizer.contains(u));
    let (moved_s, moved_f) = (before_s - succeeded.len(), before_f - failed.len());
    if moved_s > 0 {
        status.succeeded = Some(status.succeeded.unwrap_or(0) + moved_s as i32);
    }
    if moved_f > 0 {
        status.failed = Some(status.failed.unwrap_or(0) + moved_f as i32);
    }
    moved_s + moved_f > 0
}

fn error_policy(_job: Arc<Job>, err: &JobError, _st: Arc<State>) -> Action {
    match err {
        // A write against a stale cache: the watch is about to catch up.
        JobError::Api {
            source: kube::Error::Api(s),
            ..
        } if s.code == 409 => Action::requeue(Duration::from_millis(500)),
        _ => {
            tracing::warn!(error = %err, "job");
            Action::requeue(Duration::from_secs(2))
        }
    }
}
