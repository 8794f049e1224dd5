//! Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics: the holder renews
//! `renewTime` every retry period; a candidate takes over only after it has watched the record stay
//! unchanged for a whole lease duration (measured on its own clock, so clock skew between hosts does
//! not matter); every write carries the read resourceVersion, so a conflict means another candidate
//! won the race. Used by kiln-scheduler and kiln-controller-manager, which run it on a thread and
//! client of their own ([`own_thread`]), so a busy process cannot starve its own renewals.

pub mod own_thread;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("leader election thread: {0}")]
    Thread(String),
}

/// Timings and identity, named like kube-scheduler's `--leader-elect-*` flags.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// Upstream defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate remembers of the last record it saw, and when it saw it change.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    transitions: Option<i32>,
}

pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    observed: Option<(Observed, Instant)>,
    /// The lease as this process last wrote it (and when): the holder renews it with one PUT.
    written: Option<(Lease, Instant)>,
}

/// Held leadership: `lost()` resolves when renewals stopped succeeding within the renew deadline.
/// Dropping it ends the election's thread, and so the renewals.
pub struct Leadership {
    lost: watch::Receiver<bool>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Leadership {
    /// Resolves once leadership is lost (never, while renewals succeed).
    pub async fn lost(&mut self) {
        while !*self.lost.borrow() {
            if self.lost.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The decision for one observed record: may this candidate write itself as the holder now?
fn may_take(
    holder: Option<&str>,
    me: &str,
    observed_at: Instant,
    lease_duration: Duration,
    now: Instant,
) -> bool {
    match holder {
        None | Some("") => true,
        Some(h) if h == me => true,
        Some(_) => now.duration_since(observed_at) >= lease_duration,
    }
}

impl LeaderElector {
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            written: None,
        }
    }

    fn api_error(&self, source: kube::Error) -> LeaderElectionError {
        LeaderElectionError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// One attempt: Ok(true) = this process holds the lease now; Ok(false) = someone else does or
    /// won the write race.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderElectionError> {
        if self.renew_written().await {
            return Ok(true);
        }
        let now = Timestamp::now();
        let seconds = self.config.lease_duration.as_secs().max(1) as i32;
        let me = self.config.identity.clone();
        let existing = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.api_error(e))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    self.written = Some((written, Instant::now()));
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => Ok(false),
                Err(e) => Err(self.api_error(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let record = Observed {
            holder: spec.holder_identity.clone(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions,
        };
        let observed_at = match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((record, at));
                at
            }
        };
        let held_duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(self.config.lease_duration);
        let holder = spec.holder_identity.as_deref();
        if !may_take(holder, &me, observed_at, held_duration, Instant::now()) {
            return Ok(false);
        }
        let renewing = holder == Some(me.as_str());
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(me),
            lease_duration_seconds: Some(seconds),
            acquire_time: if renewing {
                spec.acquire_time.clone()
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if renewing {
                transitions
            } else {
                transitions + 1
            }),
            ..spec
        });
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.written = Some((written, Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
            Err(e) => Err(self.api_error(e)),
        }
    }

    /// client-go's fast path: the holder, while its lease is still valid, writes the record it
    /// wrote last with a new renewTime (its resourceVersion guards against another writer), one
    /// request instead of a GET and a PUT. Any failure falls back to the full read-decide-write,
    /// which also learns who holds the lease now.
    async fn renew_written(&mut self) -> bool {
        let Some((mut lease, at)) = self.written.take() else {
            return false;
        };
        if at.elapsed() >= self.config.lease_duration {
            return false;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.written = Some((written, Instant::now()));
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "renewing the lease optimistically failed; reading it");
                false
            }
        }
    }

    /// Returns once this process is the leader, retrying every retry period (API errors included:
    /// a candidate keeps trying while the apiserver is away).
    async fn wait_until_leader(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(jittered(self.config.retry_period)).await;
        }
        tracing::info!(
            lease = %format!("{}/{}", self.config.namespace, self.config.name),
            identity = %self.config.identity,
            "acquired leadership"
        );
    }

    async fn renew_until_lost(mut self, lost: watch::Sender<bool>) {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let attempt =
                tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()).await;
            match attempt {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::warn!(identity = %self.config.identity, "lease taken by another candidate");
                    break;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "renewing the lease failed"),
                Err(_) => tracing::warn!("renewing the lease timed out"),
            }
            if last_renewal.elapsed() >= self.config.renew_deadline {
                tracing::warn!("lease not renewed within the renew deadline");
                break;
            }
        }
        let _ = lost.send(true);
    }
}

/// client-go's JitterFactor 1.2: up to 20 % extra so candidates do not retry in lock step.
fn jittered(base: Duration) -> Duration {
    base.mul_f64(1.0 + rand::random::<f64>() * 0.2)
}

/// The `leader_election_master_status` gauge, as client-go's leader election exports it, for a
/// component's /metrics page (`name` is the upstream component name, e.g. `kube-scheduler`).
pub fn master_status_metric(name: &str, leader: bool) -> String {
    format!(
        "# HELP leader_election_master_status Whether this process is the leader (1) or not (0).\n\
         # TYPE leader_election_master_status gauge\n\
         leader_election_master_status{{name=\"{name}\"}} {}\n",
        u8::from(leader)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_status_is_a_prometheus_gauge() {
        assert_eq!(
            master_status_metric("kube-scheduler", true),
            "# HELP leader_election_master_status Whether this process is the leader (1) or not (0).\n\
             # TYPE leader_election_master_status gauge\n\
             leader_election_master_status{name=\"kube-scheduler\"} 1\n"
        );
        assert!(master_status_metric("kube-controller-manager", false)
            .ends_with("{name=\"kube-controller-manager\"} 0\n"));
    }

    #[test]
    fn free_or_own_lease_may_be_taken() {
        let now = Instant::now();
        let d = Duration::from_secs(15);
        assert!(may_take(None, "a", now, d, now));
        assert!(may_take(Some(""), "a", now, d, now));
        assert!(may_take(Some("a"), "a", now, d, now));
    }

    #[test]
    fn foreign_lease_only_after_it_stayed_unchanged_for_a_lease_duration() {
        let seen = Instant::now();
        let d = Duration::from_secs(15);
        assert!(!may_take(
            Some("b"),
            "a",
            seen,
            d,
            seen + Duration::from_secs(14)
        ));
        assert!(may_take(
            Some("b"),
            "a",
            seen,
            d,
            seen + Duration::from_secs(15)
        ));
    }
}
