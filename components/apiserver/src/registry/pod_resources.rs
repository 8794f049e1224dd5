//! Containers' `resources` as upstream checks them (pkg/apis/core/validation's
//! ValidateResourceRequirements): a quantity that does not parse fails the decode (400, "… cannot be
//! handled as a Pod: quantities must match …", as upstream's JSON decoder refuses it); a negative one,
//! a fractional extended resource, an unknown unprefixed name, a request above its limit (or, for
//! resources that cannot be overcommitted, different from it) is a 422 naming the field, and nothing
//! is stored.

use serde_json::{json, Value};

use super::storage_quantity as quantity;
use crate::status::Cause;

/// What upstream's decoder answers for a quantity it cannot parse.
pub const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Unprefixed names a container may ask for (upstream's IsStandardContainerResourceName).
const CONTAINER_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage"];

/// Every container list of a pod spec (ephemeral containers may not ask for resources at all:
/// ephemeral_containers.rs refuses any).
const CONTAINER_LISTS: &[&str] = &["initContainers", "containers", "ephemeralContainers"];
const VALIDATED_LISTS: &[&str] = &["initContainers", "containers"];

/// The Pod decode: a resource quantity that does not parse is refused as upstream's decoder refuses
/// it, before anything else looks at the object.
pub fn decode_pod(value: Value) -> Result<Value, String> {
    if !quantities_parse(&value["spec"]) {
        return Err(QUANTITY_FORMAT.to_string());
    }
    super::strategy::typed::<k8s_openapi::api::core::v1::Pod>(value)
}

fn quantities_parse(spec: &Value) -> bool {
    CONTAINER_LISTS
        .iter()
        .flat_map(|list| spec[*list].as_array().into_iter().flatten())
        .flat_map(|c| ["limits", "requests"].map(|k| &c["resources"][k]))
        .flat_map(|list| list.as_object().into_iter().flatten())
        .all(|(_, q)| quantity::of(q).is_some())
}

/// `resources` of every container of `spec` (at `path`: `spec`, or a template's).
pub fn validation(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for list in VALIDATED_LISTS {
        for (i, ctr) in spec[*list].as_array().into_iter().flatten().enumerate() {
            causes.extend(requirements(
                &ctr["resources"],
                &format!("{path}.{list}[{i}].resources"),
            ));
        }
    }
    causes
}

/// Upstream's ValidateResourceRequirements for one container's `resources` at `at`.
fn requirements(resources: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let limits = &resources["limits"];
    for (name, q) in limits.as_object().into_iter().flatten() {
        causes.extend(value_causes(name, q, &format!("{at}.limits[{name}]")));
    }
    for (name, q) in resources["requests"].as_object().into_iter().flatten() {
        causes.extend(value_causes(name, q, &format!("{at}.requests[{name}]")));
        let reqs = format!("{at}.requests");
        let limit = &limits[name];
        match (quantity::of(q), quantity::of(limit)) {
            (Some(r), Some(l)) if r != l && !overcommit_allowed(name) => {
                causes.push(Cause::invalid(
                    &reqs,
                    q,
                    &format!("must be equal to {name} limit of {}", quantity::text(limit)),
                ))
            }
            (Some(r), Some(l)) if r > l => causes.push(Cause::invalid(
                &reqs,
                q,
                &format!(
                    "must be less than or equal to {name} limit of {}",
                    quantity::text(limit)
                ),
            )),
            (Some(_), None) if limit.is_null() && !overcommit_allowed(name) => {
                causes.push(Cause::required(
                    &format!("{at}.limits"),
                    "Limit must be set for non overcommitable resources",
                ))
            }
            _ => {}
        }
    }
    causes
}

/// The name, sign and wholeness of one quantity (validateContainerResourceName and
/// ValidateResourceQuantityValue).
fn value_causes(name: &str, q: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !name.contains('/')
        && !CONTAINER_RESOURCES.contains(&name)
        && !name.starts_with("hugepages-")
    {
        causes.push(Cause::invalid(
            at,
            &json!(name),
            "must be a standard resource for containers",
        ));
    }
    let Some(v) = quantity::of(q) else {
        // decode_pod refused it already; a template's is reported here.
        causes.push(Cause::invalid(at, q, QUANTITY_FORMAT));
        return causes;
    };
    let canonical = || json!(quantity::format(v, quantity::is_binary(&quantity::text(q))));
    if v < quantity::Milli::ZERO {
        causes.push(Cause::invalid(
            at,
            &canonical(),
            "must be greater than or equal to 0",
        ));
    }
    if is_extended(name) && v.0 % 1000 != 0 {
        causes.push(Cause::invalid(at, &canonical(), "must be an integer"));
    }
    causes
}

/// A resource outside the kubernetes.io namespace: a device plugin's, counted in whole units.
fn is_extended(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, _)) => domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io"),
        None => false,
    }
}

/// Upstream's IsOvercommitAllowed: native resources but huge pages.
fn overcommit_allowed(name: &str) -> bool {
    !is_extended(name) && !name.starts_with("hugepages-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(resources: Value) -> Vec<String> {
        validation(
            &json!({"containers": [{"name": "c", "image": "i", "resources": resources}]}),
            "spec",
        )
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
    }

    #[test]
    fn negative_quantities_name_their_field() {
        assert_eq!(
            causes(json!({"limits": {"memory": "-32Mi"}})),
            ["spec.containers[0].resources.limits[memory]: Invalid value: \"-32Mi\": must be greater than or equal to 0"]
        );
        assert_eq!(
            causes(json!({"requests": {"cpu": "-100m"}})),
            ["spec.containers[0].resources.requests[cpu]: Invalid value: \"-100m\": must be greater than or equal to 0"]
        );
        assert!(causes(
            json!({"requests": {"cpu": "0", "memory": "1Gi"}, "limits": {"memory": "1Gi"}})
        )
        .is_empty());
    }

    #[test]
    fn requests_above_limits_and_extended_resources() {
        assert_eq!(
            causes(json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})),
            ["spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"]
        );
        assert_eq!(
            causes(json!({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "2"}})),
            ["spec.containers[0].resources.requests: Invalid value: \"1\": must be equal to example.com/gpu limit of 2"]
        );
        assert_eq!(
            causes(json!({"requests": {"example.com/gpu": "1"}})),
            ["spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"]
        );
        assert_eq!(
            causes(json!({"limits": {"example.com/gpu": "500m"}})),
            ["spec.containers[0].resources.limits[example.com/gpu]: Invalid value: \"500m\": must be an integer"]
        );
        assert_eq!(
            causes(json!({"limits": {"gpu": "1"}})),
            ["spec.containers[0].resources.limits[gpu]: Invalid value: \"gpu\": must be a standard resource for containers"]
        );
    }

    #[test]
    fn a_malformed_quantity_fails_the_decode() {
        let pod = |q: &str| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "i",
                    "resources": {"limits": {"memory": q}}}]}})
        };
        assert_eq!(decode_pod(pod("lots")).unwrap_err(), QUANTITY_FORMAT);
        assert_eq!(decode_pod(pod("1.2.3Mi")).unwrap_err(), QUANTITY_FORMAT);
        assert!(decode_pod(pod("32Mi")).is_ok());
        // A template is not decoded here: its validation names the field instead.
        assert_eq!(
            causes(json!({"limits": {"memory": "lots"}})),
            [format!("spec.containers[0].resources.limits[memory]: Invalid value: \"lots\": {QUANTITY_FORMAT}")]
        );
    }
}
