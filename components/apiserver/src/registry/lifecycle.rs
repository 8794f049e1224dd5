//! Object lifecycle rules shared by every kind: metadata defaults on create, immutable fields and the
//! status/spec split on update, generation, name validation. Pure functions over JSON; no I/O.

use rand::Rng;
use serde_json::{json, Value};

use super::dns_names::{is_label, is_subdomain, LABEL_MSG, SUBDOMAIN_MSG};
use super::ResourceSpec;
use crate::custom_resource::CustomResource;
use crate::status::{ApiError, Cause};

/// Which part of an object an update may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateScope {
    /// The main endpoint: everything but status (when the kind has a status subresource).
    Main,
    /// `<resource>/status`: only status.
    Status,
    /// Server-internal writes (pods/binding): spec and status together.
    All,
}

pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A random (version 4) UUID, as upstream's metadata.uid.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Five characters from upstream's generateName alphabet (no vowels, no confusable digits).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

pub fn validate_name(spec: &ResourceSpec, name: &str) -> Option<Cause> {
    if spec.name_is_path_segment {
        // Upstream's ValidatePathSegmentName.
        let msg = if name == "." || name == ".." {
            format!("may not be '{name}'")
        } else if name.contains('/') || name.contains('%') {
            format!(
                "may not contain '{}'",
                if name.contains('/') { "/" } else { "%" }
            )
        } else {
            return None;
        };
        return Some(Cause::invalid("metadata.name", &json!(name), &msg));
    }
    let ok = if spec.name_is_label {
        is_label(name)
    } else {
        is_subdomain(name)
    };
    (!ok).then(|| {
        Cause::invalid(
            "metadata.name",
            &json!(name),
            if spec.name_is_label {
                LABEL_MSG
            } else {
                SUBDOMAIN_MSG
            },
        )
    })
}

pub fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

/// Checks apiVersion/kind of a request body (filling them in when absent) and the namespace against
/// the URL, as upstream's decoding and `rest.BeforeCreate` do.
pub fn check_identity(
    spec: &ResourceSpec,
    namespace: Option<&str>,
    obj: &mut Value,
) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    let api_version = spec.api_version();
    match obj["apiVersion"].as_str() {
        None | Some("") => obj["apiVersion"] = json!(api_version),
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )))
        }
    }
    match obj["kind"].as_str() {
        None | Some("") => obj["kind"] = json!(spec.kind),
        Some(k) if k == spec.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                spec.kind
            )))
        }
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if spec.namespaced {
        let url_ns = namespace.unwrap_or("");
        match obj["metadata"]["namespace"].as_str() {
            None | Some("") => obj["metadata"]["namespace"] = json!(url_ns),
            Some(ns) if ns == url_ns => {}
            Some(_) => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
        }
    } else if let Some(meta) = obj["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    Ok(())
}

/// `fieldValidation`: what to do with fields the kind's schema does not know and with keys a body
/// sets twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently (the typed decode does).
    Ignore,
    /// Drop them and tell the client in a `Warning` header each: upstream's default when the
    /// request does not say.
    Warn,
    /// Reject the request with 400, as `kubectl apply`'s default `--validate=strict` asks.
    Strict,
}

impl FieldValidation {
    pub fn from_query(value: Option<&str>) -> Self {
        match value {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        }
    }
}

/// Upstream's text for one unknown field (a `Warn` warning, or part of a `Strict` refusal).
pub fn unknown_field_message(path: &str) -> String {
    format!("unknown field \"{path}\"")
}

/// Upstream's text for one key set twice.
pub fn duplicate_field_message(path: &str) -> String {
    format!("duplicate field \"{path}\"")
}

/// The 400 a `Strict` request gets: every unknown field, then every duplicate, in one message.
pub fn strict_decoding_error(
    spec: &ResourceSpec,
    unknown: &[String],
    duplicates: &[String],
) -> ApiError {
    let list: Vec<String> = unknown
        .iter()
        .map(|f| unknown_field_message(f))
        .chain(duplicates.iter().map(|f| duplicate_field_message(f)))
        .collect();
    ApiError::bad_request(format!(
        "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
        list.join(", "),
        kind = spec.kind,
        v = spec.version
    ))
}

/// The fields of `obj` its kind does not know, as the create/update decode finds them (the typed
/// decode's dropped fields, or a custom resource's pruned ones).
pub fn unknown_fields_of(spec: &ResourceSpec, obj: &Value) -> Vec<String> {
    match spec.custom {
        Some(cr) => {
            let mut unknown = cr.prune(&mut obj.clone());
            unknown.sort();
            unknown
        }
        None => (spec.decode)(obj.clone())
            .map(|decoded| unknown_fields(obj, &decoded))
            .unwrap_or_default(),
    }
}

/// What `validation` does with the unknown fields a decode found: nothing, a warning each, or
/// the refusal.
fn handle_unknown(
    spec: &ResourceSpec,
    unknown: &[String],
    validation: FieldValidation,
) -> Result<(), ApiError> {
    match validation {
        FieldValidation::Ignore => Ok(()),
        FieldValidation::Warn => {
            unknown
                .iter()
                .for_each(|f| crate::warnings::add(&unknown_field_message(f)));
            Ok(())
        }
        FieldValidation::Strict if unknown.is_empty() => Ok(()),
        FieldValidation::Strict => Err(strict_decoding_error(spec, unknown, &[])),
    }
}

/// Paths set in `input` that the typed decode dropped: fields the kind's schema does not know.
pub fn unknown_fields(input: &Value, decoded: &Value) -> Vec<String> {
    fn walk(input: &Value, decoded: &Value, path: &str, out: &mut Vec<String>) {
        match (input, decoded) {
            (Value::Object(i), Value::Object(d)) => {
                for (k, v) in i {
                    if v.is_null() {
                        continue;
                    }
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    match d.get(k) {
                        None => out.push(p),
                        Some(dv) => walk(v, dv, &p, out),
                    }
                }
            }
            (Value::Array(i), Value::Array(d)) => {
                for (n, (iv, dv)) in i.iter().zip(d).enumerate() {
                    walk(iv, dv, &format!("{path}[{n}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(input, decoded, "", &mut out);
    out
}

fn decode(spec: &ResourceSpec, obj: Value, validation: FieldValidation) -> Result<Value, ApiError> {
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: {why}",
            kind = spec.kind,
            v = spec.version
        ))
    };
    let decoded = (spec.decode)(obj.clone()).map_err(cannot)?;
    if validation != FieldValidation::Ignore {
        handle_unknown(spec, &unknown_fields(&obj, &decoded), validation)?;
    }
    Ok(decoded)
}

/// A custom resource's decode: unknown fields pruned (refused under Strict), then schema defaults.
fn decode_custom(
    spec: &ResourceSpec,
    cr: &CustomResource,
    mut obj: Value,
    validation: FieldValidation,
) -> Result<Value, ApiError> {
    let mut unknown = cr.prune(&mut obj);
    unknown.sort();
    handle_unknown(spec, &unknown, validation)?;
    cr.apply_defaults(&mut obj);
    Ok(obj)
}

/// Schema and CEL rules of a custom resource (`old`: the stored object, for transition rules).
fn validate_custom(spec: &ResourceSpec, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let Some(cr) = spec.custom else {
        return Ok(());
    };
    let causes = cr.validate(obj, old);
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        spec.group,
        spec.kind,
        name_of(obj),
        causes,
    ))
}

/// Whether an update changes what metadata.generation counts: the spec for built-in kinds;
/// everything but metadata (and status, with a status subresource) for custom resources.
fn generation_changed(spec: &ResourceSpec, old: &Value, new: &Value) -> bool {
    if spec.custom.is_none() {
        return new.get("spec") != old.get("spec");
    }
    let content = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            if spec.status_subresource {
                m.remove("status");
            }
        }
        v
    };
    content(old) != content(new)
}

fn validate(spec: &ResourceSpec, obj: &Value, creating: bool) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if let Some(c) = validate_name(spec, name_of(obj)) {
        causes.push(c);
    }
    causes.extend((spec.validate)(obj));
    if creating {
        causes.extend((spec.validate_create)(obj));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            spec.group,
            spec.kind,
            name_of(obj),
            causes,
        ))
    }
}

/// Everything `create` does to a request body before it is stored.
pub fn prepare_create(
    spec: &ResourceSpec,
    namespace: Option<&str>,
    mut obj: Value,
    validation: FieldValidation,
) -> Result<Value, ApiError> {
    check_identity(spec, namespace, &mut obj)?;
    let meta = &mut obj["metadata"];
    if meta["name"].as_str().unwrap_or("").is_empty() {
        match meta["generateName"].as_str() {
            Some(prefix) if !prefix.is_empty() => {
                meta["name"] = json!(format!("{prefix}{}", name_suffix()))
            }
            _ => {
                return Err(ApiError::invalid(
                    spec.group,
                    spec.kind,
                    "",
                    vec![Cause::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ))
            }
        }
    }
    if let Some(m) = meta.as_object_mut() {
        for server_owned in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            m.remove(server_owned);
        }
    }
    meta["uid"] = json!(new_uid());
    meta["creationTimestamp"] = json!(now_rfc3339());
    if spec.generation {
        meta["generation"] = json!(1);
    }
    if spec.status_subresource && spec.custom.is_some() {
        // A custom resource's status is written only through /status: upstream drops it on
        // create rather than setting a zero value (a schema need not declare one).
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    } else if spec.status_subresource && obj.get("status").is_none_or(Value::is_null) {
        // Upstream's strategies reset status on create to the kind's zero value, which Go always
        // serializes (`status: {}`): clients read `resp.status` right after create.
        obj["status"] = json!({});
    }
    (spec.defaults)(&mut obj);
    let obj = match spec.custom {
        Some(cr) if cr.terminating => {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "create not allowed while custom resource definition is terminating".into(),
                Some(json!({})),
            ))
        }
        Some(cr) => decode_custom(spec, cr, obj, validation)?,
        None => decode(spec, obj, validation)?,
    };
    validate(spec, &obj, true)?;
    validate_custom(spec, &obj, None)?;
    Ok(obj)
}

/// Metadata fields only the server sets; an update keeps the stored values.
const IMMUTABLE_META: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
];

/// Everything `update` / `patch` do to the new object, given the stored one.
pub fn prepare_update(
    spec: &ResourceSpec,
    scope: UpdateScope,
    namespace: Option<&str>,
    old: &Value,
    mut new: Value,
    validation: FieldValidation,
) -> Result<Value, ApiError> {
    check_identity(spec, namespace, &mut new)?;
    let name = name_of(old).to_string();
    if name_of(&new) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            name_of(&new)
        )));
    }
    for field in IMMUTABLE_META {
        match old["metadata"].get(*field) {
            Some(v) => new["metadata"][*field] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(*field);
                }
            }
        }
    }
    match scope {
        UpdateScope::Status => {
            // Only status changes through /status; metadata and spec stay as stored.
            let status = new.get("status").cloned();
            new["spec"] = old.get("spec").cloned().unwrap_or(Value::Null);
            if !spec.status_takes_metadata {
                new["metadata"] = old["metadata"].clone();
            }
            match status {
                Some(s) => new["status"] = s,
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        UpdateScope::Main if spec.status_subresource => match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        },
        UpdateScope::Main | UpdateScope::All => {}
    }
    if let Some(o) = new.as_object_mut() {
        if o.get("spec").is_some_and(Value::is_null) {
            o.remove("spec");
        }
    }
    if scope != UpdateScope::Status {
        // Defaults apply on every write, so an update that omits a defaulted field keeps it.
        (spec.defaults)(&mut new);
    }
    let mut new = match spec.custom {
        Some(cr) => decode_custom(spec, cr, new, validation)?,
        None => decode(spec, new, validation)?,
    };
    // Compared after decoding, so representation differences are not spec changes.
    // Server-internal writes (a pod's binding) leave the generation alone, as upstream's binding
    // writes storage without the update strategy that bumps it.
    if spec.generation && scope == UpdateScope::Main && generation_changed(spec, old, &new) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(generation);
    }
    validate(spec, &new, false)?;
    validate_custom(spec, &new, Some(old))?;
    let causes = (spec.validate_update)(old, &new);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            spec.group,
            spec.kind,
            name_of(&new),
            causes,
        ));
    }
    Ok(new)
}

/// Two objects equal apart from resourceVersion (a no-op update is not written, as upstream).
pub fn same_object(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}

/// The bytes stored in etcd: the object without resourceVersion (the key's revision is the truth).
pub fn to_stored(obj: &Value) -> Vec<u8> {
    let mut v = obj.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// A stored value as served: JSON with `metadata.resourceVersion` set from the key's revision.
pub fn from_stored(bytes: &[u8], revision: i64) -> Result<Value, ApiError> {
    let mut v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::internal(format!("stored object is not JSON: {e}")))?;
    v["metadata"]["resourceVersion"] = json!(revision.to_string());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::{NAMESPACES, NODES, PODS};

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}})
    }

    #[test]
    fn create_sets_server_metadata() {
        let p =
            prepare_create(&PODS, Some("default"), pod("web"), FieldValidation::Strict).unwrap();
        assert_eq!(p["metadata"]["namespace"], "default");
        assert_eq!(p["metadata"]["generation"], 1);
        assert_eq!(p["metadata"]["uid"].as_str().unwrap().len(), 36);
        assert!(p["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z'));
        assert_eq!(p["status"]["phase"], "Pending");
    }

    #[test]
    fn created_objects_with_a_status_subresource_always_carry_status() {
        use crate::registry::apps::DEPLOYMENTS;
        use crate::registry::services::SERVICES;
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                         "spec": {"ports": [{"port": 80}]}});
        let s = prepare_create(&SERVICES, Some("default"), svc, FieldValidation::Strict).unwrap();
        assert_eq!(s["status"], json!({"loadBalancer": {}}));
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                       "spec": {"selector": {"matchLabels": {"a": "b"}},
                                "template": {"metadata": {"labels": {"a": "b"}},
                                             "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let d = prepare_create(&DEPLOYMENTS, Some("default"), d, FieldValidation::Strict).unwrap();
        assert_eq!(d["status"], json!({}));
    }

    #[test]
    fn create_rejects_bad_names_and_namespace_mismatch() {
        let e = prepare_create(&PODS, Some("default"), pod("Web"), FieldValidation::Strict)
            .unwrap_err();
        assert_eq!(e.code, 422);
        let mut p = pod("web");
        p["metadata"]["namespace"] = json!("other");
        assert_eq!(
            prepare_create(&PODS, Some("default"), p, FieldValidation::Strict)
                .unwrap_err()
                .code,
            400
        );
        let ns = json!({"metadata": {"name": "a.b"}});
        assert_eq!(
            prepare_create(&NAMESPACES, None, ns, FieldValidation::Strict)
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn generate_name_fills_name() {
        let p = json!({"metadata": {"generateName": "web-"},
                       "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let p = prepare_create(&PODS, Some("default"), p, FieldValidation::Strict).unwrap();
        assert_eq!(name_of(&p).len(), "web-".len() + 5);
    }

    #[test]
    fn main_update_keeps_status_and_bumps_generation() {
        let mut old =
            prepare_create(&PODS, Some("default"), pod("web"), FieldValidation::Strict).unwrap();
        old["status"]["phase"] = json!("Running");
        let mut new = old.clone();
        new["status"]["phase"] = json!("Failed");
        new["spec"]["containers"][0]["image"] = json!("busybox:2");
        let out = prepare_update(
            &PODS,
            UpdateScope::Main,
            Some("default"),
            &old,
            new,
            FieldValidation::Strict,
        )
        .unwrap();
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["metadata"]["generation"], 2);
    }

    #[test]
    fn unchanged_spec_keeps_generation() {
        let old =
            prepare_create(&PODS, Some("default"), pod("web"), FieldValidation::Strict).unwrap();
        let mut new = pod("web");
        new["metadata"]["labels"] = json!({"a": "b"});
        let out = prepare_update(
            &PODS,
            UpdateScope::Main,
            Some("default"),
            &old,
            new,
            FieldValidation::Strict,
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["generation"],
            1,
            "{}",
            serde_json::to_string_pretty(&(&old["spec"], &out["spec"])).unwrap()
        );
    }

    #[test]
    fn status_update_changes_only_status() {
        let old = prepare_create(
            &NODES,
            None,
            json!({"metadata": {"name": "n1"}}),
            FieldValidation::Strict,
        )
        .unwrap();
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"x": "y"});
        new["status"] = json!({"phase": "Running"});
        let out = prepare_update(
            &NODES,
            UpdateScope::Status,
            None,
            &old,
            new,
            FieldValidation::Strict,
        )
        .unwrap();
        assert_eq!(out["status"]["phase"], "Running");
        assert!(out["metadata"]["labels"].is_null());
    }

    #[test]
    fn strict_validation_names_unknown_fields() {
        let mut p = pod("web");
        p["spec"]["containers"][0]["imagee"] = json!("typo");
        p["spec"]["bogus"] = json!(1);
        let e =
            prepare_create(&PODS, Some("default"), p.clone(), FieldValidation::Strict).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.bogus\", unknown field \"spec.containers[0].imagee\""
        );
        let ok = prepare_create(&PODS, Some("default"), p, FieldValidation::Ignore).unwrap();
        assert!(ok["spec"].get("bogus").is_none());
    }

    #[test]
    fn field_validation_defaults_to_warn_as_upstream() {
        assert_eq!(FieldValidation::from_query(None), FieldValidation::Warn);
        assert_eq!(
            FieldValidation::from_query(Some("Warn")),
            FieldValidation::Warn
        );
        assert_eq!(
            FieldValidation::from_query(Some("Ignore")),
            FieldValidation::Ignore
        );
        assert_eq!(
            FieldValidation::from_query(Some("Strict")),
            FieldValidation::Strict
        );
        // Warn keeps the request going and drops the field, as Ignore does.
        let mut p = pod("web");
        p["spec"]["bogus"] = json!(1);
        let ok = prepare_create(&PODS, Some("default"), p, FieldValidation::Warn).unwrap();
        assert!(ok["spec"].get("bogus").is_none());
    }

    #[test]
    fn defaults_and_maps_are_not_unknown() {
        let mut p = pod("web");
        p["metadata"]["labels"] = json!({"a": "b"});
        p["spec"]["nodeSelector"] = json!({"x": "y"});
        p["spec"]["volumes"] = json!([{"name": "v", "emptyDir": {}}]);
        prepare_create(&PODS, Some("default"), p, FieldValidation::Strict).unwrap();
    }
}
