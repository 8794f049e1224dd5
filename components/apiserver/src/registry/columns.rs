//! Table cell functions, matching kubectl's (upstream printers') columns for each kind.

use serde_json::{json, Value};

use super::strategy::Column;

/// `Value::pointer` for the plain paths the printers use (no `~0`/`~1` escapes): pointer's
/// unescaping allocates per segment, a cost every Table row paid once per cell.
fn at<'a>(obj: &'a Value, pointer: &str) -> Option<&'a Value> {
    pointer
        .split('/')
        .skip(1)
        .try_fold(obj, |v, segment| match v {
            Value::Object(m) => m.get(segment),
            Value::Array(a) => a.get(segment.parse::<usize>().ok()?),
            _ => None,
        })
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    at(obj, pointer).and_then(Value::as_str).unwrap_or("")
}

fn or_none(s: &str) -> Value {
    if s.is_empty() {
        json!("<none>")
    } else {
        json!(s)
    }
}

pub fn name(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/metadata/name"))
}

/// AGE: upstream's `translateTimestampSince` → `duration.HumanDuration`.
pub fn age(obj: &Value, now: i64) -> Value {
    let created = str_at(obj, "/metadata/creationTimestamp");
    match time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339) {
        Ok(t) => json!(human_duration(now - t.unix_timestamp())),
        Err(_) => json!("<unknown>"),
    }
}

/// Port of k8s.io/apimachinery/pkg/util/duration.HumanDuration (seconds resolution).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

pub fn phase(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/status/phase"))
}

// ---- pods ----

fn container_statuses(obj: &Value) -> &[Value] {
    at(obj, "/status/containerStatuses")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The names of the pod's sidecars (init containers with restartPolicy Always).
fn sidecar_names(obj: &Value) -> Vec<&str> {
    obj.pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// READY: app containers and sidecars (a sidecar counts once started), as kubectl's printer.
pub fn pod_ready(obj: &Value, _: i64) -> Value {
    let sidecars = sidecar_names(obj);
    let total = obj
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
        + sidecars.len();
    let started_sidecars = at(obj, "/status/initContainerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            sidecars.contains(&c["name"].as_str().unwrap_or_default())
                && c["started"].as_bool() == Some(true)
        });
    let ready = container_statuses(obj)
        .iter()
        .chain(started_sidecars)
        .filter(|c| c["ready"].as_bool() == Some(true))
        .count();
    json!(format!("{ready}/{total}"))
}

/// STATUS: the printer's reason logic, reduced to what the skeleton's pods carry.
pub fn pod_status(obj: &Value, _: i64) -> Value {
    let mut reason = str_at(obj, "/status/phase").to_string();
    let status_reason = str_at(obj, "/status/reason");
    if !status_reason.is_empty() {
        reason = status_reason.to_string();
    }
    if let Some(init) = init_container_reason(obj) {
        let initialized = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Initialized" && c["status"] == "True")
            });
        if !initialized {
            reason = init;
        }
    }
    for c in container_statuses(obj).iter().rev() {
        if reason.starts_with("Init:") {
            break;
        }
        let waiting = at(c, "/state/waiting/reason").and_then(Value::as_str);
        let terminated = c
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str);
        if let Some(r) = waiting.filter(|r| !r.is_empty()) {
            reason = r.to_string();
        } else if let Some(r) = terminated.filter(|r| !r.is_empty()) {
            reason = r.to_string();
        }
    }
    if at(obj, "/metadata/deletionTimestamp").is_some() {
        reason = if status_reason == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    json!(reason)
}

/// kubectl's STATUS while init containers run: `Init:<done>/<total>`, or `Init:<reason>` for one
/// waiting (other than PodInitializing) or failed. None once every init container exited 0.
fn init_container_reason(obj: &Value) -> Option<String> {
    let statuses = obj
        .pointer("/status/initContainerStatuses")
        .and_then(Value::as_array)?;
    let total = obj
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map_or(statuses.len(), Vec::len);
    let sidecars = sidecar_names(obj);
    for (i, c) in statuses.iter().enumerate() {
        let started_sidecar = sidecars.contains(&c["name"].as_str().unwrap_or_default())
            && c["started"].as_bool() == Some(true);
        if started_sidecar {
            continue;
        }
        let terminated = at(c, "/state/terminated");
        if let Some(t) = terminated {
            let code = t["exitCode"].as_i64().unwrap_or(0);
            if code == 0 {
                continue;
            }
            let r = t["reason"].as_str().unwrap_or_default();
            return Some(if !r.is_empty() {
                format!("Init:{r}")
            } else if t["signal"].as_i64().unwrap_or(0) != 0 {
                format!("Init:Signal:{}", t["signal"])
            } else {
                format!("Init:ExitCode:{code}")
            });
        }
        let waiting = c
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !waiting.is_empty() && waiting != "PodInitializing" {
            return Some(format!("Init:{waiting}"));
        }
        return Some(format!("Init:{i}/{total}"));
    }
    None
}

pub fn pod_restarts(obj: &Value, _: i64) -> Value {
    let n: i64 = container_statuses(obj)
        .iter()
        .map(|c| c["restartCount"].as_i64().unwrap_or(0))
        .sum();
    json!(n)
}

pub fn pod_ip(obj: &Value, _: i64) -> Value {
    or_none(str_at(obj, "/status/podIP"))
}

pub fn pod_node(obj: &Value, _: i64) -> Value {
    or_none(str_at(obj, "/spec/nodeName"))
}

pub fn pod_nominated_node(obj: &Value, _: i64) -> Value {
    or_none(str_at(obj, "/status/nominatedNodeName"))
}

pub fn pod_readiness_gates(obj: &Value, _: i64) -> Value {
    let gates = obj
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if gates == 0 {
        return json!("<none>");
    }
    let conditions = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let met = obj["spec"]["readinessGates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| {
            conditions
                .iter()
                .any(|c| c["type"] == g["conditionType"] && c["status"] == "True")
        })
        .count();
    json!(format!("{met}/{gates}"))
}

// ---- nodes ----

pub fn node_status(obj: &Value, _: i64) -> Value {
    let ready = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        // As upstream's printer: any status but True (False or Unknown) is NotReady; "Unknown" only
        // when the node has no Ready condition at all.
        .map(|c| match c["status"].as_str() {
            Some("True") => "Ready",
            _ => "NotReady",
        })
        .unwrap_or("Unknown");
    let mut s = ready.to_string();
    if at(obj, "/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        s.push_str(",SchedulingDisabled");
    }
    json!(s)
}

pub fn node_roles(obj: &Value, _: i64) -> Value {
    const PREFIX: &str = "node-role.kubernetes.io/";
    let mut roles: Vec<&str> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix(PREFIX) {
                (!role.is_empty()).then_some(role)
            } else if k == "kubernetes.io/role" {
                v.as_str()
            } else {
                None
            }
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    or_none(&roles.join(","))
}

pub fn node_version(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/status/nodeInfo/kubeletVersion"))
}

fn node_address(obj: &Value, kind: &str) -> Value {
    let addr = obj
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|x| x["type"] == kind))
        .and_then(|x| x["address"].as_str())
        .unwrap_or("");
    or_none(addr)
}

pub fn node_internal_ip(obj: &Value, _: i64) -> Value {
    node_address(obj, "InternalIP")
}

pub fn node_external_ip(obj: &Value, _: i64) -> Value {
    node_address(obj, "ExternalIP")
}

pub fn node_os_image(obj: &Value, _: i64) -> Value {
    or_none(str_at(obj, "/status/nodeInfo/osImage"))
}

pub fn node_kernel(obj: &Value, _: i64) -> Value {
    or_none(str_at(obj, "/status/nodeInfo/kernelVersion"))
}

pub fn node_runtime(obj: &Value, _: i64) -> Value {
    or_none(str_at(obj, "/status/nodeInfo/containerRuntimeVersion"))
}

// ---- configmaps, secrets, serviceaccounts ----

fn len_of(obj: &Value, pointer: &str) -> usize {
    match at(obj, pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

pub fn data_count(obj: &Value, _: i64) -> Value {
    json!(len_of(obj, "/data") + len_of(obj, "/binaryData"))
}

pub fn secret_type(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/type"))
}

pub fn secret_data_count(obj: &Value, _: i64) -> Value {
    json!(len_of(obj, "/data"))
}

pub fn sa_secrets(obj: &Value, _: i64) -> Value {
    json!(len_of(obj, "/secrets"))
}

// ---- events ----

/// The newest of the times an event carries, as upstream's printer picks it.
fn event_time(obj: &Value, first: bool) -> Option<i64> {
    let candidates: &[&str] = if first {
        &["/firstTimestamp", "/eventTime"]
    } else {
        &["/series/lastObservedTime", "/lastTimestamp", "/eventTime"]
    };
    candidates.iter().find_map(|p| {
        let s = at(obj, p)?.as_str()?;
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
            .ok()
            .map(|t| t.unix_timestamp())
    })
}

pub fn event_last_seen(obj: &Value, now: i64) -> Value {
    match event_time(obj, false) {
        Some(t) => json!(human_duration(now - t)),
        None => json!("<unknown>"),
    }
}

pub fn event_first_seen(obj: &Value, now: i64) -> Value {
    match event_time(obj, true) {
        Some(t) => json!(human_duration(now - t)),
        None => json!("<unknown>"),
    }
}

pub fn event_type(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/type"))
}

pub fn event_reason(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/reason"))
}

pub fn event_object(obj: &Value, _: i64) -> Value {
    let kind = str_at(obj, "/involvedObject/kind").to_lowercase();
    json!(format!("{kind}/{}", str_at(obj, "/involvedObject/name")))
}

pub fn event_subobject(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/involvedObject/fieldPath"))
}

pub fn event_source(obj: &Value, _: i64) -> Value {
    let component = str_at(obj, "/source/component");
    let component = if component.is_empty() {
        str_at(obj, "/reportingComponent")
    } else {
        component
    };
    let host = str_at(obj, "/source/host");
    json!(if host.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {host}")
    })
}

pub fn event_message(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/message").trim())
}

pub fn event_count(obj: &Value, _: i64) -> Value {
    let count = obj
        .pointer("/series/count")
        .or_else(|| at(obj, "/count"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    json!(count)
}

// ---- leases ----

pub fn lease_holder(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/spec/holderIdentity"))
}

/// The Name column every kind's table starts with, described as upstream's printers do (the
/// ObjectMeta field's own documentation).
pub const NAME_COL: Column = col(
    "Name",
    "string",
    "name",
    "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    0,
    name,
);

/// The Age column, from `metadata.creationTimestamp`.
/// "Created At": the creation timestamp as a date (RBAC kinds, CRDs, LimitRanges).
pub const CREATED_AT_COL: Column = col(
    "Created At",
    "date",
    "",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
    0,
    created_at,
);

pub fn created_at(obj: &Value, _: i64) -> Value {
    obj["metadata"]["creationTimestamp"].clone()
}

pub const AGE_COL: Column = col(
    "Age",
    "string",
    "",
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    0,
    age,
);

/// Shorthand constructor so the column tables in `resources.rs` read like upstream's printers.
pub const fn col(
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    description: &'static str,
    priority: u8,
    cell: super::strategy::CellFn,
) -> Column {
    Column {
        name,
        type_,
        format,
        description,
        priority,
        cell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_duration_matches_upstream() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(10 * 3600), "10h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(30 * 86400), "30d");
    }

    #[test]
    fn pod_cells() {
        let pod = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.244.0.5", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        });
        assert_eq!(pod_ready(&pod, 0), json!("1/2"));
        assert_eq!(pod_status(&pod, 0), json!("CrashLoopBackOff"));
        assert_eq!(pod_restarts(&pod, 0), json!(3));
        assert_eq!(pod_ip(&pod, 0), json!("10.244.0.5"));
        assert_eq!(pod_node(&pod, 0), json!("n1"));
    }

    #[test]
    fn pod_status_while_init_containers_run() {
        let pod = |inits: Value, initialized: &str| {
            json!({
                "spec": {"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "a"}]},
                "status": {"phase": "Pending",
                    "conditions": [{"type": "Initialized", "status": initialized}],
                    "initContainerStatuses": inits,
                    "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "PodInitializing"}}}]}
            })
        };
        let running = json!({"state": {"running": {}}});
        let waiting = json!({"state": {"waiting": {"reason": "PodInitializing"}}});
        let done = json!({"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
        assert_eq!(
            pod_status(&pod(json!([running, waiting]), "False"), 0),
            json!("Init:0/2")
        );
        assert_eq!(
            pod_status(&pod(json!([done, running]), "False"), 0),
            json!("Init:1/2")
        );
        let crash = json!({"state": {"waiting": {"reason": "CrashLoopBackOff"}}});
        assert_eq!(
            pod_status(&pod(json!([crash, waiting]), "False"), 0),
            json!("Init:CrashLoopBackOff")
        );
        let failed = json!({"state": {"terminated": {"exitCode": 2, "reason": "Error"}}});
        assert_eq!(
            pod_status(&pod(json!([failed, waiting]), "False"), 0),
            json!("Init:Error")
        );
        assert_eq!(
            pod_status(&pod(json!([done, done]), "True"), 0),
            json!("PodInitializing")
        );
    }

    #[test]
    fn sidecars_count_in_ready_and_once_started_in_init() {
        let pod = |started: bool, ready: bool| {
            json!({
                "spec": {"initContainers": [{"name": "side", "restartPolicy": "Always"}, {"name": "i1"}],
                         "containers": [{"name": "a"}]},
                "status": {"phase": "Pending",
                    "conditions": [{"type": "Initialized", "status": "False"}],
                    "initContainerStatuses": [
                        {"name": "side", "started": started, "ready": ready, "state": {"running": {}}},
                        {"name": "i1", "state": {"running": {}}}],
                    "containerStatuses": [{"name": "a", "ready": false,
                                           "state": {"waiting": {"reason": "PodInitializing"}}}]}
            })
        };
        assert_eq!(pod_status(&pod(false, false), 0), json!("Init:0/2"));
        assert_eq!(pod_status(&pod(true, true), 0), json!("Init:1/2"));
        assert_eq!(pod_ready(&pod(true, true), 0), json!("1/2"));
        assert_eq!(pod_ready(&pod(false, true), 0), json!("0/2"));
    }

    #[test]
    fn node_cells() {
        let node = json!({
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.0"}}
        });
        assert_eq!(node_status(&node, 0), json!("Ready,SchedulingDisabled"));
        assert_eq!(node_roles(&node, 0), json!("control-plane"));
        assert_eq!(node_version(&node, 0), json!("v1.33.0"));
        assert_eq!(node_status(&json!({}), 0), json!("Unknown"));
        let lost = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        assert_eq!(node_status(&lost, 0), json!("NotReady"));
        assert_eq!(node_roles(&json!({}), 0), json!("<none>"));
    }
}
