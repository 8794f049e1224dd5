//! A probe's initialDelaySeconds counts from the container's start as the runtime reports it, as
//! upstream's prober does (no probe while `time.Since(startedAt)` is under the delay). The probe states
//! are made when StartContainer returns, with the `now` of the sync that started the container — taken
//! before its image was pulled and it was created, which can be seconds earlier — so each sync that sees
//! the container running holds its probes until the runtime's start time plus their delay. A child of
//! [`super`] to use the worker's private state.

use super::*;

impl PodWorker {
    /// Holds container `i`'s probes until `started_at` (the runtime's start time) plus each one's
    /// initial delay, on the clock of `now`.
    pub(super) fn hold_probes_for_initial_delay(
        &mut self,
        i: usize,
        started_at: SystemTime,
        now: Instant,
    ) {
        let since = SystemTime::now()
            .duration_since(started_at)
            .unwrap_or_default();
        // A start longer ago than this clock reaches is long past every delay.
        let Some(started) = now.checked_sub(since) else {
            return;
        };
        let c = &mut self.ctrs[i];
        for state in [&mut c.readiness, &mut c.liveness, &mut c.startup]
            .into_iter()
            .flatten()
        {
            let at = started + state.timing.initial_delay;
            state.hold_until(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cri::fake::FakeCri;

    fn probed_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-delay"},
            "spec": {"containers": [{"name": "main", "image": "reg/webserver:1",
                "readinessProbe": {"exec": {"command": ["ready"]}, "initialDelaySeconds": 30}}]}
        }))
        .unwrap()
    }

    fn cfg() -> Arc<WorkerConfig> {
        Arc::new(WorkerConfig {
            log_root: "/var/log/pods".into(),
            pause_image: "reg/pause:1".into(),
            backoff: Backoff {
                base: Duration::from_secs(10),
                max: Duration::from_secs(300),
            },
            node_name: "host1".into(),
            node_ip: "10.250.0.11".into(),
            pods_root: super::super::tests::unique_pods_root(),
            secrets_in_memory: false,
            allocatable: crate::env_resources::NodeAllocatable {
                cpu: "2".into(),
                memory: "4Gi".into(),
            },
            dns: super::super::tests::test_dns(),
            node_hosts_file: "/etc/hosts".into(),
            cgroups: None,
            pod_pids_limit: None,
        })
    }

    /// The runtime says the container started `ago` before the wall clock's now.
    fn started_ago(fake: &FakeCri, ago: Duration) {
        let at = SystemTime::now() - ago;
        let nanos = at.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
        for c in fake.st().containers.values_mut() {
            c.started_at = nanos;
        }
    }

    fn probes(fake: &FakeCri) -> usize {
        fake.calls()
            .iter()
            .filter(|c| c.starts_with("ExecSync"))
            .count()
    }

    #[tokio::test]
    async fn the_initial_delay_counts_from_the_runtimes_start_not_the_sync_that_started_it() {
        let fake = Arc::new(FakeCri::default());
        let mut w = PodWorker::new(&probed_pod(), cfg(), fake.clone()).unwrap();
        // The sync that pulls, creates and starts began 40 s "ago" on the worker's clock...
        let t0 = Instant::now();
        w.sync(t0).await;
        // ...but the runtime started the container only 20 s ago: 10 s of the delay are left.
        started_ago(&fake, Duration::from_secs(20));
        w.sync(t0 + Duration::from_secs(40)).await;
        assert_eq!(probes(&fake), 0, "probed inside the initial delay");
        // 11 s later on both clocks.
        started_ago(&fake, Duration::from_secs(31));
        w.sync(t0 + Duration::from_secs(51)).await;
        assert_eq!(probes(&fake), 1, "not probed once the delay has passed");
    }
}
