//! A token bucket for the collector's API requests, as client-go's client-side rate limiter: the
//! twenty workers may delete a hundred pods in seconds, but not in one burst that starves the
//! API server and its store of the time they need for everyone else (lease renewals above all).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Requests per second the collector makes at most, and how many at once after a quiet spell.
/// Upstream's controller clients default to 20 QPS, burst 30, with strategic merge patches that
/// need no read first; kiln's collector reads an object before it patches it, so twice that.
pub const QPS: f64 = 40.0;
pub const BURST: f64 = 60.0;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Takes a token at `now` and returns how long the caller must wait for it (a reservation, as Go's
/// `rate.Limiter.Wait`: the bucket goes into debt, so waiters are served in turn).
fn reserve(bucket: &mut Bucket, now: Instant, qps: f64, burst: f64) -> Duration {
    let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * qps;
    bucket.tokens = (bucket.tokens + refill).min(burst) - 1.0;
    bucket.at = bucket.at.max(now);
    if bucket.tokens >= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(-bucket.tokens / qps)
    }
}

pub struct RateLimiter {
    bucket: Mutex<Bucket>,
    qps: f64,
    burst: f64,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: f64) -> Self {
        RateLimiter {
            bucket: Mutex::new(Bucket {
                tokens: burst,
                at: Instant::now(),
            }),
            qps,
            burst,
        }
    }

    /// Resolves when the caller may send its request.
    pub async fn acquire(&self) {
        let wait = reserve(
            &mut self.bucket.lock().expect("gc rate limiter"),
            Instant::now(),
            self.qps,
            self.burst,
        );
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_free_then_requests_are_spaced_by_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket {
            tokens: 3.0,
            at: t0,
        };
        for _ in 0..3 {
            assert_eq!(reserve(&mut b, t0, 10.0, 3.0), Duration::ZERO);
        }
        // The next ones queue up 100 ms apart.
        assert_eq!(reserve(&mut b, t0, 10.0, 3.0), Duration::from_millis(100));
        assert_eq!(reserve(&mut b, t0, 10.0, 3.0), Duration::from_millis(200));
        // A quiet second refills the bucket, but never above the burst.
        let later = t0 + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(reserve(&mut b, later, 10.0, 3.0), Duration::ZERO);
        }
        assert!(reserve(&mut b, later, 10.0, 3.0) > Duration::ZERO);
    }
}
