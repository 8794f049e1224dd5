//! ResourceQuota admission, as upstream's plugin: an object created in a namespace with quotas is
//! charged to every quota whose scopes select it, for the resources each quota limits (see
//! `kiln_common::quota`). A charge that would take `used` past `hard` refuses the object with
//! upstream's "exceeded quota" text; a quota whose usage the controller has not yet calculated
//! refuses it too ("status unknown"). Admitted charges are added to the quotas' status.used at once,
//! so creates that follow each other see each other before the controller recounts. Pure: the
//! caller reads the quotas and writes the charged ones.

use kiln_common::quota::{self, Usage};
use serde_json::Value;

/// A quota to charge, with the usage to write to its status.
#[derive(Debug, PartialEq)]
pub struct Charge {
    pub name: String,
    pub used: Usage,
}

fn listing(u: &Usage) -> String {
    u.iter()
        .map(|(k, v)| format!("{k}={}", v.text()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Evaluates `obj` (of `group`/`plural`) against the namespace's quotas: the charges to make, or
/// the refusal's reason.
pub fn evaluate(
    quotas: &[Value],
    group: &str,
    plural: &str,
    obj: &Value,
) -> Result<Vec<Charge>, String> {
    let usage = quota::usage(group, plural, obj);
    let is_pod = group.is_empty() && plural == "pods";
    let mut charges = Vec::new();
    let mut sorted: Vec<&Value> = quotas.iter().collect();
    sorted.sort_by_key(|q| q["metadata"]["name"].as_str().unwrap_or("").to_string());
    for q in sorted {
        if !quota::selects(q, group, plural, obj) {
            continue;
        }
        let name = q["metadata"]["name"].as_str().unwrap_or("").to_string();
        if is_pod && !usage.is_empty() {
            let missing = quota::missing_declarations(q, obj);
            if !missing.is_empty() {
                let parts: Vec<String> = missing
                    .iter()
                    .map(|(r, cs)| format!("{r} for: {}", cs.join(",")))
                    .collect();
                return Err(format!(
                    "failed quota: {name}: must specify {}",
                    parts.join("; ")
                ));
            }
        }
        let delta = quota::tracked(q, &usage);
        if delta.is_empty() {
            continue;
        }
        let used = quota::resource_list(&q["status"]["used"]);
        let unknown: Vec<&str> = delta
            .keys()
            .filter(|k| !used.contains_key(*k))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "status unknown for quota: {name}, resources: {}",
                unknown.join(",")
            ));
        }
        let hard = quota::resource_list(&q["spec"]["hard"]);
        let mut requested = Usage::new();
        let mut now_used = Usage::new();
        let mut limited = Usage::new();
        let mut next = used.clone();
        for (k, d) in &delta {
            let after = used[k].plus(*d);
            next.insert(k.clone(), after);
            if let Some(h) = hard.get(k) {
                if after.value > h.value {
                    requested.insert(k.clone(), *d);
                    now_used.insert(k.clone(), used[k]);
                    limited.insert(k.clone(), *h);
                }
            }
        }
        if !requested.is_empty() {
            return Err(format!(
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                listing(&requested),
                listing(&now_used),
                listing(&limited)
            ));
        }
        charges.push(Charge { name, used: next });
    }
    Ok(charges)
}

/// The quota with its status.used replaced (status.hard kept).
pub fn charged(mut q: Value, used: &Usage) -> Value {
    q["status"]["used"] = quota::to_resource_list(used);
    q
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn quota(hard: Value, used: Value) -> Value {
        json!({"metadata": {"name": "test-quota"}, "spec": {"hard": hard}, "status": {"hard": hard, "used": used}})
    }

    fn pod(requests: Value) -> Value {
        json!({"spec": {"containers": [{"name": "pause", "resources": {"requests": requests}}]}})
    }

    #[test]
    fn charges_fit_and_overflow_refuses_with_upstreams_text() {
        let q = quota(
            json!({"pods": "5", "cpu": "1", "memory": "500Mi"}),
            json!({"pods": "1", "cpu": "500m", "memory": "252Mi"}),
        );
        let fits = evaluate(
            std::slice::from_ref(&q),
            "",
            "pods",
            &pod(json!({"cpu": "400m", "memory": "100Mi"})),
        )
        .unwrap();
        assert_eq!(fits.len(), 1);
        assert_eq!(fits[0].used["cpu"].text(), "900m");
        assert_eq!(fits[0].used["pods"].text(), "2");
        assert_eq!(fits[0].used["memory"].text(), "352Mi");
        let err = evaluate(
            &[q],
            "",
            "pods",
            &pod(json!({"cpu": "600m", "memory": "100Mi"})),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "exceeded quota: test-quota, requested: cpu=600m, used: cpu=500m, limited: cpu=1"
        );
    }

    #[test]
    fn unknown_status_and_missing_declarations_refuse() {
        let fresh = json!({"metadata": {"name": "q"}, "spec": {"hard": {"configmaps": "2"}}});
        let err = evaluate(&[fresh], "", "configmaps", &json!({})).unwrap_err();
        assert_eq!(err, "status unknown for quota: q, resources: configmaps");
        let limits = quota(json!({"limits.cpu": "2"}), json!({"limits.cpu": "0"}));
        let err = evaluate(&[limits], "", "pods", &pod(json!({}))).unwrap_err();
        assert_eq!(
            err,
            "failed quota: test-quota: must specify limits.cpu for: pause"
        );
    }

    #[test]
    fn untracked_kinds_and_unselected_objects_are_not_charged() {
        let q = quota(json!({"pods": "1"}), json!({"pods": "1"}));
        assert!(
            evaluate(std::slice::from_ref(&q), "", "configmaps", &json!({}))
                .unwrap()
                .is_empty()
        );
        let mut scoped = q;
        scoped["spec"]["scopes"] = json!(["Terminating"]);
        // Not terminating: the full quota does not select it.
        assert!(evaluate(&[scoped], "", "pods", &pod(json!({})))
            .unwrap()
            .is_empty());
        let rs = quota(
            json!({"count/replicasets.apps": "1"}),
            json!({"count/replicasets.apps": "1"}),
        );
        assert!(evaluate(&[rs], "apps", "replicasets", &json!({})).is_err());
    }
}
