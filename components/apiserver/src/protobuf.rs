//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), which client-go's typed
//! clientsets send (e.g. `kubectl create namespace|configmap|secret`). The upstream
//! `generated.proto` schemas (vendored under `proto/`, from k8s.io/api and k8s.io/apimachinery
//! v0.33) drive a generic wire decoder that yields the same JSON the JSON path receives, so the
//! rest of the server stays JSON-only.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{json, Map, Value};

const PROTOS: &[&str] = &[
    include_str!("../proto/core_v1.proto"),
    include_str!("../proto/coordination_v1.proto"),
    include_str!("../proto/apps_v1.proto"),
    include_str!("../proto/batch_v1.proto"),
    include_str!("../proto/policy_v1.proto"),
    include_str!("../proto/storage_v1.proto"),
    include_str!("../proto/autoscaling_v1.proto"),
    include_str!("../proto/discovery_v1.proto"),
    include_str!("../proto/rbac_v1.proto"),
    include_str!("../proto/authorization_v1.proto"),
    include_str!("../proto/authentication_v1.proto"),
    include_str!("../proto/certificates_v1.proto"),
    include_str!("../proto/meta_v1.proto"),
    include_str!("../proto/runtime.proto"),
    include_str!("../proto/resource.proto"),
    include_str!("../proto/intstr.proto"),
];

/// `<message> <field>` of the scalar fields that are Go pointers upstream (see proto/README.md).
const NULLABLE_SCALARS: &str = include_str!("../proto/nullable_scalars.txt");

/// The envelope's magic prefix: "k8s" and a zero byte.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProtoError {
    #[error("protobuf body lacks the k8s envelope")]
    NoEnvelope,
    #[error("truncated or malformed protobuf")]
    Malformed,
    #[error("no protobuf schema for {0}")]
    UnknownType(String),
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    /// Fully qualified message name, or a scalar type name.
    ty: String,
    repeated: bool,
    /// `map<K, V>`: the key and value types.
    map: Option<(String, String)>,
}

type Schema = HashMap<String, HashMap<u32, Field>>;

fn qualify(package: &str, ty: &str) -> String {
    const SCALARS: &[&str] = &[
        "string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float",
    ];
    if SCALARS.contains(&ty) || ty.contains('.') {
        ty.trim_start_matches('.').to_string()
    } else {
        format!("{package}.{ty}")
    }
}

/// Parses the subset of proto2 the generated files use: flat messages with optional, repeated and
/// map fields.
fn parse(schema: &mut Schema, text: &str) {
    let mut package = String::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        if let Some(p) = line.strip_prefix("package ") {
            package = p.trim_end_matches(';').trim().to_string();
        } else if let Some(m) = line.strip_prefix("message ") {
            let name = m.trim_end_matches('{').trim();
            current = Some(format!("{package}.{name}"));
        } else if line == "}" {
            current = None;
        } else if let Some(msg) = &current {
            let Some((decl, number)) = line.trim_end_matches(';').split_once('=') else {
                continue;
            };
            let Ok(number) = number.trim().parse::<u32>() else {
                continue;
            };
            let parts: Vec<&str> = decl.split_whitespace().collect();
            let field = if let Some(rest) = decl.trim().strip_prefix("map<") {
                let (types, name) = rest.split_once('>').unwrap_or(("", ""));
                let (k, v) = types.split_once(',').unwrap_or(("", ""));
                Field {
                    name: name.trim().to_string(),
                    ty: String::new(),
                    repeated: true,
                    map: Some((qualify(&package, k.trim()), qualify(&package, v.trim()))),
                }
            } else if let [label, ty, name] = parts.as_slice() {
                Field {
                    name: name.to_string(),
                    ty: qualify(&package, ty),
                    repeated: *label == "repeated",
                    map: None,
                }
            } else {
                continue;
            };
            schema.entry(msg.clone()).or_default().insert(number, field);
        }
    }
}

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut s = Schema::new();
        for text in PROTOS {
            parse(&mut s, text);
        }
        s
    })
}

/// Message name to its pointer-typed scalar fields.
fn nullable_scalars() -> &'static HashMap<&'static str, Vec<&'static str>> {
    static NULLABLE: OnceLock<HashMap<&'static str, Vec<&'static str>>> = OnceLock::new();
    NULLABLE.get_or_init(|| {
        let mut out: HashMap<&str, Vec<&str>> = HashMap::new();
        for line in NULLABLE_SCALARS.lines() {
            if let Some((message, field)) = line.split_once(' ').filter(|_| !line.starts_with('#'))
            {
                out.entry(message).or_default().push(field.trim());
            }
        }
        out
    })
}

/// One raw field from the wire.
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, ProtoError> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or(ProtoError::Malformed)?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err(ProtoError::Malformed)
}

fn fields(buf: &[u8]) -> Result<Vec<(u32, Wire<'_>)>, ProtoError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let tag = varint(buf, &mut pos)?;
        let number = u32::try_from(tag >> 3).map_err(|_| ProtoError::Malformed)?;
        let take = |pos: &mut usize, n: usize| -> Result<&[u8], ProtoError> {
            let s = buf.get(*pos..*pos + n).ok_or(ProtoError::Malformed)?;
            *pos += n;
            Ok(s)
        };
        let wire = match tag & 7 {
            0 => Wire::Varint(varint(buf, &mut pos)?),
            1 => Wire::Fixed64(u64::from_le_bytes(
                take(&mut pos, 8)?
                    .try_into()
                    .map_err(|_| ProtoError::Malformed)?,
            )),
            2 => {
                let n =
                    usize::try_from(varint(buf, &mut pos)?).map_err(|_| ProtoError::Malformed)?;
                Wire::Bytes(take(&mut pos, n)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(
                take(&mut pos, 4)?
                    .try_into()
                    .map_err(|_| ProtoError::Malformed)?,
            )),
            _ => return Err(ProtoError::Malformed),
        };
        out.push((number, wire));
    }
    Ok(out)
}

fn rfc3339(seconds: i64, nanos: i64, micro: bool) -> Value {
    let Ok(t) = time::OffsetDateTime::from_unix_timestamp(seconds) else {
        return Value::Null;
    };
    let base = t
        .format(&time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]"
        ))
        .unwrap_or_default();
    if micro {
        json!(format!("{base}.{:06}Z", nanos / 1000))
    } else {
        json!(format!("{base}Z"))
    }
}

/// Messages whose JSON form is not an object of their fields.
fn special(ty: &str, obj: &Map<String, Value>) -> Option<Value> {
    let int = |k: &str| obj.get(k).and_then(Value::as_i64).unwrap_or(0);
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some(match ty.strip_prefix("k8s.io.apimachinery.pkg.")? {
        "apis.meta.v1.Time" | "apis.meta.v1.MicroTime" => {
            if int("seconds") == 0 && int("nanos") == 0 {
                return Some(Value::Null);
            }
            rfc3339(int("seconds"), int("nanos"), ty.ends_with("MicroTime"))
        }
        "apis.meta.v1.Duration" => json!(format!("{}s", int("duration") / 1_000_000_000)),
        "api.resource.Quantity" | "api.resource.QuantityValue" => json!(text("string")),
        "util.intstr.IntOrString" => {
            if int("type") == 1 {
                json!(text("strVal"))
            } else {
                json!(int("intVal"))
            }
        }
        "runtime.RawExtension" | "apis.meta.v1.FieldsV1" => {
            let bytes = obj.get("raw").or_else(|| obj.get("Raw"))?.as_str()?;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(bytes)
                .ok()?;
            serde_json::from_slice(&decoded).unwrap_or(Value::Null)
        }
        _ => return None,
    })
}

/// Zero scalars stand for Go's omitted `omitempty` fields: gogo-protobuf writes every non-pointer
/// field, JSON clients would have sent nothing.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn scalar(ty: &str, wire: &Wire<'_>) -> Result<Value, ProtoError> {
    Ok(match (ty, wire) {
        ("string", Wire::Bytes(b)) => json!(String::from_utf8_lossy(b)),
        ("bytes", Wire::Bytes(b)) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        ("bool", Wire::Varint(v)) => json!(*v != 0),
        ("int32", Wire::Varint(v)) => json!(*v as i32),
        ("int64", Wire::Varint(v)) => json!(*v as i64),
        ("uint32" | "uint64", Wire::Varint(v)) => json!(*v),
        ("double", Wire::Fixed64(v)) => json!(f64::from_bits(*v)),
        ("float", Wire::Fixed32(v)) => json!(f32::from_bits(*v)),
        _ => return Err(ProtoError::Malformed),
    })
}

fn value(ty: &str, wire: &Wire<'_>) -> Result<Value, ProtoError> {
    if !ty.contains('.') {
        return scalar(ty, wire);
    }
    match wire {
        Wire::Bytes(b) => message(ty, b),
        _ => Err(ProtoError::Malformed),
    }
}

/// Decodes one message of type `ty` into its JSON form.
pub fn message(ty: &str, buf: &[u8]) -> Result<Value, ProtoError> {
    let defs = schema()
        .get(ty)
        .ok_or_else(|| ProtoError::UnknownType(ty.to_string()))?;
    let mut obj = Map::new();
    for (number, wire) in fields(buf)? {
        let Some(field) = defs.get(&number) else {
            continue; // a field newer than our schema: ignored, like an unknown JSON field
        };
        if let Some((kt, vt)) = &field.map {
            let Wire::Bytes(entry) = wire else {
                return Err(ProtoError::Malformed);
            };
            let (mut k, mut v) = (Value::Null, Value::Null);
            for (n, w) in fields(entry)? {
                match n {
                    1 => k = value(kt, &w)?,
                    2 => v = value(vt, &w)?,
                    _ => {}
                }
            }
            let key = k
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| k.to_string());
            let map = obj
                .entry(field.name.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = map {
                m.insert(key, if v.is_null() { json!("") } else { v });
            }
            continue;
        }
        let decoded: Vec<Value> = match (
            &wire,
            field.ty.contains('.') || field.ty == "string" || field.ty == "bytes",
        ) {
            // Packed repeated scalars.
            (Wire::Bytes(b), false) => {
                let mut pos = 0;
                let mut out = Vec::new();
                while pos < b.len() {
                    out.push(scalar(&field.ty, &Wire::Varint(varint(b, &mut pos)?))?);
                }
                out
            }
            _ => vec![value(&field.ty, &wire)?],
        };
        if field.repeated {
            let list = obj
                .entry(field.name.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = list {
                a.extend(decoded);
            }
        } else if let Some(v) = decoded.into_iter().last() {
            obj.insert(field.name.clone(), v);
        }
    }
    if let Some(v) = special(ty, &obj) {
        return Ok(v);
    }
    if ty.ends_with(".ExtraValue") {
        // authentication/authorization/certificates ExtraValue is a plain []string in JSON.
        return Ok(obj.remove("items").unwrap_or_else(|| json!([])));
    }
    // A pointer field is on the wire only when it was set, so its zero is an explicit value
    // (`attachRequired: false`), kept as the JSON path would keep it.
    let nullable = nullable_scalars().get(ty);
    obj.retain(|k, v| !is_zero(v) || nullable.is_some_and(|f| f.contains(&k.as_str())));
    Ok(Value::Object(obj))
}

/// The proto package of an API group/version: `k8s.io.api.<first label of group or core>.<version>`.
pub fn package(group: &str, version: &str) -> String {
    let short = group
        .split('.')
        .next()
        .filter(|g| !g.is_empty())
        .unwrap_or("core");
    format!("k8s.io.api.{short}.{version}")
}

/// A whole request body: the `k8s\0` envelope around a `runtime.Unknown`.
pub fn decode_body(body: &[u8]) -> Result<Value, ProtoError> {
    let inner = body.strip_prefix(MAGIC).ok_or(ProtoError::NoEnvelope)?;
    let unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown", inner)?;
    let api_version = unknown["typeMeta"]["apiVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let kind = unknown["typeMeta"]["kind"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let raw = unknown["raw"].as_str().unwrap_or("");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|_| ProtoError::Malformed)?;
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version.as_str()),
    };
    // Options objects (DeleteOptions, ...) live in meta/v1 whatever version they are sent as.
    let ty = if kind.ends_with("Options") {
        format!("k8s.io.apimachinery.pkg.apis.meta.v1.{kind}")
    } else {
        format!("{}.{kind}", package(group, version))
    };
    let mut obj = message(&ty, &raw)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(n: u32, wire: u8) -> u8 {
        ((n << 3) as u8) | wire
    }

    fn bytes_field(n: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![tag(n, 2), payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    /// `k8s\0` + Unknown{typeMeta{apiVersion, kind}, raw}.
    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = bytes_field(1, api_version.as_bytes());
        tm.extend(bytes_field(2, kind.as_bytes()));
        let mut unknown = bytes_field(1, &tm);
        unknown.extend(bytes_field(2, raw));
        let mut out = MAGIC.to_vec();
        out.extend(unknown);
        out
    }

    #[test]
    fn schema_knows_the_served_kinds() {
        for ty in [
            "k8s.io.api.core.v1.Pod",
            "k8s.io.api.core.v1.Namespace",
            "k8s.io.api.coordination.v1.Lease",
            "k8s.io.api.batch.v1.Job",
            "k8s.io.api.batch.v1.CronJob",
            "k8s.io.api.storage.v1.StorageClass",
            "k8s.io.api.storage.v1.CSIDriver",
            "k8s.io.api.core.v1.PersistentVolumeClaim",
            "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        ] {
            assert!(schema().contains_key(ty), "{ty}");
        }
        let meta = &schema()["k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
        assert_eq!(meta[&1].name, "name");
        assert!(meta[&11].map.is_some(), "labels is a map");
    }

    #[test]
    fn decodes_a_configmap_like_kubectl_sends_it() {
        // ObjectMeta{name: "cm1", namespace: "" (zero, dropped), labels{a: b}}
        let mut meta = bytes_field(1, b"cm1");
        meta.extend(bytes_field(3, b""));
        let mut entry = bytes_field(1, b"a");
        entry.extend(bytes_field(2, b"b"));
        meta.extend(bytes_field(11, &entry));
        // ConfigMap{metadata: 1, data: 2 map}
        let mut cm = bytes_field(1, &meta);
        let mut data = bytes_field(1, b"k");
        data.extend(bytes_field(2, b"v"));
        cm.extend(bytes_field(2, &data));
        let v = decode_body(&envelope("v1", "ConfigMap", &cm)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm1", "labels": {"a": "b"}}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn special_types_render_like_json() {
        // Lease{spec{leaseDurationSeconds: 40, renewTime{seconds, nanos}}}
        let mut renew = vec![tag(1, 0)];
        renew.extend([0x80, 0xf2, 0xd6, 0xca, 0x06]); // 1767225600 = 2026-01-01T00:00:00Z
        let mut spec = vec![tag(2, 0), 40];
        spec.extend(bytes_field(4, &renew));
        let lease = bytes_field(2, &spec);
        let v = decode_body(&envelope("coordination.k8s.io/v1", "Lease", &lease)).unwrap();
        assert_eq!(v["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(v["spec"]["renewTime"], "2026-01-01T00:00:00.000000Z");
    }

    #[test]
    fn delete_options_decode_from_meta() {
        let opts = [tag(1, 0), 7]; // gracePeriodSeconds: 7
        let v = decode_body(&envelope("v1", "DeleteOptions", &opts)).unwrap();
        assert_eq!(v["gracePeriodSeconds"], 7);
    }

    #[test]
    fn explicit_zeros_of_pointer_fields_are_kept() {
        // CSIDriver{metadata{name: "d", namespace: "", generation: 0},
        //           spec{attachRequired: false, podInfoOnMount: true}}: the two metadata zeros
        // are Go value fields (always written), attachRequired is a *bool written because set.
        let mut meta = bytes_field(1, b"d");
        meta.extend(bytes_field(3, b""));
        meta.extend([tag(7, 0), 0]);
        let spec = [tag(1, 0), 0, tag(2, 0), 1];
        let mut driver = bytes_field(1, &meta);
        driver.extend(bytes_field(2, &spec));
        let v = decode_body(&envelope("storage.k8s.io/v1", "CSIDriver", &driver)).unwrap();
        assert_eq!(v["metadata"], json!({"name": "d"}));
        assert_eq!(
            v["spec"],
            json!({"attachRequired": false, "podInfoOnMount": true})
        );
        // `kubectl delete --grace-period=0`: DeleteOptions.gracePeriodSeconds is an *int64.
        let opts = [tag(1, 0), 0];
        let v = decode_body(&envelope("v1", "DeleteOptions", &opts)).unwrap();
        assert_eq!(v["gracePeriodSeconds"], 0);
    }

    #[test]
    fn nullable_list_names_fields_the_schema_has() {
        for line in NULLABLE_SCALARS.lines().filter(|l| !l.starts_with('#')) {
            let (message, field) = line.split_once(' ').unwrap();
            let declared = schema().get(message).is_some_and(|defs| {
                defs.values()
                    .any(|f| f.name == field && !f.ty.contains('.'))
            });
            assert!(declared, "{line} is not a scalar field of the schema");
        }
    }

    #[test]
    fn rejects_bodies_without_envelope() {
        assert_eq!(decode_body(b"{}"), Err(ProtoError::NoEnvelope));
        assert!(decode_body(b"k8s\0\x0a\xff").is_err());
    }
}
