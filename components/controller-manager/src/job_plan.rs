//! The Job controller's decisions as pure functions over the Job and its pods (upstream's
//! job_controller.go, pod_failure_policy.go, backoff_utils.go and indexed_job_utils.go): which pods
//! count as failed, what the pod failure policy says, how many pods should run, which indexes to
//! start, how long failures back off, and the conditions a Job ends with. `job.rs` acts on them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, PodFailurePolicy};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::job_indexes::Indexes;
use crate::pods::{deletion_order, is_ready};
pub use crate::pods::{is_active, phase};

/// Held on every pod the Job made until its outcome is counted in the Job's status, so a pod
/// deleted (or garbage collected) before the controller saw it finish is never lost or doubled.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// With backoffLimitPerIndex: how many pods of this index failed before this one.
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// The first retry of a failed pod waits this long, doubling per consecutive failure.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_BACKOFF: Duration = Duration::from_secs(360);

/// Condition types and reasons, as `kubectl describe job` and `kubectl wait` see them.
pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
pub const FAILURE_TARGET: &str = "FailureTarget";
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
pub const SUSPENDED: &str = "Suspended";

pub fn spec(job: &Job) -> k8s_openapi::api::batch::v1::JobSpec {
    job.spec.clone().unwrap_or_default()
}

pub fn is_indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

pub fn is_suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

pub fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == TRACKING_FINALIZER))
}

/// Being deleted and not yet finished.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !matches!(phase(pod), "Succeeded" | "Failed")
}

/// podReplacementPolicy Failed (implied by a pod failure policy): a deleted pod is replaced only
/// once it has actually failed, so two pods never run for one completion.
pub fn only_replace_failed(job: &Job) -> bool {
    let s = job.spec.as_ref();
    s.and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed")
        || s.and_then(|s| s.pod_failure_policy.as_ref()).is_some()
}

/// A failed pod, or (unless only failed pods are replaced) a deleted one that did not succeed: an
/// orphan deleted before it could reach the Failed phase still counts.
pub fn is_pod_failed(pod: &Pod, job: &Job) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    if only_replace_failed(job) {
        return false;
    }
    pod.metadata.deletion_timestamp.is_some() && phase(pod) != "Succeeded"
}

pub fn completion_index(pod: &Pod) -> Option<i32> {
    let v = pod.metadata.annotations.as_ref()?.get(COMPLETION_INDEX)?;
    v.parse::<i32>().ok().filter(|i| *i >= 0)
}

/// What a matching pod failure policy rule says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyAction {
    FailJob(String),
    FailIndex,
    Ignore,
    Count,
}

fn terminated_exit_codes(pod: &Pod) -> Vec<(String, i32)> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    // Init containers first, as upstream walks them.
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            Some((c.name.clone(), t.exit_code))
        })
        .collect()
}

/// The first rule matching a failed pod (matchPodFailurePolicy); `None` = no rule matched, the
/// failure counts as usual.
pub fn match_pod_failure_policy(policy: &PodFailurePolicy, pod: &Pod) -> Option<PolicyAction> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    for (i, rule) in policy.rules.iter().enumerate() {
        let rule_action = rule.action.as_str();
        if let Some(req) = &rule.on_exit_codes {
            for (container, code) in terminated_exit_codes(pod) {
                if code == 0 {
                    continue;
                }
                if req.container_name.as_ref().is_some_and(|c| *c != container) {
                    continue;
                }
                let listed = req.values.contains(&code);
                let matched = match req.operator.as_str() {
                    "In" => listed,
                    "NotIn" => !listed,
                    _ => false,
                };
                if matched {
                    return Some(action(rule_action, || {
                        format!(
                            "Container {container} for pod {ns}/{name} failed with exit code {code} matching {rule_action} rule at index {i}"
                        )
                    }));
                }
            }
        }
        for pattern in rule.on_pod_conditions.iter().flatten() {
            let want = if pattern.status.is_empty() {
                "True"
            } else {
                pattern.status.as_str()
            };
            let has = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|l| {
                    l.iter()
                        .any(|c| c.type_ == pattern.type_ && c.status == want)
                });
            if has {
                return Some(action(rule_action, || {
                    format!(
                        "Pod {ns}/{name} has condition {} matching {rule_action} rule at index {i}",
                        pattern.type_
                    )
                }));
            }
        }
    }
    None
}

fn action(name: &str, message: impl FnOnce() -> String) -> PolicyAction {
    match name {
        "FailJob" => PolicyAction::FailJob(message()),
        "FailIndex" => PolicyAction::FailIndex,
        "Ignore" => PolicyAction::Ignore,
        _ => PolicyAction::Count,
    }
}

/// Whether a failed pod counts against backoffLimit (an `Ignore` rule says it does not).
pub fn counts_as_failure(job: &Job, pod: &Pod) -> bool {
    match job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref())
    {
        Some(p) => match_pod_failure_policy(p, pod) != Some(PolicyAction::Ignore),
        None => true,
    }
}

/// The FailJob message of the first failed pod a rule fails the Job for.
pub fn fail_job_message(job: &Job, pods: &[Arc<Pod>]) -> Option<String> {
    let policy = job.spec.as_ref()?.pod_failure_policy.as_ref()?;
    pods.iter().filter(|p| is_pod_failed(p, job)).find_map(|p| {
        match match_pod_failure_policy(policy, p) {
            Some(PolicyAction::FailJob(m)) => Some(m),
            _ => None,
        }
    })
}

/// restartPolicy OnFailure restarts containers in place, so failures show as restarts: the Job
/// fails once the running pods' restarts reach backoffLimit.
pub fn past_backoff_limit_on_failure(job: &Job, pods: &[Arc<Pod>]) -> bool {
    let s = spec(job);
    let restart = s
        .template
        .spec
        .as_ref()
        .and_then(|p| p.restart_policy.as_deref());
    if restart != Some("OnFailure") {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
                .map(|c| c.restart_count)
        })
        .sum();
    let limit = s.backoff_limit.unwrap_or(6);
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// The deadline the Job fails at (activeDeadlineSeconds from its start; never while suspended).
pub fn active_deadline(job: &Job) -> Option<Timestamp> {
    let secs = job.spec.as_ref()?.active_deadline_seconds?;
    if is_suspended(job) {
        return None;
    }
    let start = job.status.as_ref()?.start_time.as_ref()?.0;
    Some(start + SignedDuration::from_secs(secs))
}

/// How many pods should be running now.
pub fn want_active(job: &Job, succeeded: i32, active: i32) -> i32 {
    let s = spec(job);
    let parallelism = s.parallelism.unwrap_or(1);
    match s.completions {
        // Work-queue Jobs: once one pod succeeded, the others finish on their own; none is added.
        None if succeeded > 0 => active,
        None => parallelism,
        Some(c) => (c - succeeded).clamp(0, parallelism),
    }
}

/// The active pods to delete, at least `at_least` of them: for Indexed Jobs first the pods of
/// indexes that are out of range, already succeeded or held by another pod, then upstream's
/// deletion order (unscheduled, pending, not ready, newest).
pub fn pods_for_removal(
    job: &Job,
    active: &[Arc<Pod>],
    succeeded: &Indexes,
    at_least: usize,
) -> Vec<Arc<Pod>> {
    let mut rest: Vec<Arc<Pod>> = Vec::new();
    let mut remove: Vec<Arc<Pod>> = Vec::new();
    if is_indexed(job) {
        let completions = spec(job).completions.unwrap_or(0);
        let mut sorted: Vec<Arc<Pod>> = active.to_vec();
        sorted.sort_by(|a, b| {
            completion_index(a)
                .cmp(&completion_index(b))
                .then(deletion_order(b, a))
        });
        let mut seen = std::collections::BTreeSet::new();
        for p in sorted {
            match completion_index(&p) {
                Some(i) if i < completions && !succeeded.contains(i) && seen.insert(i) => {
                    rest.push(p)
                }
                _ => remove.push(p),
            }
        }
    } else {
        rest = active.to_vec();
    }
    if remove.len() < at_least {
        rest.sort_by(deletion_order);
        let more = at_least - remove.len();
        remove.extend(rest.into_iter().take(more));
    }
    remove
}

/// The lowest `count` indexes that have neither succeeded nor a pod working on them.
pub fn first_pending_indexes(
    job: &Job,
    succeeded: &Indexes,
    failed: &Indexes,
    pods: &[Arc<Pod>],
    count: usize,
) -> Vec<i32> {
    let completions = spec(job).completions.unwrap_or(0);
    let replace_only_failed = only_replace_failed(job);
    let busy: std::collections::BTreeSet<i32> = pods
        .iter()
        .filter(|p| is_active(p) || (replace_only_failed && is_terminating(p)))
        .filter_map(|p| completion_index(p))
        .collect();
    (0..completions)
        .filter(|i| !succeeded.contains(*i) && !failed.contains(*i) && !busy.contains(i))
        .take(count)
        .collect()
}

/// When a pod finished: its containers' latest finish, else its Ready condition's transition,
/// else its deletion.
pub fn finished_at(pod: &Pod) -> Option<Timestamp> {
    let status = pod.status.as_ref();
    let latest = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    latest
        .or_else(|| {
            status?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")?
                .last_transition_time
                .as_ref()
                .map(|t| t.0)
        })
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
}

/// Exponential back-off before replacing failed pods (backoff_utils.go), read off the pods
/// themselves so it survives a controller restart: 10 s after the first consecutive failure,
/// doubling per further failure since the last success, capped at 6 minutes.
pub fn backoff_remaining(job: &Job, pods: &[Arc<Pod>], now: Timestamp) -> Duration {
    let last_success = pods
        .iter()
        .filter(|p| phase(p) == "Succeeded")
        .filter_map(|p| finished_at(p))
        .max();
    let failures: Vec<Timestamp> = pods
        .iter()
        .filter(|p| is_pod_failed(p, job) && counts_as_failure(job, p))
        .filter_map(|p| finished_at(p))
        .filter(|t| last_success.is_none_or(|s| *t > s))
        .collect();
    let Some(last) = failures.iter().max() else {
        return Duration::ZERO;
    };
    let exp = (failures.len() as u32 - 1).min(16);
    let backoff = DEFAULT_BACKOFF.saturating_mul(1u32 << exp).min(MAX_BACKOFF);
    let elapsed = now.duration_since(*last);
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    backoff.saturating_sub(elapsed)
}

/// A new pod for the Job: the template, owned by the Job, holding the tracking finalizer; an
/// Indexed Job's pod also carries its index (annotation, label, env) and `<job>-<index>` hostname.
pub fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    new_pod_with_failures(job, index, None)
}

/// [`new_pod`] for a Job with backoffLimitPerIndex: the pod records the index's failures so far.
pub fn new_pod_with_failures(job: &Job, index: Option<i32>, failures: Option<i32>) -> Pod {
    let name = job.metadata.name.clone().unwrap_or_default();
    let template = spec(job).template;
    let meta = template.metadata.unwrap_or_default();
    let mut pod_spec = template.spec.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let mut finalizers = meta.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.to_string());
    }
    let mut generate_name = format!("{name}-");
    if let Some(i) = index {
        annotations.insert(COMPLETION_INDEX.into(), i.to_string());
        if let Some(n) = failures {
            annotations.insert(INDEX_FAILURE_COUNT.into(), n.to_string());
        }
        labels.insert(COMPLETION_INDEX.into(), i.to_string());
        if pod_spec.hostname.is_none() {
            pod_spec.hostname = Some(format!("{name}-{i}"));
        }
        generate_name = format!("{name}-{i}-");
        let env = EnvVar {
            name: COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: Some("v1".into()),
                    field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                }),
                ..Default::default()
            }),
        };
        for c in pod_spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(pod_spec.containers.iter_mut())
        {
            let list = c.env.get_or_insert_with(Vec::new);
            if !list.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
                list.push(env.clone());
            }
        }
    }
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(finalizers),
            owner_references: Some(vec![owner_reference(job)]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

pub fn owner_reference(job: &Job) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub fn find_condition<'a>(conds: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    conds.iter().find(|c| c.type_ == type_)
}

pub fn condition_true(job: &Job, type_: &str) -> Option<JobCondition> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    find_condition(conds, type_)
        .filter(|c| c.status == "True")
        .cloned()
}

/// Complete or Failed: nothing more is done for the Job but cleanup.
pub fn is_finished(job: &Job) -> bool {
    condition_true(job, COMPLETE).is_some() || condition_true(job, FAILED).is_some()
}

pub fn new_condition(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: (!reason.is_empty()).then(|| reason.into()),
        message: (!message.is_empty()).then(|| message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// ensureJobConditionStatus: sets a condition's status (a False condition is never added
/// fresh); true when the list changed.
pub fn ensure_condition(
    conds: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status == status
            && c.reason.as_deref().unwrap_or("") == reason
            && c.message.as_deref().unwrap_or("") == message
        {
            return false;
        }
        if c.status != status {
            c.last_transition_time = Some(Time(now));
        }
        c.status = status.into();
        c.reason = (!reason.is_empty()).then(|| reason.into());
        c.message = (!message.is_empty()).then(|| message.into());
        c.last_probe_time = Some(Time(now));
        return true;
    }
    if status == "False" {
        return false;
    }
    conds.push(new_condition(type_, reason, message, now));
    true
}

/// The successPolicy rule the succeeded indexes satisfy, as the SuccessCriteriaMet message.
pub fn success_policy_met(job: &Job, succeeded: &Indexes) -> Option<String> {
    let policy = job.spec.as_ref()?.success_policy.as_ref()?;
    let completions = spec(job).completions.unwrap_or(0);
    for (i, rule) in policy.rules.iter().enumerate() {
        let met = match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(ix), count) => {
                let wanted = Indexes::parse(ix, completions);
                let done = wanted.iter().filter(|i| succeeded.contains(*i)).count() as i32;
                match count {
                    Some(c) => done >= c,
                    None => done == wanted.total(),
                }
            }
            (None, Some(c)) => succeeded.total() >= c,
            (None, None) => false,
        };
        if met {
            return Some(format!("Matched rules at index {i}"));
        }
    }
    None
}

/// The indexes whose pods all ran to success (from the pods still counted and the status).
pub fn succeeded_indexes(job: &Job, pods: &[Arc<Pod>]) -> Indexes {
    let completions = spec(job).completions.unwrap_or(0);
    let status = job.status.as_ref();
    let mut ix = Indexes::parse(
        status
            .and_then(|s| s.completed_indexes.as_deref())
            .unwrap_or(""),
        completions,
    );
    for p in pods
        .iter()
        .filter(|p| phase(p) == "Succeeded" && has_finalizer(p))
    {
        if let Some(i) = completion_index(p).filter(|i| *i < completions) {
            ix.insert(i);
        }
    }
    ix
}

pub fn has_backoff_limit_per_index(job: &Job) -> bool {
    is_indexed(job)
        && job
            .spec
            .as_ref()
            .and_then(|s| s.backoff_limit_per_index)
            .is_some()
}

/// One index's history under backoffLimitPerIndex: failures so far (the newest pod's count, plus
/// its own failure), whether a FailIndex rule matched, and when the newest pod failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexHistory {
    pub failures: i32,
    pub fail_index: bool,
    pub failed_at: Option<Timestamp>,
}

/// Per index, read off its newest pod (the failure count travels from pod to replacement in the
/// `job-index-failure-count` annotation, so it survives the older pods' deletion).
pub fn index_histories(
    job: &Job,
    pods: &[Arc<Pod>],
) -> std::collections::BTreeMap<i32, IndexHistory> {
    let mut newest: std::collections::BTreeMap<i32, &Arc<Pod>> = Default::default();
    for p in pods {
        let Some(i) = completion_index(p) else {
            continue;
        };
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        match newest.get(&i) {
            Some(q) if created(q) >= created(p) => {}
            _ => {
                newest.insert(i, p);
            }
        }
    }
    let policy = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref());
    newest
        .into_iter()
        .map(|(i, p)| {
            let before = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INDEX_FAILURE_COUNT))
                .and_then(|v| v.parse::<i32>().ok())
                .unwrap_or(0);
            let failed = is_pod_failed(p, job) && counts_as_failure(job, p);
            let fail_index = failed
                && policy.is_some_and(|pol| {
                    match_pod_failure_policy(pol, p) == Some(PolicyAction::FailIndex)
                });
            let h = IndexHistory {
                failures: before + failed as i32,
                fail_index,
                failed_at: failed.then(|| finished_at(p)).flatten(),
            };
            (i, h)
        })
        .collect()
}

/// The indexes that ran out of retries (or matched a FailIndex rule), with those already recorded
/// in status.failedIndexes.
pub fn failed_indexes(
    job: &Job,
    histories: &std::collections::BTreeMap<i32, IndexHistory>,
) -> Indexes {
    let s = spec(job);
    let completions = s.completions.unwrap_or(0);
    let limit = s.backoff_limit_per_index.unwrap_or(i32::MAX);
    let mut ix = Indexes::parse(
        job.status
            .as_ref()
            .and_then(|s| s.failed_indexes.as_deref())
            .unwrap_or(""),
        completions,
    );
    for (i, h) in histories {
        if *i < completions && h.failed_at.is_some() && (h.fail_index || h.failures > limit) {
            ix.insert(*i);
        }
    }
    ix
}

/// How long an index must still wait before its next pod (its own exponential back-off).
pub fn index_backoff_remaining(h: &IndexHistory, now: Timestamp) -> Duration {
    let Some(at) = h.failed_at else {
        return Duration::ZERO;
    };
    let exp = (h.failures.max(1) as u32 - 1).min(16);
    let backoff = DEFAULT_BACKOFF.saturating_mul(1u32 << exp).min(MAX_BACKOFF);
    let elapsed = Duration::try_from(now.duration_since(at)).unwrap_or(Duration::ZERO);
    backoff.saturating_sub(elapsed)
}

/// Ready pods among these.
pub fn count_ready(pods: &[Arc<Pod>]) -> i32 {
    pods.iter().filter(|p| is_ready(p)).count() as i32
}

/// When a finished Job with ttlSecondsAfterFinished is due for deletion.
pub fn ttl_expires_at(job: &Job) -> Option<Timestamp> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    let finished = conds
        .iter()
        .filter(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
        .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .max()
        .or_else(|| job.status.as_ref()?.completion_time.as_ref().map(|t| t.0))?;
    Some(finished + SignedDuration::from_secs(ttl as i64))
}

#[cfg(test)]
#[path = "job_plan_tests.rs"]
mod tests;
