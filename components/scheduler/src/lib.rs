//! kiln-scheduler: places unbound pods on nodes (filter, then score), on kube-rs watchers, with
//! leader election so several control planes can run it.
//!
//! Pure parts (unit-tested without a server): `resources`, `cache`, `filters`,
//! `scores`, `algorithm`, `queue`, `nominator`, `preemption` and `preemption_victims`
//! (DefaultPreemption). I/O: `scheduler` (the loop), `pod_status` (binding, condition),
//! `preemption_exec` (evicting victims), `metrics` (kube-scheduler's series). What every component needs (client, leader election, events,
//! health/metrics serving, duration flags, node selector and taint matching) comes from kiln-common.

pub mod algorithm;
pub mod cache;
pub mod config;
pub mod filters;
pub mod fit_error;
pub mod metrics;
pub mod node_info;
pub mod nominator;
pub mod pod_info;
pub mod pod_status;
pub mod preemption;
pub mod preemption_exec;
pub mod preemption_verdict;
pub mod preemption_victims;
pub mod queue;
pub mod resources;
pub mod scheduler;
pub mod scores;
pub mod volume_binding;
pub mod volume_cache;
pub mod volume_claims;
pub mod volume_filters;
pub mod volume_prebind;
pub mod volume_restrictions;
pub mod volume_zone;

use std::net::SocketAddr;
use std::sync::Arc;

pub use config::Options;

use kiln_common::leader_election::own_thread::Candidate;
use kiln_common::leader_election::LeaderElectionConfig;
use kiln_common::{client, serving};

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Client(#[from] client::ClientError),
    #[error(transparent)]
    LeaderElection(#[from] kiln_common::leader_election::LeaderElectionError),
    #[error(transparent)]
    Serving(#[from] serving::ServingError),
    #[error("leader election lost")]
    LeadershipLost,
    #[error("the scheduling loop ended (its watches closed)")]
    LoopEnded,
}

/// A started scheduler: the health endpoint is up; the loop runs (or waits for leadership) in a
/// task. Dropping it stops both.
pub struct RunningScheduler {
    health: serving::HealthServer,
    task: tokio::task::JoinHandle<Result<(), SchedulerError>>,
    metrics: Arc<metrics::Metrics>,
}

impl RunningScheduler {
    pub fn health_addr(&self) -> SocketAddr {
        self.health.local_addr()
    }

    pub fn metrics(&self) -> Arc<metrics::Metrics> {
        self.metrics.clone()
    }

    /// Runs until leadership is lost or the loop ends.
    pub async fn wait(mut self) -> Result<(), SchedulerError> {
        match (&mut self.task).await {
            Ok(result) => result,
            Err(_) => Err(SchedulerError::LoopEnded),
        }
    }
}

impl Drop for RunningScheduler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start(options: Options) -> Result<RunningScheduler, SchedulerError> {
    // Leader election gets a client (and a thread) of its own, built from the same configuration.
    let kube_config = client::config(options.kubeconfig.as_deref()).await?;
    let client = kube::Client::try_from(kube_config.clone()).map_err(client::ClientError::Build)?;
    let identity = client::process_identity();
    let metrics = Arc::new(metrics::Metrics::default());
    let render = metrics.clone();
    let health = serving::serve(
        SocketAddr::new(options.bind_address, options.secure_port),
        Arc::new(move || render.render()),
    )
    .await?;
    let loop_metrics = metrics.clone();
    let task = tokio::spawn(async move {
        let mut leadership = None;
        if options.leader_elect {
            let mut config = LeaderElectionConfig::new(
                &options.leader_elect_resource_namespace,
                &options.leader_elect_resource_name,
                &identity,
            );
            config.lease_duration = options.leader_elect_lease_duration;
            config.renew_deadline = options.leader_elect_renew_deadline;
            config.retry_period = options.leader_elect_retry_period;
            leadership = Some(Candidate::spawn(kube_config, config)?.acquired().await?);
        }
        loop_metrics.set_leader(true);
        let scheduling = scheduler::SchedulingLoop::run(
            client,
            &identity,
            loop_metrics.clone(),
            std::time::Duration::from_secs(options.bind_timeout_seconds),
        );
        let result = match leadership.as_mut() {
            Some(l) => tokio::select! {
                _ = l.lost() => Err(SchedulerError::LeadershipLost),
                _ = scheduling => Err(SchedulerError::LoopEnded),
            },
            None => {
                scheduling.await;
                Err(SchedulerError::LoopEnded)
            }
        };
        loop_metrics.set_leader(false);
        result
    });
    Ok(RunningScheduler {
        health,
        task,
        metrics,
    })
}

/// Starts the scheduler and runs it until leadership is lost (then the process should exit, as
/// upstream's does, and its supervisor restarts it as a candidate).
pub async fn run(options: Options) -> Result<(), SchedulerError> {
    start(options).await?.wait().await
}
