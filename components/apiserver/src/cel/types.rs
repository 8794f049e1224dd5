//! The types the checker (`check.rs`) gives expressions: CEL's own, plus an object type per
//! structural-schema node, built as upstream's SchemaDeclType builds them (properties become
//! fields, `additionalProperties` a map, `items` a list), so a rule's field references and result
//! type can be checked when a CRD is written.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// A static type. `Dyn` is CEL's `dyn` (a schema node whose shape is open); `Unknown` is what this
/// checker cannot type (a function it has no signature for) and is never reported as wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Unknown,
    Dyn,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    Type,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    Object(Arc<ObjectTy>),
    Optional(Box<Ty>),
    /// The `authorizer` variable and the builders its calls return.
    Authorizer,
}

/// An object: its declared fields.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjectTy {
    pub fields: BTreeMap<String, Ty>,
}

impl Ty {
    pub fn object(fields: BTreeMap<String, Ty>) -> Ty {
        Ty::Object(Arc::new(ObjectTy { fields }))
    }

    /// Neither `dyn` nor unknown: a type a mismatch can be reported against.
    pub fn is_known(&self) -> bool {
        !matches!(self, Ty::Unknown | Ty::Dyn)
    }

    pub fn is_numeric(&self) -> bool {
        matches!(self, Ty::Int | Ty::Uint | Ty::Double)
    }

    /// A scalar type whose values never equal another scalar type's (for `==` mismatches).
    pub fn is_scalar(&self) -> bool {
        matches!(
            self,
            Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes
        )
    }

    /// The common type of two branches or elements: equal types stay, `null` joins anything,
    /// anything else is `dyn` (or unknown when either side is).
    pub fn join(a: &Ty, b: &Ty) -> Ty {
        match (a, b) {
            (Ty::Unknown, _) | (_, Ty::Unknown) => Ty::Unknown,
            _ if a == b => a.clone(),
            (Ty::Null, other) | (other, Ty::Null) => other.clone(),
            (Ty::List(x), Ty::List(y)) => Ty::List(Box::new(Ty::join_elements(x, y))),
            _ => Ty::Dyn,
        }
    }

    /// Element types of two lists: an empty literal's (unknown) element takes the other's, so
    /// `[] + [x]` (the `map` macro's accumulator) is a list of `x`'s type.
    pub fn join_elements(a: &Ty, b: &Ty) -> Ty {
        match (a, b) {
            (Ty::Unknown, other) | (other, Ty::Unknown) => other.clone(),
            _ => Ty::join(a, b),
        }
    }

    /// The type of a structural-schema node; `root` adds the resource root's apiVersion, kind
    /// and metadata (name and generateName only, as upstream's root type).
    pub fn from_schema(schema: &Value, root: bool) -> Ty {
        let flag = |name: &str| schema[name].as_bool() == Some(true);
        if flag("x-kubernetes-int-or-string") {
            return Ty::Dyn;
        }
        let embedded = flag("x-kubernetes-embedded-resource");
        match schema["type"].as_str() {
            Some("boolean") => Ty::Bool,
            Some("integer") => Ty::Int,
            Some("number") => Ty::Double,
            // Formatted strings are timestamps, durations or bytes upstream; kiln evaluates them
            // as strings, so they stay open rather than refuse rules either reading would accept.
            Some("string") => match schema["format"].as_str() {
                Some("byte" | "date" | "date-time" | "duration") => Ty::Dyn,
                _ => Ty::String,
            },
            Some("array") => Ty::List(Box::new(match schema.get("items") {
                Some(items) if items.is_object() => Ty::from_schema(items, false),
                _ => Ty::Dyn,
            })),
            Some("object") if flag("x-kubernetes-preserve-unknown-fields") && !root => Ty::Dyn,
            Some("object") => {
                let props = schema["properties"].as_object();
                if props.is_none() && schema["additionalProperties"].is_object() {
                    let values = Ty::from_schema(&schema["additionalProperties"], false);
                    return Ty::Map(Box::new(Ty::String), Box::new(values));
                }
                if props.is_none() && (schema["additionalProperties"] == true) {
                    return Ty::Map(Box::new(Ty::String), Box::new(Ty::Dyn));
                }
                if flag("x-kubernetes-preserve-unknown-fields") {
                    return Ty::Dyn;
                }
                let mut fields: BTreeMap<String, Ty> = props
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), Ty::from_schema(v, false)))
                    .collect();
                if root || embedded {
                    fields.entry("apiVersion".into()).or_insert(Ty::String);
                    fields.entry("kind".into()).or_insert(Ty::String);
                    let meta = BTreeMap::from([
                        ("name".to_string(), Ty::String),
                        ("generateName".to_string(), Ty::String),
                    ]);
                    let meta = if embedded && !root {
                        // An embedded object's metadata is a full ObjectMeta upstream.
                        Ty::Dyn
                    } else {
                        Ty::object(meta)
                    };
                    fields.insert("metadata".into(), meta);
                }
                Ty::object(fields)
            }
            _ => Ty::Dyn,
        }
    }
}

/// cel-go's type names, as they appear in its messages.
impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Unknown | Ty::Dyn => write!(f, "dyn"),
            Ty::Null => write!(f, "null_type"),
            Ty::Bool => write!(f, "bool"),
            Ty::Int => write!(f, "int"),
            Ty::Uint => write!(f, "uint"),
            Ty::Double => write!(f, "double"),
            Ty::String => write!(f, "string"),
            Ty::Bytes => write!(f, "bytes"),
            Ty::Duration => write!(f, "google.protobuf.Duration"),
            Ty::Timestamp => write!(f, "google.protobuf.Timestamp"),
            Ty::Type => write!(f, "type"),
            Ty::List(e) => write!(f, "list({e})"),
            Ty::Map(k, v) => write!(f, "map({k}, {v})"),
            Ty::Object(_) => write!(f, "object"),
            Ty::Optional(t) => write!(f, "optional_type({t})"),
            Ty::Authorizer => write!(f, "kubernetes.authorization.Authorizer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_nodes_become_types() {
        let s = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "port": {"x-kubernetes-int-or-string": true},
                "when": {"type": "string", "format": "date-time"}}}}});
        let Ty::Object(root) = Ty::from_schema(&s, true) else {
            panic!()
        };
        assert!(root.fields.contains_key("apiVersion"));
        let Ty::Object(spec) = &root.fields["spec"] else {
            panic!()
        };
        assert_eq!(spec.fields["replicas"], Ty::Int);
        assert_eq!(spec.fields["tags"], Ty::List(Box::new(Ty::String)));
        assert_eq!(
            spec.fields["labels"],
            Ty::Map(Box::new(Ty::String), Box::new(Ty::String))
        );
        assert_eq!(spec.fields["port"], Ty::Dyn);
        assert_eq!(spec.fields["when"], Ty::Dyn);
        assert_eq!(format!("{}", spec.fields["labels"]), "map(string, string)");
    }
}
