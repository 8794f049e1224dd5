//! A namespace's PodSecurity labels on create and update, and what a stricter enforce level would
//! say about the pods already in it (upstream's ValidateNamespace / EvaluatePodsInNamespace).

use std::collections::HashMap;

use serde_json::Value;

use super::api::{labels_of, policy_to_evaluate, Level, LevelVersion, Policy};
use super::checks::{evaluate, reasons};
use super::config::Config;
use crate::status::Cause;

/// At most this many existing pods are checked, within this time (upstream's defaults).
pub const MAX_PODS_TO_CHECK: usize = 3000;
pub const POD_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// What the namespace write needs.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Allow,
    /// Allowed, with these warnings for the client.
    Warn(Vec<String>),
    /// The labels are invalid (a 422 naming each label).
    Invalid(Vec<Cause>),
    /// Allowed; the caller lists the namespace's pods and warns about those the new enforce
    /// level refuses ([`existing_pods`]).
    CheckPods(LevelVersion),
}

fn same_errors(a: &[Cause], b: &[Cause]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.field == y.field && x.message == y.message)
}

/// The verdict on a namespace create (`old` None) or update.
pub fn admit(config: &Config, new: &Value, old: Option<&Value>) -> Verdict {
    let name = new["metadata"]["name"].as_str().unwrap_or("");
    let labels = labels_of(new);
    let (new_policy, new_errs) = policy_to_evaluate(&labels, config.defaults);
    let exempt_warning = || {
        exempt_warning(name, &new_policy, &labels, &config.defaults)
            .map_or(Verdict::Allow, |w| Verdict::Warn(vec![w]))
    };
    let Some(old) = old else {
        if !new_errs.is_empty() {
            return Verdict::Invalid(new_errs);
        }
        if config.exempt_namespace(name) {
            return exempt_warning();
        }
        return Verdict::Allow;
    };
    let (old_policy, old_errs) = policy_to_evaluate(&labels_of(old), config.defaults);
    // Labels that were already invalid in the same way do not block other changes.
    if !new_errs.is_empty() && (old_errs.is_empty() || !same_errors(&new_errs, &old_errs)) {
        return Verdict::Invalid(new_errs);
    }
    let (new_e, old_e) = (new_policy.enforce, old_policy.enforce);
    if new_e == old_e
        || new_e.level == Level::Privileged
        || (new_e.version == old_e.version && new_e.level <= old_e.level)
    {
        return Verdict::Allow;
    }
    if config.exempt_namespace(name) {
        return exempt_warning();
    }
    Verdict::CheckPods(new_e)
}

/// `namespace "x" is exempt from Pod Security, and the policy (enforce=…) will be ignored`, for an
/// exempt namespace labelled with a non-privileged policy other than the defaults.
fn exempt_warning(
    name: &str,
    policy: &Policy,
    labels: &std::collections::BTreeMap<String, String>,
    defaults: &Policy,
) -> Option<String> {
    if policy.fully_privileged() || policy.equivalent(defaults) {
        return None;
    }
    use super::api::*;
    let modes = [
        ("enforce", policy.enforce, ENFORCE_LEVEL, ENFORCE_VERSION),
        ("audit", policy.audit, AUDIT_LEVEL, AUDIT_VERSION),
        ("warn", policy.warn, WARN_LEVEL, WARN_VERSION),
    ];
    let shown: Vec<String> = modes
        .iter()
        .filter(|(_, lv, l, v)| {
            lv.level != Level::Privileged && (labels.contains_key(*l) || labels.contains_key(*v))
        })
        .map(|(mode, lv, _, _)| format!("{mode}={lv}"))
        .collect();
    Some(format!(
        "namespace {name:?} is exempt from Pod Security, and the policy ({}) will be ignored",
        shown.join(", ")
    ))
}

/// The controller a pod belongs to (its controller ownerReference's uid).
fn controller_uid(pod: &Value) -> Option<&str> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .and_then(|r| r["uid"].as_str())
}

/// Warnings about the existing `pods` under a new enforce level. Pods of exempt runtime classes
/// are skipped; one pod per controller goes first, so a big ReplicaSet does not hide the rest;
/// `expired` is asked after each pod and ends the check early.
pub fn existing_pods(
    namespace: &str,
    enforce: LevelVersion,
    pods: Vec<Value>,
    config: &Config,
    max: usize,
    expired: &mut dyn FnMut() -> bool,
) -> Vec<String> {
    let mut first = Vec::new();
    let mut duplicates = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for pod in pods {
        if config.exempt_runtime_class(pod["spec"]["runtimeClassName"].as_str()) {
            continue;
        }
        let duplicate = controller_uid(&pod).is_some_and(|uid| !seen.insert(uid.to_string()));
        if duplicate {
            duplicates.push(pod);
        } else {
            first.push(pod);
        }
    }
    first.extend(duplicates);
    let total = first.len();
    first.truncate(max);
    let mut checked = first.len();
    // reason → (lexically first pod name, pod count), in order of first appearance.
    let mut order: Vec<String> = Vec::new();
    let mut counts: HashMap<String, (String, usize)> = HashMap::new();
    for (i, pod) in first.iter().enumerate() {
        let violations = evaluate(enforce, &pod["metadata"], &pod["spec"]);
        if !violations.is_empty() {
            let reason = reasons(&violations);
            let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
            match counts.get_mut(&reason) {
                Some((name, n)) => {
                    if pod_name < *name {
                        *name = pod_name;
                    }
                    *n += 1;
                }
                None => {
                    order.push(reason.clone());
                    counts.insert(reason, (pod_name, 1));
                }
            }
        }
        if expired() {
            checked = i + 1;
            break;
        }
    }
    let mut warnings = Vec::new();
    if checked < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
        ));
    }
    if !order.is_empty() {
        warnings.push(format!(
            "existing pods in namespace {namespace:?} violate the new PodSecurity enforce level \"{enforce}\""
        ));
    }
    let mut per_pod: Vec<String> = order
        .iter()
        .map(|reason| {
            let (name, n) = &counts[reason];
            match n {
                1 => format!("{name}: {reason}"),
                2 => format!("{name} (and 1 other pod): {reason}"),
                n => format!("{name} (and {} other pods): {reason}", n - 1),
            }
        })
        .collect();
    per_pod.sort();
    warnings.extend(per_pod);
    warnings
}

#[cfg(test)]
mod tests {
    use super::super::api::{Version, ENFORCE_LEVEL};
    use super::*;
    use serde_json::json;

    fn ns(labels: Value) -> Value {
        json!({"metadata": {"name": "team", "labels": labels}})
    }

    fn exempt_config() -> Config {
        let mut c = Config::default();
        c.exemptions.namespaces.push("team".into());
        c
    }

    #[test]
    fn creates_need_valid_labels() {
        let c = Config::default();
        assert_eq!(
            admit(&c, &ns(json!({ENFORCE_LEVEL: "baseline"})), None),
            Verdict::Allow
        );
        let Verdict::Invalid(errs) = admit(&c, &ns(json!({ENFORCE_LEVEL: "bogus"})), None) else {
            panic!("invalid label admitted")
        };
        assert_eq!(
            errs[0].field,
            "metadata.labels[pod-security.kubernetes.io/enforce]"
        );
        assert_eq!(
            admit(&exempt_config(), &ns(json!({ENFORCE_LEVEL: "restricted"})), None),
            Verdict::Warn(vec!["namespace \"team\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored".into()])
        );
    }

    #[test]
    fn updates_check_pods_only_when_enforcement_tightens() {
        let c = Config::default();
        let base = ns(json!({ENFORCE_LEVEL: "baseline"}));
        let restricted = ns(json!({ENFORCE_LEVEL: "restricted"}));
        let bad = ns(json!({ENFORCE_LEVEL: "bogus"}));
        assert_eq!(admit(&c, &base, Some(&base)), Verdict::Allow);
        assert_eq!(
            admit(&c, &base, Some(&restricted)),
            Verdict::Allow,
            "relaxed"
        );
        assert_eq!(
            admit(&c, &restricted, Some(&base)),
            Verdict::CheckPods(LevelVersion {
                level: Level::Restricted,
                version: Version::Latest
            })
        );
        assert!(matches!(admit(&c, &bad, Some(&base)), Verdict::Invalid(_)));
        // Already invalid the same way: other changes go through (enforce stays restricted).
        assert_eq!(admit(&c, &bad, Some(&bad)), Verdict::Allow);
        assert!(matches!(
            admit(&exempt_config(), &restricted, Some(&base)),
            Verdict::Warn(_)
        ));
    }

    fn pod(name: &str, privileged: bool, owner: Option<&str>) -> Value {
        let mut p = json!({"metadata": {"name": name}, "spec": {"containers": [
            {"name": "c", "securityContext": {"privileged": privileged}}]}});
        if let Some(uid) = owner {
            p["metadata"]["ownerReferences"] = json!([{"uid": uid, "controller": true}]);
        }
        p
    }

    #[test]
    fn existing_pods_are_summarised_like_upstream() {
        let baseline = LevelVersion {
            level: Level::Baseline,
            version: Version::Latest,
        };
        let pods = vec![
            pod("web-b", true, Some("rs1")),
            pod("web-a", true, Some("rs1")),
            pod("ok", false, None),
            pod("solo", true, None),
            pod("hostnet", false, None),
        ];
        let mut pods = pods;
        pods[4]["spec"]["hostNetwork"] = json!(true);
        let w = existing_pods(
            "team",
            baseline,
            pods.clone(),
            &Config::default(),
            3000,
            &mut || false,
        );
        assert_eq!(
            w,
            [
                "existing pods in namespace \"team\" violate the new PodSecurity enforce level \"baseline:latest\"",
                "hostnet: host namespaces",
                "solo (and 2 other pods): privileged",
            ]
        );
        // Limits: a cap on pods, and a deadline after the first pod.
        let w = existing_pods(
            "team",
            baseline,
            pods.clone(),
            &Config::default(),
            2,
            &mut || false,
        );
        assert_eq!(
            w[0],
            "new PodSecurity enforce level only checked against the first 2 of 5 existing pods"
        );
        let w = existing_pods(
            "team",
            baseline,
            pods,
            &Config::default(),
            3000,
            &mut || true,
        );
        assert_eq!(
            w[0],
            "new PodSecurity enforce level only checked against the first 1 of 5 existing pods"
        );
        assert_eq!(w[2], "web-b: privileged");
    }
}
