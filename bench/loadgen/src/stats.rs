//! Latency percentiles and throughput of one run.

use std::time::Duration;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub ops: usize,
    pub errors: usize,
    pub seconds: f64,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Nearest-rank percentile of sorted latencies.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summarize(mut latencies: Vec<Duration>, errors: usize, wall: Duration) -> Summary {
    latencies.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let secs = wall.as_secs_f64();
    Summary {
        ops: latencies.len(),
        errors,
        seconds: secs,
        per_second: if secs > 0.0 {
            latencies.len() as f64 / secs
        } else {
            0.0
        },
        p50_ms: ms(percentile(&latencies, 50.0)),
        p99_ms: ms(percentile(&latencies, 99.0)),
        max_ms: ms(latencies.last().copied().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let l: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&l, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&l, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&l, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 99.0), Duration::ZERO);
        let s = summarize(l, 0, Duration::from_secs(2));
        assert_eq!(s.ops, 100);
        assert!((s.per_second - 50.0).abs() < 1e-9);
    }
}
