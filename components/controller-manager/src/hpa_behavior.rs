//! The horizontal-pod-autoscaler's `behavior`, pure (upstream's `horizontal.go`): stabilization
//! windows over past recommendations, Pods/Percent scaling policies over past scale events, and
//! the legacy limits of an HPA without `behavior`. Times are milliseconds since the epoch.

use k8s_openapi::api::autoscaling::v2::HPAScalingRules;

/// `--horizontal-pod-autoscaler-downscale-stabilization`.
pub const DOWNSCALE_STABILIZATION_S: i32 = 300;
/// The legacy scale-up limit (no `behavior`): at most double, at least 4.
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    Max,
    Min,
    Disabled,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub pods: bool,
    pub value: i32,
    pub period_s: i32,
}

/// One direction's rules with upstream's defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub window_s: i32,
    pub select: Select,
    pub policies: Vec<Policy>,
}

impl Rules {
    /// GenerateHPAScaleUpRules / GenerateHPAScaleDownRules, then the controller's default
    /// down-scale window where none is set.
    pub fn from_api(r: Option<&HPAScalingRules>, up: bool) -> Rules {
        let default_policies = if up {
            vec![
                Policy {
                    pods: true,
                    value: 4,
                    period_s: 15,
                },
                Policy {
                    pods: false,
                    value: 100,
                    period_s: 15,
                },
            ]
        } else {
            vec![Policy {
                pods: false,
                value: 100,
                period_s: 15,
            }]
        };
        let policies = r
            .and_then(|r| r.policies.as_ref())
            .filter(|p| !p.is_empty())
            .map(|ps| {
                ps.iter()
                    .map(|p| Policy {
                        pods: p.type_ == "Pods",
                        value: p.value,
                        period_s: p.period_seconds,
                    })
                    .collect()
            })
            .unwrap_or(default_policies);
        let select = match r.and_then(|r| r.select_policy.as_deref()) {
            Some("Min") => Select::Min,
            Some("Disabled") => Select::Disabled,
            _ => Select::Max,
        };
        let window_s = r
            .and_then(|r| r.stabilization_window_seconds)
            .unwrap_or(if up { 0 } else { DOWNSCALE_STABILIZATION_S });
        Rules {
            window_s,
            select,
            policies,
        }
    }

    fn longest_period_ms(&self) -> i64 {
        self.policies
            .iter()
            .map(|p| i64::from(p.period_s) * 1000)
            .max()
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScaleEvent {
    change: i32,
    at: i64,
    outdated: bool,
}

/// What the controller remembers of one HPA between syncs (upstream keeps it in memory too).
#[derive(Debug, Default, Clone)]
pub struct History {
    recommendations: Vec<(i32, i64)>,
    scale_up: Vec<ScaleEvent>,
    scale_down: Vec<ScaleEvent>,
}

fn change_in_period(events: &[ScaleEvent], period_s: i32, now: i64) -> i32 {
    let cutoff = now - i64::from(period_s) * 1000;
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

impl History {
    pub fn record_initial(&mut self, current: i32, now: i64) {
        if self.recommendations.is_empty() {
            self.recommendations.push((current, now));
        }
    }

    fn record(&mut self, replace: Option<usize>, desired: i32, now: i64) {
        match replace {
            Some(i) => self.recommendations[i] = (desired, now),
            None => self.recommendations.push((desired, now)),
        }
    }

    /// Without `behavior`: the highest recommendation of the down-scale window.
    pub fn stabilize_legacy(&mut self, desired: i32, now: i64) -> i32 {
        let cutoff = now - i64::from(DOWNSCALE_STABILIZATION_S) * 1000;
        let mut max = desired;
        let mut old = None;
        for (i, (rec, at)) in self.recommendations.iter().enumerate() {
            if *at < cutoff {
                old = Some(i);
            } else if *rec > max {
                max = *rec;
            }
        }
        self.record(old, desired, now);
        max
    }

    /// With `behavior`: the recommendation kept between the lowest of the up window and the
    /// highest of the down window.
    pub fn stabilize(
        &mut self,
        current: i32,
        desired: i32,
        up: &Rules,
        down: &Rules,
        now: i64,
    ) -> (i32, &'static str, &'static str) {
        let up_cutoff = now - i64::from(up.window_s) * 1000;
        let down_cutoff = now - i64::from(down.window_s) * 1000;
        let (mut up_rec, mut down_rec) = (desired, desired);
        let mut old = None;
        for (i, (rec, at)) in self.recommendations.iter().enumerate() {
            if *at > up_cutoff {
                up_rec = up_rec.min(*rec);
            }
            if *at > down_cutoff {
                down_rec = down_rec.max(*rec);
            }
            if *at < up_cutoff && *at < down_cutoff {
                old = Some(i);
            }
        }
        let recommendation = current.max(up_rec).min(down_rec);
        self.record(old, desired, now);
        if desired >= current {
            (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                recommendation,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        }
    }

    fn scale_up_limit(&self, current: i32, rules: &Rules, now: i64) -> i32 {
        let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select {
            Select::Disabled => return current,
            Select::Min => (i32::MAX, i32::min),
            Select::Max => (i32::MIN, i32::max),
        };
        for p in &rules.policies {
            let start = current - change_in_period(&self.scale_up, p.period_s, now)
                + change_in_period(&self.scale_down, p.period_s, now);
            let proposed = if p.pods {
                start + p.value
            } else {
                (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32
            };
            result = pick(result, proposed);
        }
        result
    }

    fn scale_down_limit(&self, current: i32, rules: &Rules, now: i64) -> i32 {
        let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select {
            Select::Disabled => return current,
            Select::Min => (i32::MIN, i32::max),
            Select::Max => (i32::MAX, i32::min),
        };
        for p in &rules.policies {
            let start = current - change_in_period(&self.scale_up, p.period_s, now)
                + change_in_period(&self.scale_down, p.period_s, now);
            let proposed = if p.pods {
                start - p.value
            } else {
                (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32
            };
            result = pick(result, proposed);
        }
        result
    }

    /// The scaling policies' limit on the change (convertDesiredReplicasWithBehaviorRate).
    #[allow(clippy::too_many_arguments)]
    pub fn limit_rate(
        &self,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        up: &Rules,
        down: &Rules,
        now: i64,
    ) -> (i32, &'static str, &'static str) {
        if desired > current {
            let limit = self.scale_up_limit(current, up, now).max(current);
            let (allowed, reason, message) = if max > limit {
                (
                    limit,
                    "ScaleUpLimit",
                    "the desired replica count is increasing faster than the maximum scale rate",
                )
            } else {
                (
                    max,
                    "TooManyReplicas",
                    "the desired replica count is more than the maximum replica count",
                )
            };
            if desired > allowed {
                return (allowed, reason, message);
            }
        } else if desired < current {
            let limit = self.scale_down_limit(current, down, now).min(current);
            let (allowed, reason, message) = if min < limit {
                (
                    limit,
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                )
            } else {
                (
                    min,
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count",
                )
            };
            if desired < allowed {
                return (allowed, reason, message);
            }
        }
        (
            desired,
            "DesiredWithinRange",
            "the desired count is within the acceptable range",
        )
    }

    /// Remembers a rescale for the policies' periods (only with `behavior`), reusing an entry
    /// older than the longest period.
    pub fn store_scale_event(
        &mut self,
        rules: Option<(&Rules, &Rules)>,
        prev: i32,
        new: i32,
        now: i64,
    ) {
        let Some((up, down)) = rules else { return };
        let (events, longest, change) = if new > prev {
            (&mut self.scale_up, up.longest_period_ms(), new - prev)
        } else {
            (&mut self.scale_down, down.longest_period_ms(), prev - new)
        };
        for e in events.iter_mut() {
            if e.at <= now - longest {
                e.outdated = true;
            }
        }
        let event = ScaleEvent {
            change,
            at: now,
            outdated: false,
        };
        match events.iter_mut().find(|e| e.outdated) {
            Some(slot) => *slot = event,
            None => events.push(event),
        }
    }
}

/// Without `behavior`: min/max and the legacy scale-up limit (convertDesiredReplicasWithRules).
pub fn limit_legacy(
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
) -> (i32, &'static str, &'static str) {
    let up_limit = (SCALE_UP_LIMIT_FACTOR * f64::from(current)).max(SCALE_UP_LIMIT_MINIMUM) as i32;
    let (max_allowed, reason, message) = if max > up_limit {
        (
            up_limit,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate",
        )
    } else {
        (
            max,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        )
    };
    if desired < min {
        return (
            min,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count",
        );
    }
    if desired > max_allowed {
        return (max_allowed, reason, message);
    }
    (
        desired,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}
