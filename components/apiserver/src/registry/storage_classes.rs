//! storage.k8s.io/v1: StorageClass, CSIDriver, CSINode, VolumeAttachment and CSIStorageCapacity,
//! with upstream's defaults (pkg/apis/storage/v1/defaults.go), validation and update rules
//! (pkg/apis/storage/validation) and kubectl's columns (printStorageClass, printCSIDriver, ...).

use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment,
};
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::policy::validation::{label_selector, qualified_name_errors, subdomain_errors};
use super::storage_quantity::{self as quantity, Milli};
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

pub const GROUP: &str = "storage.k8s.io";
/// The annotation that makes a class the default (and its beta spelling, still honoured).
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
pub const BETA_DEFAULT_CLASS_ANNOTATION: &str = "storageclass.beta.kubernetes.io/is-default-class";

const SC_RECLAIM_POLICIES: &[&str] = &["Delete", "Retain"];
const BINDING_MODES: &[&str] = &["Immediate", "WaitForFirstConsumer"];
const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
const MAX_PARAMETERS: usize = 512;
const MAX_PARAMETERS_SIZE: usize = 256 * 1024;

/// storageutil.IsDefaultAnnotation.
pub fn is_default_class(obj: &Value) -> bool {
    let a = &obj["metadata"]["annotations"];
    a[DEFAULT_CLASS_ANNOTATION] == "true" || a[BETA_DEFAULT_CLASS_ANNOTATION] == "true"
}

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if obj.is_object() && obj[key].is_null() {
        obj[key] = value;
    }
}

pub fn storage_class_defaults(obj: &mut Value) {
    set_default(obj, "reclaimPolicy", json!("Delete"));
    set_default(obj, "volumeBindingMode", json!("Immediate"));
}

pub fn storage_class_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let provisioner = obj["provisioner"].as_str().unwrap_or("");
    if provisioner.is_empty() {
        causes.push(Cause::required("provisioner", ""));
    } else {
        for msg in qualified_name_errors(&provisioner.to_lowercase()) {
            causes.push(Cause::invalid("provisioner", &json!(provisioner), &msg));
        }
    }
    if let Some(params) = obj["parameters"].as_object() {
        if params.len() > MAX_PARAMETERS {
            causes.push(too_long("parameters", MAX_PARAMETERS));
        } else {
            let mut size = 0;
            for (k, v) in params {
                if k.is_empty() {
                    causes.push(Cause::invalid(
                        "parameters",
                        &json!(k),
                        "field can not be empty.",
                    ));
                }
                size += k.len() + v.as_str().map_or(0, str::len);
            }
            if size > MAX_PARAMETERS_SIZE {
                causes.push(too_long("parameters", MAX_PARAMETERS_SIZE));
            }
        }
    }
    if let Some(policy) = obj["reclaimPolicy"].as_str().filter(|p| !p.is_empty()) {
        if !SC_RECLAIM_POLICIES.contains(&policy) {
            causes.push(Cause::not_supported(
                "reclaimPolicy",
                policy,
                SC_RECLAIM_POLICIES,
            ));
        }
    }
    match obj["volumeBindingMode"].as_str() {
        None => causes.push(Cause::required("volumeBindingMode", "")),
        Some(m) if !BINDING_MODES.contains(&m) => {
            causes.push(Cause::not_supported("volumeBindingMode", m, BINDING_MODES))
        }
        Some(_) => {}
    }
    for (i, term) in obj["allowedTopologies"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("allowedTopologies[{i}].matchLabelExpressions");
        let exprs = term["matchLabelExpressions"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for (j, e) in exprs.iter().enumerate() {
            let key = e["key"].as_str().unwrap_or("");
            for msg in qualified_name_errors(key) {
                causes.push(Cause::invalid(&format!("{at}[{j}].key"), &json!(key), &msg));
            }
            if e["values"].as_array().is_none_or(Vec::is_empty) {
                causes.push(Cause::required(
                    &format!("{at}[{j}].values"),
                    "must specify as least one value",
                ));
            }
        }
    }
    causes
}

/// field.TooLong as the storage validators use it (no value shown).
fn too_long(field: &str, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooLong",
        message: format!("Too long: may not be more than {max} bytes"),
        field: field.to_string(),
    }
}

pub fn storage_class_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let params = |o: &Value| o["parameters"].as_object().cloned().unwrap_or_default();
    if params(old) != params(new) {
        causes.push(Cause::forbidden(
            "parameters",
            "updates to parameters are forbidden.",
        ));
    }
    if old["provisioner"] != new["provisioner"] {
        causes.push(Cause::forbidden(
            "provisioner",
            "updates to provisioner are forbidden.",
        ));
    }
    if old["reclaimPolicy"] != new["reclaimPolicy"] {
        causes.push(Cause::forbidden(
            "reclaimPolicy",
            "updates to reclaimPolicy are forbidden.",
        ));
    }
    if old["volumeBindingMode"] != new["volumeBindingMode"] {
        causes.push(Cause::invalid(
            "volumeBindingMode",
            &new["volumeBindingMode"],
            "field is immutable",
        ));
    }
    causes
}

pub fn csi_driver_defaults(obj: &mut Value) {
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    set_default(spec, "attachRequired", json!(true));
    set_default(spec, "podInfoOnMount", json!(false));
    set_default(spec, "storageCapacity", json!(false));
    set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    set_default(spec, "requiresRepublish", json!(false));
    set_default(spec, "seLinuxMount", json!(false));
    if spec["volumeLifecycleModes"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        spec["volumeLifecycleModes"] = json!(["Persistent"]);
    }
}

pub fn csi_driver_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    // Upstream's path really says "attachedRequired".
    for (key, path) in [
        ("attachRequired", "spec.attachedRequired"),
        ("podInfoOnMount", "spec.podInfoOnMount"),
        ("storageCapacity", "spec.storageCapacity"),
        ("seLinuxMount", "spec.seLinuxMount"),
    ] {
        if spec[key].is_null() {
            causes.push(Cause::required(path, ""));
        }
    }
    if let Some(p) = spec["fsGroupPolicy"].as_str() {
        if !FS_GROUP_POLICIES.contains(&p) {
            causes.push(Cause::not_supported(
                "spec.fsGroupPolicy",
                p,
                FS_GROUP_POLICIES,
            ));
        }
    }
    let mut audiences = Vec::new();
    for (i, t) in spec["tokenRequests"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.tokenRequests[{i}]");
        let audience = t["audience"].as_str().unwrap_or("");
        if audiences.contains(&audience) {
            causes.push(Cause::duplicate(
                &format!("{at}.audience"),
                &json!(audience),
            ));
            continue;
        }
        audiences.push(audience);
        if let Some(secs) = t["expirationSeconds"].as_i64() {
            if secs < 600 {
                causes.push(Cause::invalid(
                    &format!("{at}.expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if secs > 1 << 32 {
                causes.push(Cause::invalid(
                    &format!("{at}.expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
        }
    }
    for mode in spec["volumeLifecycleModes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mode = mode.as_str().unwrap_or("");
        if mode != "Persistent" && mode != "Ephemeral" {
            causes.push(Cause::not_supported(
                "spec.volumeLifecycleModes",
                mode,
                &["Persistent", "Ephemeral"],
            ));
        }
    }
    if let Some(p) = spec["nodeAllocatableUpdatePeriodSeconds"].as_i64() {
        if p < 10 {
            causes.push(Cause::invalid(
                "spec.nodeAllocatableUpdatePeriodSeconds",
                &json!(p),
                "must be greater than or equal to 10 seconds",
            ));
        }
    }
    causes
}

pub fn csi_driver_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let (o, n) = (&old["spec"], &new["spec"]);
    let mut causes = Vec::new();
    for (key, path) in [
        ("attachRequired", "spec.attachedRequired"),
        ("volumeLifecycleModes", "spec.volumeLifecycleModes"),
    ] {
        if o[key] != n[key] {
            let shown = match &n[key] {
                Value::Array(modes) => {
                    let list: Vec<String> = modes.iter().map(|m| format!("{m}")).collect();
                    format!("[]storage.VolumeLifecycleMode{{{}}}", list.join(", "))
                }
                other => other.to_string(),
            };
            causes.push(Cause::invalid_raw(path, &shown, "field is immutable"));
        }
    }
    causes
}

pub fn csi_node_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut names = Vec::new();
    for (i, d) in obj["spec"]["drivers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.drivers[{i}]");
        let name = d["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{at}.name"), ""));
        } else if names.contains(&name) {
            causes.push(Cause::duplicate(&format!("{at}.name"), &json!(name)));
        }
        names.push(name);
        let node_id = d["nodeID"].as_str().unwrap_or("");
        if node_id.is_empty() {
            causes.push(Cause::required(&format!("{at}.nodeID"), ""));
        } else if node_id.len() > 192 {
            causes.push(Cause::invalid(
                &format!("{at}.nodeID"),
                &json!(node_id),
                "must be 192 characters or less",
            ));
        }
        if let Some(count) = d["allocatable"]["count"].as_i64().filter(|c| *c < 0) {
            causes.push(Cause::invalid(
                &format!("{at}.allocatable.count"),
                &json!(count),
                "must be greater than or equal to 0",
            ));
        }
    }
    causes
}

/// ValidateCSINodeUpdate: an existing driver entry keeps everything but its allocatable count.
pub fn csi_node_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let strip = |d: &Value| {
        let mut d = d.clone();
        if let Some(m) = d.as_object_mut() {
            m.remove("allocatable");
        }
        d
    };
    let mut causes = Vec::new();
    for od in old["spec"]["drivers"].as_array().into_iter().flatten() {
        for nd in new["spec"]["drivers"].as_array().into_iter().flatten() {
            if od["name"] == nd["name"] && strip(od) != strip(nd) {
                causes.push(Cause::invalid_raw(
                    "spec.drivers",
                    &format!("storage.CSINodeDriver{nd}"),
                    "field is immutable",
                ));
            }
        }
    }
    causes
}

pub fn volume_attachment_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    if spec["attacher"].as_str().unwrap_or("").is_empty() {
        causes.push(Cause::required("spec.attacher", ""));
    }
    let src = &spec["source"];
    let (inline, pv) = (&src["inlineVolumeSpec"], &src["persistentVolumeName"]);
    const ONE: &str = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";
    match (inline.is_null(), pv.as_str()) {
        (true, None) => causes.push(Cause::required("spec.source", ONE)),
        (false, Some(_)) => causes.push(Cause::forbidden("spec.source", ONE)),
        (true, Some("")) => causes.push(Cause::required(
            "spec.source.persistentVolumeName",
            "must specify non empty persistentVolumeName",
        )),
        (true, Some(name)) => {
            for msg in subdomain_errors(name) {
                causes.push(Cause::invalid(
                    "spec.source.persistentVolumeName",
                    &json!(name),
                    &msg,
                ));
            }
        }
        (false, None) => {}
    }
    let node = spec["nodeName"].as_str().unwrap_or("");
    for msg in subdomain_errors(node) {
        causes.push(Cause::invalid("spec.nodeName", &json!(node), &msg));
    }
    if let Some(code) = obj["status"]["attachError"]["errorCode"]
        .as_i64()
        .filter(|c| *c < 0)
    {
        causes.push(Cause::invalid(
            "status.attachError.errorCode",
            &json!(code),
            "must be between 0 and 2147483647, inclusive",
        ));
    }
    causes
}

pub fn volume_attachment_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    if old["spec"] != new["spec"] {
        return vec![Cause::invalid_raw(
            "spec",
            &format!("storage.VolumeAttachmentSpec{}", new["spec"]),
            "field is immutable",
        )];
    }
    Vec::new()
}

pub fn capacity_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = label_selector(&obj["nodeTopology"], "nodeTopology");
    let class = obj["storageClassName"].as_str().unwrap_or("");
    for msg in subdomain_errors(class) {
        causes.push(Cause::invalid("storageClassName", &json!(class), &msg));
    }
    if !obj["capacity"].is_null() && quantity::of(&obj["capacity"]).is_some_and(|q| q < Milli(0)) {
        causes.push(Cause::invalid_raw(
            "capacity",
            &quantity::text(&obj["capacity"]),
            "must be greater than or equal to 0",
        ));
    }
    causes
}

pub fn capacity_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if old["nodeTopology"] != new["nodeTopology"] {
        causes.push(Cause::invalid_raw(
            "nodeTopology",
            &format!("&v1.LabelSelector{}", new["nodeTopology"]),
            "field is immutable",
        ));
    }
    if old["storageClassName"] != new["storageClassName"] {
        causes.push(Cause::invalid(
            "storageClassName",
            &new["storageClassName"],
            "field is immutable",
        ));
    }
    causes
}

// ---- columns ----

fn sc_name(obj: &Value, _: i64) -> Value {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if is_default_class(obj) {
        json!(format!("{name} (default)"))
    } else {
        json!(name)
    }
}
fn sc_provisioner(obj: &Value, _: i64) -> Value {
    json!(obj["provisioner"].as_str().unwrap_or(""))
}
fn sc_reclaim(obj: &Value, _: i64) -> Value {
    json!(obj["reclaimPolicy"].as_str().unwrap_or("Delete"))
}
fn sc_binding(obj: &Value, _: i64) -> Value {
    json!(obj["volumeBindingMode"].as_str().unwrap_or("Immediate"))
}
fn sc_expansion(obj: &Value, _: i64) -> Value {
    json!(obj["allowVolumeExpansion"].as_bool().unwrap_or(false))
}

fn flag(obj: &Value, key: &str, default: bool) -> Value {
    json!(obj["spec"][key].as_bool().unwrap_or(default))
}
fn driver_attach(obj: &Value, _: i64) -> Value {
    flag(obj, "attachRequired", true)
}
fn driver_pod_info(obj: &Value, _: i64) -> Value {
    flag(obj, "podInfoOnMount", false)
}
fn driver_capacity(obj: &Value, _: i64) -> Value {
    flag(obj, "storageCapacity", false)
}
fn driver_republish(obj: &Value, _: i64) -> Value {
    flag(obj, "requiresRepublish", false)
}
fn driver_tokens(obj: &Value, _: i64) -> Value {
    match obj["spec"]["tokenRequests"].as_array() {
        None => json!("<unset>"),
        Some(l) => json!(l
            .iter()
            .map(|t| t["audience"].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")),
    }
}
fn driver_modes(obj: &Value, _: i64) -> Value {
    let modes: Vec<&str> = obj["spec"]["volumeLifecycleModes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if modes.is_empty() {
        json!("<none>")
    } else {
        json!(modes.join(","))
    }
}
fn node_drivers(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["drivers"].as_array().map_or(0, Vec::len))
}
fn va_attacher(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["attacher"].as_str().unwrap_or(""))
}
fn va_pv(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["source"]["persistentVolumeName"]
        .as_str()
        .unwrap_or(""))
}
fn va_node(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["nodeName"].as_str().unwrap_or(""))
}
fn va_attached(obj: &Value, _: i64) -> Value {
    json!(obj["status"]["attached"].as_bool().unwrap_or(false))
}
fn cap_class(obj: &Value, _: i64) -> Value {
    json!(obj["storageClassName"].as_str().unwrap_or(""))
}
fn cap_capacity(obj: &Value, _: i64) -> Value {
    if obj["capacity"].is_null() {
        json!("<unset>")
    } else {
        json!(quantity::text(&obj["capacity"]))
    }
}

pub static STORAGE_CLASSES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "storageclasses",
    singular: "storageclass",
    kind: "StorageClass",
    list_kind: "StorageClassList",
    namespaced: false,
    short_names: &["sc"],
    table: &[
        col("Name", "string", "name", "Name must be unique within a namespace.", 0, sc_name),
        col("Provisioner", "string", "", "provisioner indicates the type of the provisioner.", 0, sc_provisioner),
        col("ReclaimPolicy", "string", "", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.", 0, sc_reclaim),
        col("VolumeBindingMode", "string", "", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used.", 0, sc_binding),
        col("AllowVolumeExpansion", "string", "", "allowVolumeExpansion shows whether the storage class allow volume expand.", 0, sc_expansion),
        c::AGE_COL,
    ],
    decode: typed::<StorageClass>,
    defaults: storage_class_defaults,
    validate: storage_class_validation,
    validate_update: storage_class_update_validation,
    ..ResourceSpec::BASE
};

pub static CSI_DRIVERS: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "csidrivers",
    singular: "csidriver",
    kind: "CSIDriver",
    list_kind: "CSIDriverList",
    namespaced: false,
    table: &[
        c::NAME_COL,
        col("AttachRequired", "boolean", "", "attachRequired indicates this CSI volume driver requires an attach operation.", 0, driver_attach),
        col("PodInfoOnMount", "boolean", "", "podInfoOnMount indicates this CSI volume driver requires additional pod information during mount operations.", 0, driver_pod_info),
        col("StorageCapacity", "boolean", "", "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report.", 0, driver_capacity),
        col("TokenRequests", "string", "", "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication.", 0, driver_tokens),
        col("RequiresRepublish", "boolean", "", "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume.", 0, driver_republish),
        col("Modes", "string", "", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports.", 0, driver_modes),
        c::AGE_COL,
    ],
    decode: typed::<CSIDriver>,
    defaults: csi_driver_defaults,
    validate: csi_driver_validation,
    validate_update: csi_driver_update_validation,
    ..ResourceSpec::BASE
};

pub static CSI_NODES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "csinodes",
    singular: "csinode",
    kind: "CSINode",
    list_kind: "CSINodeList",
    namespaced: false,
    table: &[
        c::NAME_COL,
        col(
            "Drivers",
            "integer",
            "",
            "Drivers indicates the number of CSI drivers registered on the node",
            0,
            node_drivers,
        ),
        c::AGE_COL,
    ],
    decode: typed::<CSINode>,
    validate: csi_node_validation,
    validate_update: csi_node_update_validation,
    ..ResourceSpec::BASE
};

pub static VOLUME_ATTACHMENTS: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "volumeattachments",
    singular: "volumeattachment",
    kind: "VolumeAttachment",
    list_kind: "VolumeAttachmentList",
    namespaced: false,
    status_subresource: true,
    table: &[
        c::NAME_COL,
        col(
            "Attacher",
            "string",
            "name",
            "attacher indicates the name of the volume driver that MUST handle this request.",
            0,
            va_attacher,
        ),
        col(
            "PV",
            "string",
            "",
            "persistentVolumeName represents the name of the persistent volume to attach.",
            0,
            va_pv,
        ),
        col(
            "Node",
            "string",
            "",
            "nodeName represents the node that the volume should be attached to.",
            0,
            va_node,
        ),
        col(
            "Attached",
            "boolean",
            "",
            "attached indicates the volume is successfully attached.",
            0,
            va_attached,
        ),
        c::AGE_COL,
    ],
    decode: typed::<VolumeAttachment>,
    validate: volume_attachment_validation,
    validate_update: volume_attachment_update_validation,
    ..ResourceSpec::BASE
};

pub static CSI_STORAGE_CAPACITIES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "csistoragecapacities",
    singular: "csistoragecapacity",
    kind: "CSIStorageCapacity",
    list_kind: "CSIStorageCapacityList",
    table: &[
        c::NAME_COL,
        col("StorageClassName", "string", "", "storageClassName represents the name of the StorageClass that the reported capacity applies to.", 0, cap_class),
        col("Capacity", "string", "", "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.", 0, cap_capacity),
        c::AGE_COL,
    ],
    decode: typed::<CSIStorageCapacity>,
    validate: capacity_validation,
    validate_update: capacity_update_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
#[path = "storage_classes_tests.rs"]
mod tests;
