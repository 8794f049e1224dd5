//! Certificate lifetimes: CA 10 years and leaves 1 year by default, configurable (cluster.yaml pki validity).

use time::{Duration, OffsetDateTime};

/// How long certificates live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub ca: Duration,
    pub leaf: Duration,
}

impl Default for Validity {
    fn default() -> Self {
        Validity {
            ca: Duration::days(3650),
            leaf: Duration::days(365),
        }
    }
}

/// Backdating covers clock skew between the host that signs and the hosts that verify.
pub const BACKDATE: Duration = Duration::minutes(5);

impl Validity {
    /// From days, as written in cluster.yaml; `None` keeps the default.
    pub fn from_days(ca_days: Option<u32>, leaf_days: Option<u32>) -> Self {
        let d = Validity::default();
        Validity {
            ca: ca_days.map(|n| Duration::days(n.into())).unwrap_or(d.ca),
            leaf: leaf_days
                .map(|n| Duration::days(n.into()))
                .unwrap_or(d.leaf),
        }
    }

    /// `(not_before, not_after)` for a certificate issued at `now`.
    pub fn window(&self, now: OffsetDateTime, is_ca: bool) -> (OffsetDateTime, OffsetDateTime) {
        let life = if is_ca { self.ca } else { self.leaf };
        (now - BACKDATE, now + life)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ten_years_and_one_year() {
        let v = Validity::default();
        let now = OffsetDateTime::now_utc();
        let (nb, na) = v.window(now, true);
        assert!(nb < now);
        assert_eq!(na - now, Duration::days(3650));
        assert_eq!(v.window(now, false).1 - now, Duration::days(365));
        assert_eq!(Validity::from_days(None, Some(30)).leaf, Duration::days(30));
    }
}
