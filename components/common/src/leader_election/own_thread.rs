//! Leader election on a thread and an API client of its own.
//!
//! Why: a renewal is two small requests every retry period, but it must finish within the renew
//! deadline or the process gives up leadership and exits. Sharing the controllers' runtime and
//! client, it waits behind them: under load (a thousand Jobs' pods starting on the same machine)
//! the controllers' workers stay busy and their requests queue, renewals overran the 10 s deadline
//! and kiln-controller-manager lost its lease again and again, restarting every controller each
//! time. Upstream gives leader election a client of its own for the same reason (its own rate
//! limiter, the `leader-election` user agent); a thread of its own also keeps the controllers'
//! CPU work from delaying the renewal's timers and I/O.

use tokio::sync::{oneshot, watch};

use super::{LeaderElectionConfig, LeaderElectionError, LeaderElector, Leadership};

/// A candidate whose election runs on its own thread; [`Candidate::acquired`] waits for the lease.
/// Dropping it (or the [`Leadership`] it turns into) ends the thread.
pub struct Candidate {
    acquired: oneshot::Receiver<()>,
    lost: watch::Receiver<bool>,
    stop: oneshot::Sender<()>,
}

impl Candidate {
    /// Starts the election thread with a client built from `kube_config` for it alone.
    pub fn spawn(
        kube_config: kube::Config,
        config: LeaderElectionConfig,
    ) -> Result<Candidate, LeaderElectionError> {
        let thread_err = |e: &dyn std::fmt::Display| LeaderElectionError::Thread(e.to_string());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| thread_err(&e))?;
        // The client's request buffer spawns its worker on the runtime it is built in: this one.
        let client = {
            let _entered = runtime.enter();
            kube::Client::try_from(kube_config).map_err(|e| thread_err(&e))?
        };
        let (acquired_tx, acquired) = oneshot::channel();
        let (lost_tx, lost) = watch::channel(false);
        let (stop, stopped) = oneshot::channel::<()>();
        let lease = format!("{}/{}", config.namespace, config.name);
        std::thread::Builder::new()
            .name("leader-election".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut elector = LeaderElector::new(client, config);
                    let elect = async move {
                        elector.wait_until_leader().await;
                        if acquired_tx.send(()).is_ok() {
                            elector.renew_until_lost(lost_tx).await;
                        }
                    };
                    // Dropping the stop sender (the candidate or leadership went away) ends the
                    // election; lost_tx is dropped with it, which readers take as lost.
                    tokio::select! {
                        _ = elect => {}
                        _ = stopped => tracing::debug!(%lease, "leader election stopped"),
                    }
                })
            })
            .map_err(|e| thread_err(&e))?;
        Ok(Candidate {
            acquired,
            lost,
            stop,
        })
    }

    /// Resolves once this process holds the lease; renewals go on on the election's thread.
    pub async fn acquired(self) -> Result<Leadership, LeaderElectionError> {
        self.acquired
            .await
            .map_err(|_| LeaderElectionError::Thread("ended before acquiring the lease".into()))?;
        Ok(Leadership {
            lost: self.lost,
            _stop: self.stop,
        })
    }
}
