//! Priority admission, as upstream's plugin: a pod naming a PriorityClass gets its value as
//! spec.priority and its preemptionPolicy (a class that does not exist refuses the pod); a pod naming
//! none gets the global default class (the lowest-valued one, if several), or priority 0. A priority
//! the pod sets itself must be the computed one. Pure: the caller reads the classes.

use serde_json::{json, Value};

/// What the pod names, if anything.
pub fn class_of(pod: &Value) -> Option<&str> {
    pod["spec"]["priorityClassName"]
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Admits a pod being created: `named` is the class it names (None: it does not exist) and is
/// only read when the pod names one; `classes` are every class (for the global default).
pub fn admit(pod: &mut Value, named: Option<&Value>, classes: &[Value]) -> Result<(), String> {
    let chosen = match class_of(pod) {
        Some(name) => {
            Some(named.ok_or_else(|| format!("no PriorityClass with name {name} was found"))?)
        }
        None => classes
            .iter()
            .filter(|c| c["globalDefault"] == json!(true))
            .min_by_key(|c| c["value"].as_i64().unwrap_or(0)),
    };
    let (name, priority, policy) = match chosen {
        Some(c) => (
            c["metadata"]["name"].as_str().unwrap_or("").to_string(),
            c["value"].as_i64().unwrap_or(0),
            c["preemptionPolicy"]
                .as_str()
                .unwrap_or("PreemptLowerPriority")
                .to_string(),
        ),
        None => (String::new(), 0, "PreemptLowerPriority".to_string()),
    };
    let spec = &mut pod["spec"];
    if let Some(given) = spec["priority"].as_i64() {
        if given != priority {
            return Err(format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            ));
        }
    }
    if !name.is_empty() {
        spec["priorityClassName"] = json!(name);
    }
    spec["priority"] = json!(priority);
    if spec["preemptionPolicy"].is_null() {
        spec["preemptionPolicy"] = json!(policy);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool) -> Value {
        json!({"metadata": {"name": name}, "value": value, "globalDefault": default,
               "preemptionPolicy": "PreemptLowerPriority"})
    }

    #[test]
    fn named_default_and_missing_classes() {
        let high = class("high", 1000, false);
        let mut pod = json!({"spec": {"priorityClassName": "high"}});
        admit(&mut pod, Some(&high), &[]).unwrap();
        assert_eq!(pod["spec"]["priority"], 1000);
        assert_eq!(pod["spec"]["preemptionPolicy"], "PreemptLowerPriority");

        let mut missing = json!({"spec": {"priorityClassName": "nope"}});
        assert_eq!(
            admit(&mut missing, None, &[]).unwrap_err(),
            "no PriorityClass with name nope was found"
        );

        let mut plain = json!({"spec": {}});
        admit(&mut plain, None, std::slice::from_ref(&high)).unwrap();
        assert_eq!(plain["spec"]["priority"], 0);
        assert!(plain["spec"].get("priorityClassName").is_none());
        let defaults = [class("d2", 20, true), class("d1", 10, true), high];
        let mut plain = json!({"spec": {}});
        admit(&mut plain, None, &defaults).unwrap();
        assert_eq!(plain["spec"]["priorityClassName"], "d1");
        assert_eq!(plain["spec"]["priority"], 10);

        let mut wrong = json!({"spec": {"priority": 7}});
        assert!(admit(&mut wrong, None, &[]).is_err());
    }
}
