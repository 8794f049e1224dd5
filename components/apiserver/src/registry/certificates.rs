//! certificates.k8s.io/v1 certificatesigningrequests: the requester's identity is recorded by the
//! server at create (`records_requester`), status (the signed certificate) goes through /status, and
//! approval conditions through the `approval` subresource.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, Action, ResourceSpec, SelectableField};
use crate::status::Cause;

fn signer(obj: &Value, _: i64) -> Value {
    obj["spec"]["signerName"].clone()
}

fn requestor(obj: &Value, _: i64) -> Value {
    obj["spec"]["username"].clone()
}

fn requested_duration(obj: &Value, _: i64) -> Value {
    match obj["spec"]["expirationSeconds"].as_i64() {
        Some(s) => json!(c::human_duration(s)),
        None => json!("<none>"),
    }
}

/// Upstream's CONDITION column: `Approved,Issued`, `Pending`, `Denied`, ...
fn condition(obj: &Value, _: i64) -> Value {
    let mut parts: Vec<String> = obj["status"]["conditions"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|c| c["status"] != "False")
                .filter_map(|c| c["type"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if parts.is_empty() {
        parts.push("Pending".into());
    }
    if obj["status"]["certificate"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        parts.push("Issued".into());
    }
    json!(parts.join(","))
}

pub fn csr_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    if spec["request"].as_str().unwrap_or("").is_empty() {
        causes.push(Cause::required("spec.request", ""));
    }
    if spec["signerName"].as_str().unwrap_or("").is_empty() {
        causes.push(Cause::required("spec.signerName", ""));
    }
    if spec["usages"].as_array().is_none_or(|u| u.is_empty()) {
        causes.push(Cause::required("spec.usages", ""));
    }
    let types: Vec<&str> = obj["status"]["conditions"]
        .as_array()
        .map(|l| l.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default();
    if types.contains(&"Approved") && types.contains(&"Denied") {
        causes.push(Cause::invalid(
            "status.conditions",
            &json!("Approved"),
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    causes
}

pub static CERTIFICATE_SIGNING_REQUESTS: ResourceSpec = ResourceSpec {
    group: "certificates.k8s.io",
    plural: "certificatesigningrequests",
    singular: "certificatesigningrequest",
    kind: "CertificateSigningRequest",
    list_kind: "CertificateSigningRequestList",
    namespaced: false,
    short_names: &["csr"],
    status_subresource: true,
    table: &[
        c::NAME_COL,
        c::AGE_COL,
        col("SignerName", "string", "", "The signer", 0, signer),
        col(
            "Requestor",
            "string",
            "",
            "Name of the requesting user",
            0,
            requestor,
        ),
        col(
            "RequestedDuration",
            "string",
            "",
            "The requested duration",
            0,
            requested_duration,
        ),
        col(
            "Condition",
            "string",
            "",
            "Condition of the request",
            0,
            condition,
        ),
    ],
    fields: &[SelectableField {
        name: "spec.signerName",
        pointer: "/spec/signerName",
    }],
    decode: typed::<CertificateSigningRequest>,
    validate: csr_validation,
    actions: &[Action {
        name: "approval",
        group: "",
        version: "",
        kind: "CertificateSigningRequest",
        verbs: &["get", "patch", "update"],
    }],
    records_requester: true,
    // Upstream's CSR status and approval strategies keep spec only: labels and annotations
    // change through /status and /approval too.
    status_takes_metadata: true,
    ..ResourceSpec::BASE
};
