//! kiln-controller-manager: the controllers that make actual state follow desired state, on kube-rs
//! (watchers, reflectors, Controller), behind leader election on the `kube-controller-manager` Lease.
//!
//! Controllers are a list (`CONTROLLERS`) the manager walks, enabled by `--controllers` like
//! upstream's. Decisions are pure functions over objects (unit-tested); each controller module
//! holds its decisions and its loop.

pub mod cidr;
pub mod config;
pub mod context;
pub mod cronjob;
pub mod cronjob_plan;
pub mod csr;
pub mod csr_approving;
pub mod csr_signing;
pub mod daemonset;
pub mod daemonset_history;
pub mod daemonset_plan;
pub mod deployment;
pub mod deployment_plan;
pub mod deployment_status;
pub mod disruption;
pub mod disruption_owners;
pub mod disruption_plan;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslice_mirroring;
pub mod ephemeral_volume;
pub mod garbage_collector;
pub mod hpa;
pub mod hpa_behavior;
pub mod hpa_calculator;
pub mod hpa_plan;
pub mod job;
pub mod job_indexes;
pub mod job_plan;
pub mod namespace;
pub mod node_lifecycle;
pub mod nodeipam;
pub mod podgc;
pub mod pods;
pub mod pv_controller;
pub mod pv_match;
pub mod pv_plan;
pub mod pv_pods;
pub mod pv_protection;
pub mod pv_queue;
pub mod pvc_protection;
pub mod replicaset;
pub mod replicationcontroller;
pub mod resourcequota;
pub mod root_ca;
pub mod selector;
pub mod serviceaccount;
pub mod statefulset;
pub mod statefulset_plan;
pub mod statefulset_retention;
pub mod token_cleaner;
pub mod trafficdist;
pub mod ttl_after_finished;

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use kiln_common::events::EventRecorder;
use kiln_common::leader_election::own_thread::Candidate;
use kiln_common::leader_election::{master_status_metric, LeaderElectionConfig};
use kiln_common::{client, serving};

pub use config::Options;
use context::Context;

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Client(#[from] client::ClientError),
    #[error(transparent)]
    LeaderElection(#[from] kiln_common::leader_election::LeaderElectionError),
    #[error(transparent)]
    Serving(#[from] serving::ServingError),
    #[error("leader election lost")]
    LeadershipLost,
    #[error("every controller stopped")]
    ControllersEnded,
}

/// One controller: its upstream name (for --controllers), whether `*` includes it, and its loop.
pub struct ControllerSpec {
    pub name: &'static str,
    pub enabled_by_default: bool,
    pub run: fn(Context) -> BoxFuture<'static, ()>,
}

pub static CONTROLLERS: &[ControllerSpec] = &[
    ControllerSpec {
        name: "persistentvolume-binder",
        enabled_by_default: true,
        run: |ctx| pv_controller::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "pvc-protection",
        enabled_by_default: true,
        run: |ctx| pvc_protection::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "pv-protection",
        enabled_by_default: true,
        run: |ctx| pv_protection::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "ephemeral-volume",
        enabled_by_default: true,
        run: |ctx| ephemeral_volume::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "replicaset",
        enabled_by_default: true,
        run: |ctx| replicaset::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "replicationcontroller",
        enabled_by_default: true,
        run: |ctx| replicationcontroller::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "daemonset",
        enabled_by_default: true,
        run: |ctx| daemonset::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "deployment",
        enabled_by_default: true,
        run: |ctx| deployment::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "job",
        enabled_by_default: true,
        run: |ctx| job::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "podgc",
        enabled_by_default: true,
        run: |ctx| podgc::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "ttl-after-finished",
        enabled_by_default: true,
        run: |ctx| ttl_after_finished::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "disruption",
        enabled_by_default: true,
        run: |ctx| disruption::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "endpoint",
        enabled_by_default: true,
        run: |ctx| endpoints::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "endpointslice",
        enabled_by_default: true,
        run: |ctx| endpointslice::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "endpointslicemirroring",
        enabled_by_default: true,
        run: |ctx| endpointslice_mirroring::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "resourcequota",
        enabled_by_default: true,
        run: |ctx| resourcequota::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "garbagecollector",
        enabled_by_default: true,
        run: |ctx| garbage_collector::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "nodeipam",
        enabled_by_default: true,
        run: |ctx| nodeipam::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "nodelifecycle",
        enabled_by_default: true,
        run: |ctx| node_lifecycle::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "namespace",
        enabled_by_default: true,
        run: |ctx| namespace::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "serviceaccount",
        enabled_by_default: true,
        run: |ctx| serviceaccount::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "root-ca-cert-publisher",
        enabled_by_default: true,
        run: |ctx| root_ca::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "csrapproving",
        enabled_by_default: true,
        run: |ctx| csr_approving::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "csrsigning",
        enabled_by_default: true,
        run: |ctx| csr_signing::run(ctx).boxed(),
    },
    // Off by default upstream; kiln joins nodes with bootstrap tokens, so expired ones are cleaned.
    ControllerSpec {
        name: "tokencleaner",
        enabled_by_default: true,
        run: |ctx| token_cleaner::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "cronjob",
        enabled_by_default: true,
        run: |ctx| cronjob::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "statefulset",
        enabled_by_default: true,
        run: |ctx| statefulset::run(ctx).boxed(),
    },
    ControllerSpec {
        name: "horizontalpodautoscaling",
        enabled_by_default: true,
        run: |ctx| hpa::run(ctx).boxed(),
    },
];

struct Status {
    leader: std::sync::atomic::AtomicBool,
}

pub struct RunningManager {
    health: serving::HealthServer,
    task: tokio::task::JoinHandle<Result<(), ManagerError>>,
    status: Arc<Status>,
}

impl RunningManager {
    pub fn health_addr(&self) -> SocketAddr {
        self.health.local_addr()
    }

    pub fn is_leader(&self) -> bool {
        self.status
            .leader
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub async fn wait(mut self) -> Result<(), ManagerError> {
        match (&mut self.task).await {
            Ok(r) => r,
            Err(_) => Err(ManagerError::ControllersEnded),
        }
    }
}

impl Drop for RunningManager {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start(options: Options) -> Result<RunningManager, ManagerError> {
    // Leader election gets a client (and a thread) of its own, built from the same configuration.
    let kube_config = client::config(options.kubeconfig.as_deref()).await?;
    let client = kube::Client::try_from(kube_config.clone()).map_err(client::ClientError::Build)?;
    let identity = client::process_identity();
    let status = Arc::new(Status {
        leader: Default::default(),
    });
    let render_status = status.clone();
    let health = serving::serve(
        SocketAddr::new(options.bind_address, options.secure_port),
        Arc::new(move || {
            master_status_metric(
                "kube-controller-manager",
                render_status
                    .leader
                    .load(std::sync::atomic::Ordering::Relaxed),
            )
        }),
    )
    .await?;
    let task_status = status.clone();
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
        task_status
            .leader
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let ctx = Context {
            recorder: Arc::new(EventRecorder::new(
                client.clone(),
                "kube-controller-manager",
                &identity,
            )),
            client,
            options: Arc::new(options),
        };
        let mut controllers = tokio::task::JoinSet::new();
        for spec in CONTROLLERS {
            if config::controller_enabled(
                &ctx.options.controllers,
                spec.name,
                spec.enabled_by_default,
            ) {
                tracing::info!(controller = spec.name, "starting controller");
                controllers.spawn((spec.run)(ctx.clone()));
            }
        }
        let all_done = async { while controllers.join_next().await.is_some() {} };
        let result = match leadership.as_mut() {
            Some(l) => tokio::select! {
                _ = l.lost() => Err(ManagerError::LeadershipLost),
                _ = all_done => Err(ManagerError::ControllersEnded),
            },
            None => {
                all_done.await;
                Err(ManagerError::ControllersEnded)
            }
        };
        task_status
            .leader
            .store(false, std::sync::atomic::Ordering::Relaxed);
        result
    });
    Ok(RunningManager {
        health,
        task,
        status,
    })
}

/// Runs until leadership is lost (the process should then exit, as upstream's does).
pub async fn run(options: Options) -> Result<(), ManagerError> {
    start(options).await?.wait().await
}
