//! Stored objects written out without decoding them: a LIST copies each value's bytes into the
//! response and only splices in `metadata.resourceVersion` (the key's mod revision), instead of
//! building a `serde_json::Value` per object and serialising it again. Table rows get a decoded view
//! without `metadata.managedFields` (no cell reads it, and it is most of a typical object's JSON).
//!
//! Stored values are written by `serde_json` from a `Value`, so their keys are sorted; the revision
//! is inserted at its sorted place, which keeps the output byte-identical to decoding the object,
//! setting the field and serialising it.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::status::ApiError;

/// A JSON object's members in stored order, each value still as its JSON text.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

/// An object key, borrowed from the input unless it holds escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Key(k), v)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push((k, v));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

fn not_json(e: impl fmt::Display) -> ApiError {
    ApiError::internal(format!("stored object is not JSON: {e}"))
}

fn members(json: &str) -> Result<Members<'_>, ApiError> {
    serde_json::from_str(json).map_err(not_json)
}

fn utf8(bytes: &[u8]) -> Result<&str, ApiError> {
    std::str::from_utf8(bytes).map_err(not_json)
}

fn write_key(out: &mut Vec<u8>, key: &str) {
    // Writing a &str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
}

/// The value of `metadata.resourceVersion`: the revision as a string.
fn write_revision(out: &mut Vec<u8>, revision: i64) {
    out.push(b'"');
    out.extend_from_slice(revision.to_string().as_bytes());
    out.push(b'"');
}

/// Writes `members` as an object, with `special` (a key) written by `write`: in place of a stored
/// member of that name, else at its sorted place.
fn write_members(
    out: &mut Vec<u8>,
    members: &Members,
    special: &str,
    mut write: impl FnMut(&mut Vec<u8>, Option<&RawValue>) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let stored = members.0.iter().position(|(k, _)| k == special);
    // Where a missing `special` goes: before the first greater key.
    let insert_at = match stored {
        Some(_) => None,
        None => Some(
            members
                .0
                .iter()
                .position(|(k, _)| k.as_ref() > special)
                .unwrap_or(members.0.len()),
        ),
    };
    out.push(b'{');
    for (i, (key, value)) in members.0.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if insert_at == Some(i) {
            write_key(out, special);
            write(out, None)?;
            out.push(b',');
        }
        write_key(out, key);
        if stored == Some(i) {
            write(out, Some(value))?;
        } else {
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    if insert_at == Some(members.0.len()) {
        if !members.0.is_empty() {
            out.push(b',');
        }
        write_key(out, special);
        write(out, None)?;
    }
    out.push(b'}');
    Ok(())
}

/// The stored `metadata` (absent = empty) with `resourceVersion` set.
fn write_metadata(
    out: &mut Vec<u8>,
    metadata: Option<&RawValue>,
    revision: i64,
) -> Result<(), ApiError> {
    let stored = members(metadata.map_or("{}", RawValue::get))?;
    write_members(out, &stored, "resourceVersion", |out, _| {
        write_revision(out, revision);
        Ok(())
    })
}

/// The stored object with `metadata.resourceVersion` set: what `from_stored` decodes, as JSON.
pub fn write_object(out: &mut Vec<u8>, bytes: &[u8], revision: i64) -> Result<(), ApiError> {
    Stored::parse(bytes, revision)?.write(out)
}

/// A stored object split into its top-level members, for a Table row: decoded for the cells,
/// its metadata copied into the row's PartialObjectMetadata, from one parse.
pub struct Stored<'a> {
    members: Members<'a>,
    revision: i64,
}

impl<'a> Stored<'a> {
    pub fn parse(bytes: &'a [u8], revision: i64) -> Result<Self, ApiError> {
        Ok(Stored {
            members: members(utf8(bytes)?)?,
            revision,
        })
    }

    fn metadata(&self) -> Option<&'a RawValue> {
        self.members
            .0
            .iter()
            .find(|(k, _)| k == "metadata")
            .map(|(_, v)| *v)
    }

    /// The object's `metadata` with `resourceVersion` set.
    pub fn write_metadata(&self, out: &mut Vec<u8>) -> Result<(), ApiError> {
        write_metadata(out, self.metadata(), self.revision)
    }

    /// The whole object with `metadata.resourceVersion` set.
    pub fn write(&self, out: &mut Vec<u8>) -> Result<(), ApiError> {
        write_members(out, &self.members, "metadata", |out, metadata| {
            write_metadata(out, metadata, self.revision)
        })
    }

    /// The object decoded for Table cells and selectors: everything `from_stored` gives except
    /// `metadata.managedFields`.
    pub fn view(&self) -> Result<Value, ApiError> {
        let decode = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).map_err(not_json);
        let mut map = Map::new();
        let mut metadata = Map::new();
        for (key, value) in &self.members.0 {
            if key == "metadata" {
                for (k, v) in members(value.get())?.0 {
                    if k != "managedFields" {
                        metadata.insert(k.into_owned(), decode(v)?);
                    }
                }
            } else {
                map.insert(key.clone().into_owned(), decode(value)?);
            }
        }
        metadata.insert(
            "resourceVersion".into(),
            Value::String(self.revision.to_string()),
        );
        map.insert("metadata".into(), Value::Object(metadata));
        Ok(Value::Object(map))
    }
}

/// [`Stored::view`] of stored bytes.
pub fn view(bytes: &[u8], revision: i64) -> Result<Value, ApiError> {
    Stored::parse(bytes, revision)?.view()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::lifecycle::from_stored;
    use serde_json::json;

    fn written(bytes: &[u8], revision: i64) -> String {
        let mut out = Vec::new();
        write_object(&mut out, bytes, revision).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn object_is_byte_identical_to_decoding_it() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "namespace": "default", "uid": "u",
                                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
                                "labels": {"a\"b": "é\n"}},
                   "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}),
            json!({"kind": "Namespace", "metadata": {}}),
            json!({"kind": "Thing", "zz": 1}),
            json!({"metadata": {"resourceVersion": "3", "name": "stale"}}),
            json!({"metadata": {"annotations": {"x": "y"}}, "a": [1, 2.5, null, true]}),
        ];
        for obj in objects {
            let bytes = serde_json::to_vec(&obj).unwrap();
            let expected = serde_json::to_string(&from_stored(&bytes, 42).unwrap()).unwrap();
            assert_eq!(written(&bytes, 42), expected, "{obj}");
        }
    }

    #[test]
    fn escaped_keys_and_unsorted_values_stay_equal_as_json() {
        let bytes = br#"{"status":{},"metadata":{"z":1,"n\u0061me":"x"},"kind":"K"}"#;
        let got: Value = serde_json::from_str(&written(bytes, 7)).unwrap();
        assert_eq!(got, from_stored(bytes, 7).unwrap());
    }

    #[test]
    fn metadata_and_view() {
        let obj = json!({"kind": "Pod", "metadata": {"name": "p", "managedFields": [{}]},
                         "spec": {"nodeName": "n"}});
        let bytes = serde_json::to_vec(&obj).unwrap();
        let mut out = Vec::new();
        Stored::parse(&bytes, 5)
            .unwrap()
            .write_metadata(&mut out)
            .unwrap();
        let expected = &from_stored(&bytes, 5).unwrap()["metadata"];
        assert_eq!(String::from_utf8(out).unwrap(), expected.to_string());
        let mut full = from_stored(&bytes, 5).unwrap();
        full["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(view(&bytes, 5).unwrap(), full);
    }

    #[test]
    fn garbage_is_an_internal_error() {
        let mut out = Vec::new();
        assert_eq!(write_object(&mut out, b"[1]", 1).unwrap_err().code, 500);
        assert_eq!(
            write_object(&mut out, b"{\"metadata\":3}", 1)
                .unwrap_err()
                .code,
            500
        );
        assert_eq!(view(b"not json", 1).unwrap_err().code, 500);
    }
}
