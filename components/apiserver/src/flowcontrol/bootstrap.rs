//! The mandatory and suggested APF objects (upstream's bootstrap configuration), created at start
//! when missing. Mandatory ones are put back to their spec while they carry
//! `apf.kubernetes.io/autoupdate-spec: "true"`, as upstream's configuration-ensurer does.

use serde_json::{json, Value};

use crate::registry::flowcontrol::{FLOW_SCHEMAS, PRIORITY_LEVEL_CONFIGURATIONS};
use crate::registry::lifecycle::{from_stored, prepare_create, to_stored, FieldValidation};
use crate::registry::ResourceSpec;
use crate::storage::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ApfBootstrapError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("building {name}: {message}")]
    Invalid { name: String, message: String },
}

const AUTOUPDATE: &str = "apf.kubernetes.io/autoupdate-spec";

/// Queues, hand size, queue length limit.
type Queuing = (i64, i64, i64);

/// (name, nominal shares, lendable %, queuing or None = Reject).
const LIMITED: &[(&str, i64, i64, Option<Queuing>)] = &[
    ("catch-all", 5, 0, None),
    ("node-high", 40, 25, Some((64, 6, 50))),
    ("system", 30, 33, Some((64, 6, 50))),
    ("leader-election", 10, 0, Some((16, 4, 50))),
    ("workload-high", 40, 50, Some((128, 6, 50))),
    ("workload-low", 100, 90, Some((128, 6, 50))),
    ("global-default", 20, 50, Some((128, 6, 50))),
];

const MANDATORY: &[&str] = &["exempt", "catch-all"];

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {AUTOUPDATE: "true"}})
}

fn priority_levels() -> Vec<Value> {
    let mut out = vec![json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": meta("exempt"),
        "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}},
    })];
    for (name, shares, lendable, queuing) in LIMITED {
        let limit_response = match queuing {
            Some((queues, hand, length)) => json!({"type": "Queue", "queuing": {
                "queues": queues, "handSize": hand, "queueLengthLimit": length}}),
            None => json!({"type": "Reject"}),
        };
        out.push(json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": meta(name),
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": shares,
                     "lendablePercent": lendable, "limitResponse": limit_response}},
        }));
    }
    out
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "group": {"name": name}})
}
fn user(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}
fn service_account(namespace: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": name}})
}

fn all_resources() -> Value {
    json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}])
}
fn all_urls() -> Value {
    json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}])
}

fn flow_schema(
    name: &str,
    level: &str,
    precedence: i64,
    distinguisher: Option<&str>,
    subjects: Vec<Value>,
    resources: Value,
    urls: Value,
) -> Value {
    let mut rule = json!({"subjects": subjects});
    if resources.as_array().is_some_and(|r| !r.is_empty()) {
        rule["resourceRules"] = resources;
    }
    if urls.as_array().is_some_and(|u| !u.is_empty()) {
        rule["nonResourceRules"] = urls;
    }
    let mut spec = json!({"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence, "rules": [rule]});
    if let Some(d) = distinguisher {
        spec["distinguisherMethod"] = json!({"type": d});
    }
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": meta(name), "spec": spec})
}

fn flow_schemas() -> Vec<Value> {
    let everyone = || {
        vec![
            group("system:unauthenticated"),
            group("system:authenticated"),
        ]
    };
    let leases = json!([{"verbs": ["get", "create", "update"], "apiGroups": ["", "coordination.k8s.io"],
                         "resources": ["endpoints", "configmaps", "leases"], "namespaces": ["*"]}]);
    vec![
        flow_schema(
            "exempt",
            "exempt",
            1,
            None,
            vec![group("system:masters")],
            all_resources(),
            all_urls(),
        ),
        flow_schema(
            "probes",
            "exempt",
            2,
            None,
            everyone(),
            json!([]),
            json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]),
        ),
        flow_schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            vec![
                user("system:kube-controller-manager"),
                user("system:kube-scheduler"),
                service_account("kube-system", "*"),
            ],
            leases.clone(),
            json!([]),
        ),
        flow_schema(
            "workload-leader-election",
            "leader-election",
            200,
            Some("ByUser"),
            vec![group("system:serviceaccounts")],
            leases,
            json!([]),
        ),
        flow_schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            vec![group("system:nodes")],
            json!([{"verbs": ["*"], "apiGroups": ["", "coordination.k8s.io"], "resources": ["nodes", "nodes/status", "leases"],
                    "clusterScope": true, "namespaces": ["*"]}]),
            json!([]),
        ),
        flow_schema(
            "system-nodes",
            "system",
            500,
            Some("ByUser"),
            vec![group("system:nodes")],
            all_resources(),
            all_urls(),
        ),
        flow_schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            vec![user("system:kube-controller-manager")],
            all_resources(),
            all_urls(),
        ),
        flow_schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            vec![user("system:kube-scheduler")],
            all_resources(),
            all_urls(),
        ),
        flow_schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            vec![service_account("kube-system", "*")],
            all_resources(),
            all_urls(),
        ),
        flow_schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            vec![group("system:serviceaccounts")],
            all_resources(),
            all_urls(),
        ),
        flow_schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            everyone(),
            all_resources(),
            all_urls(),
        ),
        flow_schema(
            "catch-all",
            "catch-all",
            10000,
            Some("ByUser"),
            everyone(),
            all_resources(),
            all_urls(),
        ),
    ]
}

async fn ensure(store: &Store, spec: &ResourceSpec, obj: Value) -> Result<(), ApfBootstrapError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let built = prepare_create(spec, None, obj, FieldValidation::Strict).map_err(|e| {
        ApfBootstrapError::Invalid {
            name: name.clone(),
            message: e.message,
        }
    })?;
    let key = spec.key(None, &name);
    match store.get(&key).await? {
        None => match store.create(&key, to_stored(&built)).await {
            Ok(_) | Err(StoreError::AlreadyExists) => Ok(()),
            Err(e) => Err(e.into()),
        },
        Some(current) if MANDATORY.contains(&name.as_str()) => {
            let Ok(mut stored) = from_stored(&current.value, current.mod_revision) else {
                return Ok(());
            };
            let auto = stored["metadata"]["annotations"][AUTOUPDATE] == "true";
            if !auto || stored["spec"] == built["spec"] {
                return Ok(());
            }
            stored["spec"] = built["spec"].clone();
            match store
                .update(&key, to_stored(&stored), current.mod_revision)
                .await
            {
                Ok(_) | Err(StoreError::Conflict) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        // Suggested objects a user changed stay as the user left them.
        Some(_) => Ok(()),
    }
}

/// Creates the missing objects, priority levels first (flow schemas refer to them).
pub async fn ensure_defaults(store: &Store) -> Result<(), ApfBootstrapError> {
    for pl in priority_levels() {
        ensure(store, &PRIORITY_LEVEL_CONFIGURATIONS, pl).await?;
    }
    for fs in flow_schemas() {
        ensure(store, &FLOW_SCHEMAS, fs).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_objects_pass_their_own_validation() {
        for pl in priority_levels() {
            prepare_create(
                &PRIORITY_LEVEL_CONFIGURATIONS,
                None,
                pl,
                FieldValidation::Strict,
            )
            .unwrap();
        }
        let levels: Vec<String> = priority_levels()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        for fs in flow_schemas() {
            let level = fs["spec"]["priorityLevelConfiguration"]["name"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(levels.contains(&level), "{level}");
            prepare_create(&FLOW_SCHEMAS, None, fs, FieldValidation::Strict).unwrap();
        }
    }
}
