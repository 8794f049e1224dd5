//! The OpenAPI v2 document in gnostic's protobuf form (`openapi.v2.Document`,
//! `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), the only encoding client-go's
//! v2 client asks for: kubectl 1.27 and 1.28 load it before `apply` (to find the
//! `fieldValidation` parameter) and `explain`. Encodes the subset kiln's JSON document uses;
//! vendor extensions, defaults and enums travel as YAML text, as gnostic's `Any.yaml` (JSON is
//! YAML).

use serde_json::Value;

pub const CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// A protobuf message being written: fields in order, nested messages length-delimited.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.varint(u64::from(field << 3 | 2));
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn message(&mut self, field: u32, m: Message) {
        self.bytes(field, &m.0);
    }

    fn bool(&mut self, field: u32, b: bool) {
        if b {
            self.varint(u64::from(field << 3));
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, v: i64) {
        if v != 0 {
            self.varint(u64::from(field << 3));
            self.varint(v as u64);
        }
    }

    fn double(&mut self, field: u32, v: f64) {
        if v != 0.0 {
            self.varint(u64::from(field << 3 | 1));
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// `Any { yaml }`.
fn any(value: &Value) -> Message {
    let mut m = Message::default();
    m.string(2, &value.to_string());
    m
}

/// `NamedAny { name, value }` for each `x-` key of `obj`.
fn vendor_extensions(m: &mut Message, field: u32, obj: &serde_json::Map<String, Value>) {
    for (k, v) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Message::default();
        named.string(1, k);
        named.message(2, any(v));
        m.message(field, named);
    }
}

fn schema(value: &Value) -> Message {
    let mut m = Message::default();
    let Some(obj) = value.as_object() else {
        return m;
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("");
    let int = |k: &str| obj.get(k).and_then(Value::as_i64).unwrap_or(0);
    let float = |k: &str| obj.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    m.string(1, text("$ref"));
    m.string(2, text("format"));
    m.string(3, text("title"));
    m.string(4, text("description"));
    if let Some(d) = obj.get("default") {
        m.message(5, any(d));
    }
    m.double(6, float("multipleOf"));
    m.double(7, float("maximum"));
    m.bool(8, obj.get("exclusiveMaximum") == Some(&Value::Bool(true)));
    m.double(9, float("minimum"));
    m.bool(10, obj.get("exclusiveMinimum") == Some(&Value::Bool(true)));
    m.int64(11, int("maxLength"));
    m.int64(12, int("minLength"));
    m.string(13, text("pattern"));
    m.int64(14, int("maxItems"));
    m.int64(15, int("minItems"));
    m.bool(16, obj.get("uniqueItems") == Some(&Value::Bool(true)));
    m.int64(17, int("maxProperties"));
    m.int64(18, int("minProperties"));
    for r in obj
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.string(19, r.as_str().unwrap_or(""));
    }
    for e in obj
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(20, any(e));
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut item = Message::default();
            // A oneof bool is written even when false: its presence is the value.
            item.varint(2 << 3);
            item.varint(u64::from(*b));
            m.message(21, item);
        }
        Some(sub @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, schema(sub));
            m.message(21, item);
        }
        _ => {}
    }
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() {
        let mut item = Message::default();
        types.iter().for_each(|t| item.string(1, t));
        m.message(22, item);
    }
    if let Some(items) = obj.get("items") {
        let mut item = Message::default();
        match items {
            Value::Array(list) => list.iter().for_each(|s| item.message(1, schema(s))),
            one => item.message(1, schema(one)),
        }
        m.message(23, item);
    }
    for sub in obj
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(24, schema(sub));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        let mut properties = Message::default();
        for (name, sub) in props {
            let mut named = Message::default();
            named.string(1, name);
            named.message(2, schema(sub));
            properties.message(1, named);
        }
        m.message(25, properties);
    }
    vendor_extensions(&mut m, 31, obj);
    m
}

/// A query parameter as `ParametersItem { parameter { non_body_parameter { query_parameter_sub_schema } } }`.
fn query_parameter(p: &Value) -> Message {
    let mut query = Message::default();
    query.bool(1, p["required"] == true);
    query.string(2, p["in"].as_str().unwrap_or("query"));
    query.string(3, p["description"].as_str().unwrap_or(""));
    query.string(4, p["name"].as_str().unwrap_or(""));
    query.string(6, p["type"].as_str().unwrap_or(""));
    query.bool(20, p["uniqueItems"] == true);
    let mut non_body = Message::default();
    non_body.message(3, query);
    let mut parameter = Message::default();
    parameter.message(2, non_body);
    let mut item = Message::default();
    item.message(1, parameter);
    item
}

fn operation(op: &Value) -> Message {
    let mut m = Message::default();
    m.string(5, op["operationId"].as_str().unwrap_or(""));
    for p in op["parameters"].as_array().into_iter().flatten() {
        m.message(8, query_parameter(p));
    }
    if let Some(responses) = op["responses"].as_object() {
        let mut out = Message::default();
        for (code, resp) in responses {
            let mut response = Message::default();
            response.string(1, resp["description"].as_str().unwrap_or(""));
            if resp["schema"].is_object() {
                let mut item = Message::default();
                item.message(1, schema(&resp["schema"]));
                response.message(2, item);
            }
            let mut value = Message::default();
            value.message(1, response);
            let mut named = Message::default();
            named.string(1, code);
            named.message(2, value);
            out.message(1, named);
        }
        m.message(9, out);
    }
    if let Some(obj) = op.as_object() {
        vendor_extensions(&mut m, 13, obj);
    }
    m
}

/// Encodes kiln's JSON v2 document (`openapi::v2_document`).
pub fn encode(doc: &Value) -> Vec<u8> {
    let mut m = Message::default();
    m.string(1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Message::default();
    info.string(1, doc["info"]["title"].as_str().unwrap_or(""));
    info.string(2, doc["info"]["version"].as_str().unwrap_or(""));
    m.message(2, info);
    let mut paths = Message::default();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let mut path_item = Message::default();
        if item["patch"].is_object() {
            path_item.message(8, operation(&item["patch"]));
        }
        let mut named = Message::default();
        named.string(1, path);
        named.message(2, path_item);
        paths.message(2, named);
    }
    m.message(8, paths);
    let mut definitions = Message::default();
    for (name, def) in doc["definitions"].as_object().into_iter().flatten() {
        let mut named = Message::default();
        named.string(1, name);
        named.message(2, schema(def));
        definitions.message(1, named);
    }
    m.message(9, definitions);
    m.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_fields_with_their_numbers() {
        let doc = json!({"swagger": "2.0", "info": {"title": "T", "version": "v"}, "paths": {}, "definitions": {}});
        // swagger=1 "2.0", info=2 {title=1 "T", version=2 "v"}, paths=8 {}, definitions=9 {}
        assert_eq!(
            encode(&doc),
            vec![
                0x0a, 3, b'2', b'.', b'0', 0x12, 6, 0x0a, 1, b'T', 0x12, 1, b'v', 0x42, 0, 0x4a, 0
            ]
        );
    }

    #[test]
    fn schema_writes_type_properties_and_extensions() {
        let s = schema(
            &json!({"type": "object", "properties": {"a": {"type": "string"}},
                               "x-kubernetes-group-version-kind": [{"kind": "K"}]}),
        );
        let bytes = s.0;
        // type = 22 (TypeItem { "object" }) comes first: tag (22<<3|2) = 0xb2 0x01.
        assert_eq!(&bytes[..3], &[0xb2, 0x01, 8]);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("x-kubernetes-group-version-kind"));
        assert!(text.contains("[{\"kind\":\"K\"}]"));
    }
}
