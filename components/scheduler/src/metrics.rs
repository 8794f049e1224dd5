//! Prometheus text for /metrics, named like kube-scheduler's series.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kiln_common::leader_election::master_status_metric;

use crate::queue::QueueLengths;

/// Upper bounds (seconds) of the attempt-duration histogram.
const BUCKETS: &[f64] = &[
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024,
];

/// Upper bounds of the victims-per-preemption histogram (upstream's ExponentialBuckets(1, 2, 7)).
const VICTIM_BUCKETS: &[u64] = &[1, 2, 4, 8, 16, 32, 64];

#[derive(Debug, Default)]
pub struct Metrics {
    scheduled: AtomicU64,
    unschedulable: AtomicU64,
    error: AtomicU64,
    duration_micros: AtomicU64,
    buckets: [AtomicU64; 11],
    active: AtomicU64,
    backoff: AtomicU64,
    unschedulable_pending: AtomicU64,
    leader: AtomicBool,
    preemption_attempts: AtomicU64,
    victims_sum: AtomicU64,
    victims_count: AtomicU64,
    victim_buckets: [AtomicU64; 7],
}

#[derive(Debug, Clone, Copy)]
pub enum AttemptResult {
    Scheduled,
    Unschedulable,
    Error,
}

impl Metrics {
    pub fn attempt(&self, result: AttemptResult, seconds: f64) {
        let counter = match result {
            AttemptResult::Scheduled => &self.scheduled,
            AttemptResult::Unschedulable => &self.unschedulable,
            AttemptResult::Error => &self.error,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.duration_micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn set_pending(&self, q: QueueLengths) {
        self.active.store(q.active as u64, Ordering::Relaxed);
        self.backoff.store(q.backoff as u64, Ordering::Relaxed);
        self.unschedulable_pending
            .store(q.unschedulable as u64, Ordering::Relaxed);
    }

    /// The PostFilter ran for a pod that fit nowhere.
    pub fn preemption_attempt(&self) {
        self.preemption_attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// A preemption evicts this many victims.
    pub fn preemption_victims(&self, n: usize) {
        let n = n as u64;
        self.victims_sum.fetch_add(n, Ordering::Relaxed);
        self.victims_count.fetch_add(1, Ordering::Relaxed);
        for (bound, bucket) in VICTIM_BUCKETS.iter().zip(&self.victim_buckets) {
            if n <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
    }

    pub fn render(&self) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let total = get(&self.scheduled) + get(&self.unschedulable) + get(&self.error);
        let mut out = String::new();
        out.push_str("# HELP scheduler_schedule_attempts_total Number of attempts to schedule pods, by the result.\n");
        out.push_str("# TYPE scheduler_schedule_attempts_total counter\n");
        for (result, v) in [
            ("scheduled", &self.scheduled),
            ("unschedulable", &self.unschedulable),
            ("error", &self.error),
        ] {
            out.push_str(&format!(
                "scheduler_schedule_attempts_total{{profile=\"default-scheduler\",result=\"{result}\"}} {}\n",
                get(v)
            ));
        }
        out.push_str("# HELP scheduler_scheduling_attempt_duration_seconds Scheduling attempt latency in seconds (scheduling algorithm + binding).\n");
        out.push_str("# TYPE scheduler_scheduling_attempt_duration_seconds histogram\n");
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            out.push_str(&format!(
                "scheduler_scheduling_attempt_duration_seconds_bucket{{le=\"{bound}\"}} {}\n",
                get(bucket)
            ));
        }
        out.push_str(&format!(
            "scheduler_scheduling_attempt_duration_seconds_bucket{{le=\"+Inf\"}} {total}\n"
        ));
        out.push_str(&format!(
            "scheduler_scheduling_attempt_duration_seconds_sum {}\n",
            get(&self.duration_micros) as f64 / 1e6
        ));
        out.push_str(&format!(
            "scheduler_scheduling_attempt_duration_seconds_count {total}\n"
        ));
        out.push_str("# HELP scheduler_pending_pods Number of pending pods, by the queue type.\n");
        out.push_str("# TYPE scheduler_pending_pods gauge\n");
        for (queue, v) in [
            ("active", &self.active),
            ("backoff", &self.backoff),
            ("unschedulable", &self.unschedulable_pending),
        ] {
            out.push_str(&format!(
                "scheduler_pending_pods{{queue=\"{queue}\"}} {}\n",
                get(v)
            ));
        }
        out.push_str("# HELP scheduler_preemption_attempts_total Total preemption attempts in the cluster till now\n");
        out.push_str("# TYPE scheduler_preemption_attempts_total counter\n");
        out.push_str(&format!(
            "scheduler_preemption_attempts_total {}\n",
            get(&self.preemption_attempts)
        ));
        out.push_str("# HELP scheduler_preemption_victims Number of selected preemption victims\n");
        out.push_str("# TYPE scheduler_preemption_victims histogram\n");
        for (bound, bucket) in VICTIM_BUCKETS.iter().zip(&self.victim_buckets) {
            out.push_str(&format!(
                "scheduler_preemption_victims_bucket{{le=\"{bound}\"}} {}\n",
                get(bucket)
            ));
        }
        out.push_str(&format!(
            "scheduler_preemption_victims_bucket{{le=\"+Inf\"}} {}\n",
            get(&self.victims_count)
        ));
        out.push_str(&format!(
            "scheduler_preemption_victims_sum {}\n",
            get(&self.victims_sum)
        ));
        out.push_str(&format!(
            "scheduler_preemption_victims_count {}\n",
            get(&self.victims_count)
        ));
        out.push_str(&master_status_metric(
            "kube-scheduler",
            self.leader.load(Ordering::Relaxed),
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histogram() {
        let m = Metrics::default();
        m.attempt(AttemptResult::Scheduled, 0.003);
        m.attempt(AttemptResult::Unschedulable, 2.0);
        let text = m.render();
        assert!(text.contains("scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"scheduled\"} 1"));
        assert!(
            text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.004\"} 1")
        );
        assert!(
            text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{le=\"+Inf\"} 2")
        );
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_count 2"));
    }

    #[test]
    fn renders_preemption_series() {
        let m = Metrics::default();
        m.preemption_attempt();
        m.preemption_attempt();
        m.preemption_victims(3);
        let text = m.render();
        assert!(text.contains("scheduler_preemption_attempts_total 2\n"));
        assert!(text.contains("scheduler_preemption_victims_bucket{le=\"2\"} 0\n"));
        assert!(text.contains("scheduler_preemption_victims_bucket{le=\"4\"} 1\n"));
        assert!(text.contains("scheduler_preemption_victims_sum 3\n"));
    }
}
