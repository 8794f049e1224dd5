//! cronjob: starts each CronJob's Jobs at its schedule times (read in `spec.timeZone`, else UTC),
//! honouring suspend, startingDeadlineSeconds and concurrencyPolicy, keeps `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime`, and prunes finished Jobs beyond the history limits
//! — upstream's cronjob_controllerv2. A CronJob is requeued for just after its next schedule time
//! (never polled); its Jobs' events wake it in between. The decisions live in `cronjob_plan`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kiln_common::client::process_identity;
use kiln_common::events::{object_reference, EventRecorder, NORMAL, WARNING};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crate::context::Context;
use crate::cronjob_plan::{
    controlled_by, decide, history_victims, is_ours, reconcile_children, requeue_after,
    schedule_of, started, unlisted_active, Decision, Event,
};

#[derive(Debug, thiserror::Error)]
pub enum CronJobError {
    #[error("{action} for CronJob {key}: {source}")]
    Api {
        action: &'static str,
        key: String,
        source: kube::Error,
    },
    #[error("could not replace job {namespace}/{name}")]
    Replace { namespace: String, name: String },
}

struct State {
    client: kube::Client,
    /// Upstream's cronjob controller reports as its own component.
    recorder: EventRecorder,
    /// The schedule and zone each CronJob (by UID) had when last seen, to tell a schedule change.
    seen: Mutex<HashMap<String, (String, Option<String>)>>,
}

impl State {
    /// Records what the CronJob's schedule is now; true when it differs from the last look.
    fn schedule_changed(&self, cj: &CronJob) -> bool {
        let spec = cj.spec.clone().unwrap_or_default();
        let now = (spec.schedule, spec.time_zone);
        let mut seen = self.seen.lock().expect("schedule cache");
        // Bounded: forgetting only costs one immediate sync after a schedule change.
        if seen.len() > 10_000 {
            seen.clear();
        }
        let uid = cj.metadata.uid.clone().unwrap_or_default();
        seen.insert(uid, now.clone())
            .is_some_and(|before| before != now)
    }

    fn forget(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.seen.lock().expect("schedule cache").remove(uid);
        }
    }
}

pub async fn run(ctx: Context) {
    let client = ctx.client.clone();
    let state = Arc::new(State {
        recorder: EventRecorder::new(client.clone(), "cronjob-controller", &process_identity()),
        client: client.clone(),
        seen: Mutex::new(HashMap::new()),
    });
    Controller::new(
        Api::<CronJob>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<Job>::all(client), watcher::Config::default())
    .run(reconcile, error_policy, state)
    .for_each(|_| async {})
    .await;
}

/// The message of an API error, as upstream's `%v` of a StatusError prints it.
fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn requeue(after: Option<Duration>) -> Action {
    match after {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    }
}

/// One sync of one CronJob.
struct Sync<'a> {
    st: &'a State,
    cj: &'a CronJob,
    key: String,
    cronjobs: Api<CronJob>,
    jobs: Api<Job>,
}

impl Sync<'_> {
    fn err(&self, action: &'static str) -> impl FnOnce(kube::Error) -> CronJobError + '_ {
        move |source| CronJobError::Api {
            action,
            key: self.key.clone(),
            source,
        }
    }

    async fn event(&self, warning: bool, reason: &str, message: &str) {
        let type_ = if warning { WARNING } else { NORMAL };
        if let Err(e) = self
            .st
            .recorder
            .record(&object_reference(self.cj), type_, reason, message)
            .await
        {
            tracing::debug!(cronjob = %self.key, error = %e, "event not written");
        }
    }

    async fn events(&self, events: &[Event]) {
        for e in events {
            self.event(e.warning, e.reason, &e.message).await;
        }
    }

    /// upstream's deleteJob: the Job goes (its pods with it) and leaves `active`.
    async fn delete_job(&self, name: &str, uid: Option<&str>, status: &mut CronJobStatus) -> bool {
        match self.jobs.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                if let Some(active) = status.active.as_mut() {
                    active.retain(|r| r.uid.as_deref() != uid);
                }
                if status.active.as_ref().is_some_and(Vec::is_empty) {
                    status.active = None;
                }
                tracing::info!(cronjob = %self.key, job = name, "deleted job");
                self.event(false, "SuccessfulDelete", &format!("Deleted job {name}"))
                    .await;
                true
            }
            Err(e) => {
                tracing::warn!(cronjob = %self.key, job = name, error = %e, "deleting a job");
                self.event(
                    true,
                    "FailedDelete",
                    &format!("Deleted job: {}", message(&e)),
                )
                .await;
                false
            }
        }
    }

    /// Writes the status when it changed (the object's resourceVersion guards against writing
    /// over a newer one).
    async fn write_status(&self, status: &CronJobStatus) -> Result<(), CronJobError> {
        if self.cj.status.clone().unwrap_or_default() == *status {
            return Ok(());
        }
        let mut obj = self.cj.clone();
        obj.status = Some(status.clone());
        self.cronjobs
            .replace_status(
                self.cj.metadata.name.as_deref().unwrap_or_default(),
                &PostParams::default(),
                &obj,
            )
            .await
            .map_err(self.err("updating status"))?;
        Ok(())
    }

    /// Replace's deletions, then the Job for `scheduled`; the status to write.
    async fn start(
        &self,
        mut status: CronJobStatus,
        scheduled: i64,
        replace: &[ObjectReference],
        job: &Job,
    ) -> Result<CronJobStatus, (CronJobStatus, CronJobError)> {
        for r in replace {
            let name = r.name.clone().unwrap_or_default();
            let existing = match self.jobs.get(&name).await {
                Ok(j) => j,
                Err(e) => {
                    self.event(true, "FailedGet", &format!("Get job: {}", message(&e)))
                        .await;
                    return Err((status, self.err("reading a job to replace")(e)));
                }
            };
            let uid = existing.metadata.uid.as_deref();
            if !self.delete_job(&name, uid, &mut status).await {
                let namespace = existing.metadata.namespace.clone().unwrap_or_default();
                return Err((status, CronJobError::Replace { namespace, name }));
            }
        }
        let name = job.metadata.name.clone().unwrap_or_default();
        match self.jobs.create(&PostParams::default(), job).await {
            Ok(created) => {
                tracing::info!(cronjob = %self.key, job = %name, scheduled, "created job");
                self.event(false, "SuccessfulCreate", &format!("Created job {name}"))
                    .await;
                Ok(started(&status, &created, scheduled))
            }
            // The name is the schedule time's: this time already has its Job. Ours and not yet
            // listed (we stopped between creating and recording it) → record it; someone
            // else's → leave it to them.
            Err(e) if is_status(&e, 409) => {
                let existing = match self.jobs.get(&name).await {
                    Ok(j) => j,
                    Err(e) => return Err((status, self.err("reading an existing job")(e))),
                };
                let listed = status
                    .active
                    .iter()
                    .flatten()
                    .any(|r| r.uid == existing.metadata.uid);
                if !is_ours(self.cj, &existing) || listed {
                    return Ok(status);
                }
                tracing::info!(cronjob = %self.key, job = %name, "job already exists");
                Ok(started(&status, &existing, scheduled))
            }
            // A namespace being deleted refuses every create; nothing to report.
            Err(e) if is_status(&e, 403) && message(&e).contains("being terminated") => {
                Err((status, self.err("creating a job")(e)))
            }
            Err(e) => {
                self.event(
                    true,
                    "FailedCreate",
                    &format!("Error creating job: {}", message(&e)),
                )
                .await;
                Err((status, self.err("creating a job")(e)))
            }
        }
    }
}

async fn reconcile(cached: Arc<CronJob>, st: Arc<State>) -> Result<Action, CronJobError> {
    let ns = cached.metadata.namespace.clone().unwrap_or_default();
    let name = cached.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let cronjobs: Api<CronJob> = Api::namespaced(st.client.clone(), &ns);
    // The cache can lag behind our own status writes; decide on what is stored.
    let get = cronjobs
        .get_opt(&name)
        .await
        .map_err(|source| CronJobError::Api {
            action: "reading",
            key: key.clone(),
            source,
        })?;
    let Some(cj) = get else {
        st.forget(cached.metadata.uid.as_deref());
        return Ok(Action::await_change());
    };
    let sync = Sync {
        st: &st,
        cj: &cj,
        key,
        cronjobs,
        jobs: Api::namespaced(st.client.clone(), &ns),
    };
    let now_ms = Timestamp::now().as_millisecond();

    // Upstream's updateCronJob: a changed schedule or zone is not acted on at once, but at the
    // new schedule's next time (anything else that changes syncs now).
    if st.schedule_changed(&cj) {
        return Ok(match schedule_of(&cj).0 {
            Ok(schedule) => requeue(requeue_after(&cj, now_ms, &schedule)),
            Err(_) => {
                let schedule = cj
                    .spec
                    .as_ref()
                    .map(|s| s.schedule.clone())
                    .unwrap_or_default();
                sync.event(
                    true,
                    "UnParseableCronJobSchedule",
                    &format!("unparseable schedule for cronjob: {schedule}"),
                )
                .await;
                Action::await_change()
            }
        });
    }

    let listed = sync
        .jobs
        .list(&ListParams::default())
        .await
        .map_err(sync.err("listing jobs"))?
        .items;
    let jobs = controlled_by(&cj, &listed);

    // History limits first, as upstream's cleanupFinishedJobs.
    let mut working = cj.clone();
    let mut status = cj.status.clone().unwrap_or_default();
    for victim in history_victims(&cj, &jobs) {
        let name = victim.metadata.name.clone().unwrap_or_default();
        sync.delete_job(&name, victim.metadata.uid.as_deref(), &mut status)
            .await;
    }
    working.status = Some(status);

    // An active Job missing from the list may only be newer than it: ask before dropping it.
    let mut missing = BTreeSet::new();
    for r in unlisted_active(&working, &jobs) {
        let name = r.name.clone().unwrap_or_default();
        match sync.jobs.get_opt(&name).await {
            Ok(None) => {
                missing.insert(name);
            }
            Ok(Some(_)) => {}
            Err(e) => return Err(sync.err("reading an active job")(e)),
        }
    }
    let (status, events) = reconcile_children(&working, &jobs, &missing);
    sync.events(&events).await;
    working.status = Some(status.clone());

    match decide(&working, now_ms) {
        Decision::Wait {
            events,
            requeue: after,
        } => {
            sync.events(&events).await;
            sync.write_status(&status).await?;
            Ok(requeue(after))
        }
        Decision::Run {
            events,
            scheduled,
            replace,
            job,
            schedule,
        } => {
            sync.events(&events).await;
            let status = match sync.start(status, scheduled, &replace, &job).await {
                Ok(s) => s,
                Err((s, e)) => {
                    sync.write_status(&s).await?;
                    return Err(e);
                }
            };
            sync.write_status(&status).await?;
            working.status = Some(status);
            // Someone else's Job at this time still moves us on to the next one.
            Ok(requeue(requeue_after(&working, now_ms, &schedule)))
        }
    }
}

fn error_policy(_cj: Arc<CronJob>, err: &CronJobError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "cronjob");
    Action::requeue(Duration::from_secs(2))
}
