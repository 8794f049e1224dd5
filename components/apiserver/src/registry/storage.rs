//! core/v1 PersistentVolume and PersistentVolumeClaim: upstream's defaults (SetDefaults_PersistentVolume
//! / _PersistentVolumeClaim), validation with its field paths and texts (pkg/apis/core/validation
//! ValidatePersistentVolume*, ValidatePersistentVolumeClaim*), the update rules (a PV's volume source
//! and a claim's spec are fixed once made, except what the binder and resizing need) and kubectl's
//! columns (printPersistentVolume / printPersistentVolumeClaim). Both have a status subresource the
//! PV controller writes.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::policy::validation::{qualified_name_errors, subdomain_errors};
use super::storage_quantity::{self as quantity, Milli};
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

/// The PVC / PV annotation older clients still use instead of spec.storageClassName.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// Access modes in the order `sets.List` sorts them for NotSupported.
const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const PV_RECLAIM_POLICIES: &[&str] = &["Delete", "Recycle", "Retain"];
const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];

/// The PersistentVolumeSource members in upstream's check order, with the field path each one's
/// "may not specify more than 1 volume type" names (upstream's spelling, `cephFS` included).
/// flexVolume is counted but never refused as a second type, as upstream.
const PV_SOURCES: &[(&str, &str)] = &[
    ("hostPath", "hostPath"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("nfs", "nfs"),
    ("rbd", "rbd"),
    ("quobyte", "quobyte"),
    ("cephfs", "cephFS"),
    ("iscsi", "iscsi"),
    ("cinder", "cinder"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("scaleIO", "scaleIO"),
    ("local", "local"),
    ("storageos", "storageos"),
    ("csi", "csi"),
];

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if obj.is_object() && obj[key].is_null() {
        obj[key] = value;
    }
}

pub fn pv_defaults(obj: &mut Value) {
    if obj["spec"].is_object() {
        let spec = &mut obj["spec"];
        set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    // A new volume starts Pending and records when it got there (PersistentVolumeLastPhaseTransitionTime,
    // GA in 1.31); an update keeps the stored status, so this only fires on create.
    if obj["status"]["phase"].is_null() {
        obj["status"]["phase"] = json!("Pending");
        obj["status"]["lastPhaseTransitionTime"] = json!(super::lifecycle::now_rfc3339());
    }
}

pub fn pvc_defaults(obj: &mut Value) {
    if obj["spec"].is_object() {
        set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
    }
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    set_default(&mut obj["status"], "phase", json!("Pending"));
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Access-mode rules PVs and PVCs share; `missing` is the Required detail each kind uses.
fn access_modes(causes: &mut Vec<Cause>, modes: &Value, missing: &str) {
    let modes = strings(modes);
    if modes.is_empty() {
        causes.push(Cause::required("spec.accessModes", missing));
    }
    let (mut once_pod, mut other) = (false, false);
    for mode in &modes {
        if !ACCESS_MODES.contains(mode) {
            causes.push(Cause::not_supported("spec.accessModes", mode, ACCESS_MODES));
        } else if *mode == "ReadWriteOncePod" {
            once_pod = true;
        } else {
            other = true;
        }
    }
    if once_pod && other {
        causes.push(Cause::forbidden(
            "spec.accessModes",
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn class_name(causes: &mut Vec<Cause>, field: &str, name: &Value) {
    if let Some(name) = name.as_str().filter(|s| !s.is_empty()) {
        for msg in subdomain_errors(name) {
            causes.push(Cause::invalid(field, &json!(name), &msg));
        }
    }
}

fn volume_mode(causes: &mut Vec<Cause>, mode: &Value) {
    if let Some(mode) = mode.as_str() {
        if !VOLUME_MODES.contains(&mode) {
            causes.push(Cause::not_supported("spec.volumeMode", mode, VOLUME_MODES));
        }
    }
}

/// ValidatePositiveQuantityValue (and a parse failure, which upstream's decoder reports).
fn positive_quantity(causes: &mut Vec<Cause>, field: &str, q: &Value) {
    match quantity::of(q) {
        None => causes.push(Cause::invalid(
            field,
            q,
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        )),
        Some(v) if v <= Milli(0) => causes.push(Cause::invalid_raw(
            field,
            &quantity::text(q),
            "must be greater than zero",
        )),
        Some(_) => {}
    }
}

fn no_backsteps(causes: &mut Vec<Cause>, field: &str, path: &str) {
    if path.split('/').any(|p| p == "..") {
        causes.push(Cause::invalid(field, &json!(path), "must not contain '..'"));
    }
}

/// The per-source checks kiln's clients exercise: the path-based sources, NFS and CSI.
fn source_validation(causes: &mut Vec<Cause>, key: &str, src: &Value) {
    let at = |f: &str| format!("spec.{key}.{f}");
    let path = src["path"].as_str().unwrap_or("");
    match key {
        "hostPath" | "local" => {
            if path.is_empty() {
                causes.push(Cause::required(&at("path"), ""));
            } else {
                no_backsteps(causes, &at("path"), path);
            }
        }
        "nfs" => {
            if src["server"].as_str().unwrap_or("").is_empty() {
                causes.push(Cause::required(&at("server"), ""));
            }
            if path.is_empty() {
                causes.push(Cause::required(&at("path"), ""));
            } else if !path.starts_with('/') {
                causes.push(Cause::invalid(
                    &at("path"),
                    &json!(path),
                    "must be an absolute path",
                ));
            }
        }
        "csi" => {
            if src["driver"].as_str().unwrap_or("").is_empty() {
                causes.push(Cause::required(&at("driver"), ""));
            }
            if src["volumeHandle"].as_str().unwrap_or("").is_empty() {
                causes.push(Cause::required(&at("volumeHandle"), ""));
            }
        }
        _ => {}
    }
}

/// ValidateNodeSelector for a PV's nodeAffinity.required.
fn node_selector(causes: &mut Vec<Cause>, selector: &Value, field: &str) {
    let terms_field = format!("{field}.nodeSelectorTerms");
    let terms = selector["nodeSelectorTerms"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if terms.is_empty() {
        causes.push(Cause::required(
            &terms_field,
            "must have at least one node selector term",
        ));
        return;
    }
    for (i, term) in terms.iter().enumerate() {
        for (kind, list) in [
            ("matchExpressions", &term["matchExpressions"]),
            ("matchFields", &term["matchFields"]),
        ] {
            for (j, req) in list.as_array().into_iter().flatten().enumerate() {
                let at = format!("{terms_field}[{i}].{kind}[{j}]");
                let values = strings(&req["values"]);
                match req["operator"].as_str().unwrap_or("") {
                    "In" | "NotIn" if values.is_empty() => causes.push(Cause::required(
                        &format!("{at}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    )),
                    "Exists" | "DoesNotExist" if !values.is_empty() => {
                        causes.push(Cause::forbidden(
                            &format!("{at}.values"),
                            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        ))
                    }
                    "Gt" | "Lt" if values.len() != 1 => causes.push(Cause::required(
                        &format!("{at}.values"),
                        "must be specified single value when `operator` is 'Lt' or 'Gt'",
                    )),
                    "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
                    other => causes.push(Cause::invalid(
                        &format!("{at}.operator"),
                        &json!(other),
                        "not a valid selector operator",
                    )),
                }
                if kind == "matchExpressions" {
                    let key = req["key"].as_str().unwrap_or("");
                    for msg in qualified_name_errors(key) {
                        causes.push(Cause::invalid(&format!("{at}.key"), &json!(key), &msg));
                    }
                }
            }
        }
    }
}

/// Go's `%#v` of a ResourceList, as NotSupported on spec.capacity prints it.
fn go_resource_list(list: &Value) -> String {
    let entries: Vec<String> = list
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k:?}:resource.Quantity{{{:?}}}", quantity::text(v)))
        .collect();
    format!("core.ResourceList{{{}}}", entries.join(", "))
}

pub fn pv_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    access_modes(&mut causes, &spec["accessModes"], "");
    let capacity = &spec["capacity"];
    let entries = capacity.as_object().map_or(0, |m| m.len());
    if entries == 0 {
        causes.push(Cause::required("spec.capacity", ""));
    }
    if capacity.get("storage").is_none() || entries > 1 {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: \"storage\"",
                go_resource_list(capacity)
            ),
            field: "spec.capacity".into(),
        });
    }
    for (name, q) in capacity.as_object().into_iter().flatten() {
        positive_quantity(&mut causes, &format!("spec.capacity[{name}]"), q);
    }
    if let Some(policy) = spec["persistentVolumeReclaimPolicy"]
        .as_str()
        .filter(|p| !p.is_empty())
    {
        if !PV_RECLAIM_POLICIES.contains(&policy) {
            causes.push(Cause::not_supported(
                "spec.persistentVolumeReclaimPolicy",
                policy,
                PV_RECLAIM_POLICIES,
            ));
        }
    }
    let affinity = &spec["nodeAffinity"];
    if affinity.is_object() {
        if affinity["required"].is_object() {
            node_selector(
                &mut causes,
                &affinity["required"],
                "spec.nodeAffinity.required",
            );
        } else {
            causes.push(Cause::required(
                "spec.nodeAffinity.required",
                "must specify required node constraints",
            ));
        }
    }
    let mut volumes = 0;
    for (key, path) in PV_SOURCES {
        let src = &spec[*key];
        if src.is_null() {
            continue;
        }
        if volumes > 0 && *key != "flexVolume" {
            causes.push(Cause::forbidden(
                &format!("spec.{path}"),
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        volumes += 1;
        source_validation(&mut causes, key, src);
        if *key == "local" && !affinity.is_object() {
            causes.push(Cause::required(
                "spec.nodeAffinity",
                "Local volume requires node affinity",
            ));
        }
    }
    if volumes == 0 {
        causes.push(Cause::required("spec", "must specify a volume type"));
    }
    let host_root = spec["hostPath"]["path"]
        .as_str()
        .is_some_and(|p| p.trim_end_matches('/').is_empty() && !p.is_empty());
    if host_root && spec["persistentVolumeReclaimPolicy"] == "Recycle" {
        causes.push(Cause::forbidden(
            "spec.persistentVolumeReclaimPolicy",
            "may not be 'recycle' for a hostPath mount of '/'",
        ));
    }
    class_name(
        &mut causes,
        "spec.storageClassName",
        &spec["storageClassName"],
    );
    volume_mode(&mut causes, &spec["volumeMode"]);
    if let Some(vac) = spec["volumeAttributesClassName"].as_str() {
        if vac.is_empty() {
            causes.push(Cause::required(
                "spec.volumeAttributesClassName",
                "an empty string is disallowed",
            ));
        } else {
            class_name(
                &mut causes,
                "spec.volumeAttributesClassName",
                &spec["volumeAttributesClassName"],
            );
        }
        if spec["csi"].is_null() {
            causes.push(Cause::required(
                "spec.csi",
                "has to be specified when using volumeAttributesClassName",
            ));
        }
    }
    causes
}

/// Only the volume source members of a PV spec (PersistentVolumeSource).
fn pv_source(spec: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (key, _) in PV_SOURCES {
        if let Some(v) = spec.get(*key).filter(|v| !v.is_null()) {
            out.insert((*key).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// ValidatePersistentVolumeUpdate: the source is fixed (a CSI expand secret may be added once),
/// and so are volumeMode and a set nodeAffinity.
pub fn pv_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let (o, n) = (&old["spec"], &new["spec"]);
    let mut causes = Vec::new();
    let mut new_source = pv_source(n);
    if o["csi"].is_object() && o["csi"]["controllerExpandSecretRef"].is_null() {
        if let Some(csi) = new_source.get_mut("csi").and_then(Value::as_object_mut) {
            csi.remove("controllerExpandSecretRef");
        }
    }
    let old_source = pv_source(o);
    if old_source != new_source {
        causes.push(Cause::forbidden(
            "spec.persistentvolumesource",
            &format!(
                "spec.persistentvolumesource is immutable after creation\n{}",
                go_diff("core.PersistentVolumeSource", &old_source, &new_source)
            ),
        ));
    }
    if o["volumeMode"] != n["volumeMode"] {
        causes.push(Cause::invalid(
            "volumeMode",
            &n["volumeMode"],
            "field is immutable",
        ));
    }
    if o["nodeAffinity"].is_object() && o["nodeAffinity"] != n["nodeAffinity"] {
        causes.push(Cause::invalid_raw(
            "nodeAffinity",
            &format!("&core.VolumeNodeAffinity{}", n["nodeAffinity"]),
            "field is immutable",
        ));
    }
    if !o["volumeAttributesClassName"].is_null() && n["volumeAttributesClassName"].is_null() {
        causes.push(Cause::forbidden(
            "spec.volumeAttributesClassName",
            "update from non-nil value to nil is forbidden",
        ));
    }
    causes
}

pub fn pvc_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    access_modes(
        &mut causes,
        &spec["accessModes"],
        "at least 1 access mode is required",
    );
    if !spec["selector"].is_null() {
        causes.extend(super::policy::validation::label_selector(
            &spec["selector"],
            "spec.selector",
        ));
    }
    match spec["resources"]["requests"].get("storage") {
        None => causes.push(Cause::required("spec.resources[storage]", "")),
        Some(q) => positive_quantity(&mut causes, "spec.resources[storage]", q),
    }
    class_name(
        &mut causes,
        "spec.storageClassName",
        &spec["storageClassName"],
    );
    volume_mode(&mut causes, &spec["volumeMode"]);
    for field in ["dataSource", "dataSourceRef"] {
        let src = &spec[field];
        if !src.is_object() {
            continue;
        }
        let at = format!("spec.{field}");
        if src["name"].as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required(&format!("{at}.name"), ""));
        }
        let kind = src["kind"].as_str().unwrap_or("");
        if kind.is_empty() {
            causes.push(Cause::required(&format!("{at}.kind"), ""));
        }
        let group = src["apiGroup"].as_str().unwrap_or("");
        if group.is_empty() && kind != "PersistentVolumeClaim" {
            causes.push(Cause::invalid(
                &at,
                &json!(kind),
                "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
            ));
        }
    }
    if let Some(vac) = spec["volumeAttributesClassName"].as_str() {
        class_name(&mut causes, "spec.volumeAttributesClassName", &json!(vac));
    }
    causes
}

/// PersistentVolumeClaimSpec's Go field names, in declaration order, for the diff upstream prints.
const PVC_SPEC_FIELDS: &[(&str, &str, bool)] = &[
    ("accessModes", "AccessModes", false),
    ("selector", "Selector", false),
    ("resources", "Resources", false),
    ("volumeName", "VolumeName", false),
    ("storageClassName", "StorageClassName", true),
    ("volumeMode", "VolumeMode", true),
    ("dataSource", "DataSource", false),
    ("dataSourceRef", "DataSourceRef", false),
    (
        "volumeAttributesClassName",
        "VolumeAttributesClassName",
        true,
    ),
];

/// A value as go-cmp's diff shows it: strings quoted, pointers to strings with `&`, nil, JSON
/// for structures.
fn go_value(v: &Value, pointer: bool) -> String {
    match v {
        Value::Null => "nil".into(),
        Value::String(s) if pointer => format!("&{s:?}"),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The `cmp.Diff(old, new)` upstream appends to an immutability error, in go-cmp's layout
/// (go-cmp itself randomises its whitespace, so clients never match it exactly): one `-`/`+` pair
/// per changed field.
fn go_diff(type_: &str, old: &Value, new: &Value) -> String {
    let mut lines = vec![format!("  {type_}{{")];
    let keys: Vec<(String, String, bool)> = if type_ == "core.PersistentVolumeClaimSpec" {
        PVC_SPEC_FIELDS
            .iter()
            .map(|(k, g, p)| (k.to_string(), g.to_string(), *p))
            .collect()
    } else {
        let mut all: Vec<String> = old
            .as_object()
            .into_iter()
            .flatten()
            .chain(new.as_object().into_iter().flatten())
            .map(|(k, _)| k.clone())
            .collect();
        all.sort();
        all.dedup();
        all.into_iter()
            .map(|k| {
                let mut g = k.clone();
                if let Some(first) = g.get_mut(0..1) {
                    first.make_ascii_uppercase();
                }
                (k, g, true)
            })
            .collect()
    };
    let mut identical = 0;
    for (key, go_name, pointer) in keys {
        let (a, b) = (&old[&key], &new[&key]);
        if a == b {
            identical += 1;
            continue;
        }
        if identical > 0 {
            lines.push(format!("  \t... // {identical} identical fields"));
            identical = 0;
        }
        lines.push(format!("- \t{go_name}: {},", go_value(a, pointer)));
        lines.push(format!("+ \t{go_name}: {},", go_value(b, pointer)));
    }
    if identical > 0 {
        lines.push(format!("  \t... // {identical} identical fields"));
    }
    lines.push("  }".into());
    lines.join("\n")
}

fn storage_request(spec: &Value) -> Option<Milli> {
    quantity::of(&spec["resources"]["requests"]["storage"])
}

/// ValidatePersistentVolumeClaimUpdate: the spec is fixed except a first volumeName (the
/// binder), a storage class set on a claim that had none (retroactive default class), and, for a
/// bound claim, resources.requests and volumeAttributesClassName; storage may not shrink.
pub fn pvc_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let (o, n) = (&old["spec"], &new["spec"]);
    let mut causes = Vec::new();
    let (mut old_spec, mut new_spec) = (o.clone(), n.clone());
    let (Some(os), Some(ns)) = (old_spec.as_object_mut(), new_spec.as_object_mut()) else {
        return causes;
    };
    if o["volumeName"].as_str().unwrap_or("").is_empty() {
        match n.get("volumeName") {
            Some(v) => os.insert("volumeName".into(), v.clone()),
            None => os.remove("volumeName"),
        };
    }
    let old_beta = &old["metadata"]["annotations"][BETA_STORAGE_CLASS];
    let new_beta = &new["metadata"]["annotations"][BETA_STORAGE_CLASS];
    if old_beta != new_beta {
        causes.push(Cause::invalid(
            &format!("metadata.annotations[{BETA_STORAGE_CLASS}]"),
            new_beta,
            "field is immutable",
        ));
    }
    // RetroactiveDefaultStorageClass: nil → a class is allowed once.
    if old_beta.is_null() && o["storageClassName"].is_null() {
        match n.get("storageClassName") {
            Some(v) => os.insert("storageClassName".into(), v.clone()),
            None => os.remove("storageClassName"),
        };
    }
    if new["status"]["phase"] == "Bound" && ns.contains_key("resources") {
        ns["resources"]["requests"]["storage"] = o["resources"]["requests"]["storage"].clone();
        // A bound claim may gain other requests only through resizing, which keeps the map.
        if let Some(reqs) = ns["resources"]["requests"].as_object_mut() {
            if o["resources"]["requests"]["storage"].is_null() {
                reqs.remove("storage");
            }
        }
    }
    match o.get("volumeAttributesClassName") {
        Some(v) => ns.insert("volumeAttributesClassName".into(), v.clone()),
        None => ns.remove("volumeAttributesClassName"),
    };
    if old_spec != new_spec {
        causes.push(Cause::forbidden(
            "spec",
            &format!(
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{}",
                go_diff("core.PersistentVolumeClaimSpec", &old_spec, &new_spec)
            ),
        ));
    }
    if let (Some(before), Some(after)) = (storage_request(o), storage_request(n)) {
        if after < before {
            // RecoverVolumeExpansionFailure (on by default): down to just above status.capacity.
            let status = quantity::of(&old["status"]["capacity"]["storage"]);
            let recovering = !old["status"]["allocatedResources"].is_null()
                || !old["status"]["allocatedResourceStatuses"].is_null();
            let detail = if recovering {
                status
                    .is_some_and(|s| after <= s)
                    .then_some("field can not be less than status.capacity")
            } else {
                Some("field can not be less than previous value")
            };
            if let Some(detail) = detail {
                causes.push(Cause::forbidden("spec.resources.requests.storage", detail));
            }
        }
    }
    if o["volumeMode"] != n["volumeMode"] {
        causes.push(Cause::invalid(
            "volumeMode",
            &n["volumeMode"],
            "field is immutable",
        ));
    }
    if let Some(before) = o.get("volumeAttributesClassName").filter(|v| !v.is_null()) {
        let _ = before;
        match n["volumeAttributesClassName"].as_str() {
            None => causes.push(Cause::forbidden(
                "spec.volumeAttributesClassName",
                "update from non-nil value to nil is forbidden",
            )),
            Some("") => causes.push(Cause::forbidden(
                "spec.volumeAttributesClassName",
                "update from non-nil value to an empty string is forbidden",
            )),
            Some(_) => {}
        }
    }
    causes
}

// ---- columns ----

/// helper.GetAccessModesAsString: each mode once, in RWO, ROX, RWX, RWOP order.
pub fn access_modes_text(modes: &Value) -> String {
    let modes = strings(modes);
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| modes.contains(m))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// GetPersistentVolume(Claim)Class: the beta annotation wins over spec.storageClassName.
fn class_of(obj: &Value) -> Value {
    match obj["metadata"]["annotations"][BETA_STORAGE_CLASS].as_str() {
        Some(c) => json!(c),
        None => json!(obj["spec"]["storageClassName"].as_str().unwrap_or("")),
    }
}

fn phase_or_terminating(obj: &Value) -> Value {
    if obj["metadata"]["deletionTimestamp"].is_string() {
        json!("Terminating")
    } else {
        json!(obj["status"]["phase"].as_str().unwrap_or(""))
    }
}

fn unset_or(v: &Value) -> Value {
    match v.as_str() {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<unset>"),
    }
}

fn pv_capacity(obj: &Value, _: i64) -> Value {
    json!(quantity::text(&obj["spec"]["capacity"]["storage"]))
}
fn pv_access_modes(obj: &Value, _: i64) -> Value {
    json!(access_modes_text(&obj["spec"]["accessModes"]))
}
fn pv_reclaim(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["persistentVolumeReclaimPolicy"]
        .as_str()
        .unwrap_or(""))
}
fn pv_status(obj: &Value, _: i64) -> Value {
    phase_or_terminating(obj)
}
fn pv_claim(obj: &Value, _: i64) -> Value {
    let r = &obj["spec"]["claimRef"];
    if r.is_object() {
        json!(format!(
            "{}/{}",
            r["namespace"].as_str().unwrap_or(""),
            r["name"].as_str().unwrap_or("")
        ))
    } else {
        json!("")
    }
}
fn storage_class(obj: &Value, _: i64) -> Value {
    class_of(obj)
}
fn volume_attributes_class(obj: &Value, _: i64) -> Value {
    // The PV printer prints an empty name as is, the PVC printer as <unset>; both rarely differ.
    unset_or(&obj["spec"]["volumeAttributesClassName"])
}
fn pv_reason(obj: &Value, _: i64) -> Value {
    json!(obj["status"]["reason"].as_str().unwrap_or(""))
}
fn volume_mode_cell(obj: &Value, _: i64) -> Value {
    unset_or(&obj["spec"]["volumeMode"])
}

fn bound(obj: &Value) -> bool {
    !obj["spec"]["volumeName"].as_str().unwrap_or("").is_empty()
}
fn pvc_status(obj: &Value, _: i64) -> Value {
    phase_or_terminating(obj)
}
fn pvc_volume(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["volumeName"].as_str().unwrap_or(""))
}
fn pvc_capacity(obj: &Value, _: i64) -> Value {
    if bound(obj) {
        json!(quantity::text(&obj["status"]["capacity"]["storage"]))
    } else {
        json!("")
    }
}
fn pvc_access_modes(obj: &Value, _: i64) -> Value {
    if bound(obj) {
        json!(access_modes_text(&obj["status"]["accessModes"]))
    } else {
        json!("")
    }
}

pub static PERSISTENT_VOLUMES: ResourceSpec = ResourceSpec {
    plural: "persistentvolumes",
    singular: "persistentvolume",
    kind: "PersistentVolume",
    list_kind: "PersistentVolumeList",
    namespaced: false,
    short_names: &["pv"],
    status_subresource: true,
    table: &[
        c::NAME_COL,
        col("Capacity", "string", "", "capacity is the description of the persistent volume's resources and capacity.", 0, pv_capacity),
        col("Access Modes", "string", "", "accessModes contains all ways the volume can be mounted.", 0, pv_access_modes),
        col("Reclaim Policy", "string", "", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.", 0, pv_reclaim),
        col("Status", "string", "", "phase indicates if a volume is available, bound to a claim, or released by a claim.", 0, pv_status),
        col("Claim", "string", "", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.", 0, pv_claim),
        col("StorageClass", "string", "", "StorageClass of the pv", 0, storage_class),
        col("VolumeAttributesClass", "string", "", "VolumeAttributesClass of the pv", 0, volume_attributes_class),
        col("Reason", "string", "", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.", 0, pv_reason),
        c::AGE_COL,
        col("VolumeMode", "string", "", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.", 1, volume_mode_cell),
    ],
    decode: typed::<PersistentVolume>,
    defaults: pv_defaults,
    validate: pv_validation,
    validate_update: pv_update_validation,
    ..ResourceSpec::BASE
};

pub static PERSISTENT_VOLUME_CLAIMS: ResourceSpec = ResourceSpec {
    plural: "persistentvolumeclaims",
    singular: "persistentvolumeclaim",
    kind: "PersistentVolumeClaim",
    list_kind: "PersistentVolumeClaimList",
    short_names: &["pvc"],
    status_subresource: true,
    table: &[
        c::NAME_COL,
        col(
            "Status",
            "string",
            "",
            "phase represents the current phase of PersistentVolumeClaim.",
            0,
            pvc_status,
        ),
        col(
            "Volume",
            "string",
            "",
            "volumeName is the binding reference to the PersistentVolume backing this claim.",
            0,
            pvc_volume,
        ),
        col(
            "Capacity",
            "string",
            "",
            "capacity represents the actual resources of the underlying volume.",
            0,
            pvc_capacity,
        ),
        col(
            "Access Modes",
            "string",
            "",
            "accessModes contains the actual access modes the volume backing the PVC has.",
            0,
            pvc_access_modes,
        ),
        col(
            "StorageClass",
            "string",
            "",
            "StorageClass of the pvc",
            0,
            storage_class,
        ),
        col(
            "VolumeAttributesClass",
            "string",
            "",
            "VolumeAttributesClass of the pvc",
            0,
            volume_attributes_class,
        ),
        c::AGE_COL,
        col(
            "VolumeMode",
            "string",
            "",
            "volumeMode defines what type of volume is required by the claim.",
            1,
            volume_mode_cell,
        ),
    ],
    decode: typed::<PersistentVolumeClaim>,
    defaults: pvc_defaults,
    validate: pvc_validation,
    validate_update: pvc_update_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;
