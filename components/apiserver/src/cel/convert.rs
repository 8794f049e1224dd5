//! JSON ⇄ CEL values. Integral JSON numbers become CEL `int` (not `uint`, which serde would pick
//! for non-negative numbers), so `self.replicas + 1` and `self.replicas <= 5` type-check the way
//! they do upstream, where an `integer` schema field is an `int`.

use std::collections::HashMap;
use std::sync::Arc;

use ::cel::objects::{Key, Map};
use ::cel::Value as CelValue;
use serde_json::Value;

use super::CelError;

pub fn to_cel(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => CelValue::Int(i),
            (None, Some(u)) => CelValue::UInt(u),
            _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: HashMap<Key, CelValue> = fields
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            CelValue::Map(Map { map: Arc::new(map) })
        }
    }
}

pub fn to_json(value: &CelValue) -> Result<Value, CelError> {
    value
        .json()
        .map_err(|_| CelError::NotJson(format!("{value:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integral_numbers_are_ints_and_round_trip() {
        assert_eq!(to_cel(&json!(3)), CelValue::Int(3));
        assert_eq!(to_cel(&json!(-3)), CelValue::Int(-3));
        assert_eq!(to_cel(&json!(1.5)), CelValue::Float(1.5));
        assert_eq!(to_cel(&json!(u64::MAX)), CelValue::UInt(u64::MAX));
        let doc = json!({"a": [1, "x", null, true, {"b": 2.5}]});
        assert_eq!(to_json(&to_cel(&doc)).unwrap(), doc);
    }
}
