//! When a pod condition last changed, as upstream's status manager records it (`updateLastTransitionTime`):
//! a condition the kubelet computes keeps the time of the same condition in the status it reported
//! before if its status is unchanged, and gets the time of this update otherwise. So Ready's time is
//! when the pod became ready (after a readiness probe's initial delay, say), not when it started, and
//! PodScheduled keeps the scheduler's time.

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Sets the lastTransitionTime of `status`'s conditions of `types` from `before` (the conditions last
/// reported for the pod: the kubelet's own, else the API's), `now` where they changed or are new.
pub fn settle(before: Option<&[PodCondition]>, status: &mut PodStatus, types: &[&str], now: &Time) {
    for c in status.conditions.iter_mut().flatten() {
        if !types.contains(&c.type_.as_str()) {
            continue;
        }
        let kept = before
            .into_iter()
            .flatten()
            .find(|b| b.type_ == c.type_ && b.status == c.status)
            .and_then(|b| b.last_transition_time.clone());
        c.last_transition_time = Some(kept.unwrap_or_else(|| now.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn cond(type_: &str, status: &str, time: Option<&str>) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: time.map(at),
            ..Default::default()
        }
    }

    const TYPES: &[&str] = &["PodScheduled", "Ready", "ContainersReady"];

    #[test]
    fn unchanged_conditions_keep_their_time_and_changed_ones_get_now() {
        let before = vec![
            cond("PodScheduled", "True", Some("2024-01-01T00:00:00Z")),
            cond("Ready", "False", Some("2024-01-01T00:00:01Z")),
        ];
        let mut status = PodStatus {
            conditions: Some(vec![
                cond("PodScheduled", "True", Some("2024-01-01T00:00:05Z")),
                cond("Ready", "True", Some("2024-01-01T00:00:05Z")),
                cond("ContainersReady", "True", None),
                cond("DisruptionTarget", "True", Some("2023-01-01T00:00:00Z")),
            ]),
            ..Default::default()
        };
        let now = at("2024-01-01T00:00:20Z");
        settle(Some(&before), &mut status, TYPES, &now);
        let times: Vec<_> = status
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| c.last_transition_time.unwrap().0.to_string())
            .collect();
        assert_eq!(
            times,
            vec![
                "2024-01-01T00:00:00Z", // PodScheduled: the scheduler's
                "2024-01-01T00:00:20Z", // Ready turned True now
                "2024-01-01T00:00:20Z", // new
                "2023-01-01T00:00:00Z", // not the kubelet's: untouched
            ]
        );
    }

    #[test]
    fn with_nothing_reported_before_every_condition_starts_now() {
        let mut status = PodStatus {
            conditions: Some(vec![cond("Ready", "False", Some("2020-01-01T00:00:00Z"))]),
            ..Default::default()
        };
        let now = at("2024-01-01T00:00:20Z");
        settle(None, &mut status, TYPES, &now);
        assert_eq!(
            status.conditions.unwrap()[0].last_transition_time,
            Some(now)
        );
    }
}
