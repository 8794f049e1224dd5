//! CEL for MutatingAdmissionPolicy mutations: upstream's `Object{...}` / `Object.spec{...}`
//! initializers (apply configurations) and `JSONPatch{op, path, from, value}` values, plus
//! `jsonpatch.escapeKey`.
//!
//! Upstream declares the `Object` types for any field path (`Object.spec.template.spec`); the `cel`
//! crate only constructs struct types registered by their exact name. So each expression is parsed
//! once, the struct names it spells are collected from its syntax tree, and it runs in an
//! environment of its own where each of those names (`Object`, `Object.…`, `JSONPatch`) is a
//! struct that takes any field. What upstream's type checker would catch at policy creation (a
//! misspelt field, a value of the wrong type) surfaces here at evaluation, when the result is
//! converted or when the object is decoded and validated after the mutation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use ::cel::common::ast::{EntryExpr, Expr, IdedExpr};
use ::cel::common::types::{CelStruct, Type, STRING_TYPE};
use ::cel::common::value::{CowVal, Val};
use ::cel::objects::Key;
use ::cel::{Context, DeclarationError, Env, ExecutionError, StructType, Value as CelValue};
use serde_json::{Map, Value};

use super::activation::Activation;
use super::convert::to_cel;
use super::program::{env, eval_error, new_env};
use super::CelError;

/// The struct type name of a JSON patch operation.
pub const JSON_PATCH: &str = "JSONPatch";
/// The struct type name of an apply configuration's root.
pub const OBJECT: &str = "Object";

/// A struct type that accepts any field: upstream's unstructured `ObjectType`, whose fields are
/// all `dyn`.
struct AnyFields(Type);

impl StructType for AnyFields {
    fn get_type(&self) -> &Type {
        &self.0
    }

    fn new_value<'b, 'v>(
        &self,
        fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let mut value = CelStruct::new(self.0.name().to_owned());
        for (name, field) in fields {
            value.add_field_value(name, field);
        }
        Ok(Box::new(value))
    }
}

/// `jsonpatch.escapeKey`: `~` → `~0`, `/` → `~1` (RFC 6901).
fn escape_key<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let key = match args
        .first()
        .map(|a| CelValue::try_from(a.as_ref()))
        .transpose()?
    {
        Some(CelValue::String(s)) => s,
        _ => {
            return Err(ExecutionError::function_error(
                "jsonpatch.escapeKey",
                "expected a string",
            ))
        }
    };
    let escaped = key.replace('~', "~0").replace('/', "~1");
    let boxed: Box<dyn Val> = CelValue::String(Arc::new(escaped)).try_into()?;
    Ok(CowVal::Owned(boxed))
}

/// Every struct type name the expression constructs.
fn struct_names(expr: &IdedExpr, names: &mut BTreeSet<String>) {
    let visit_entries = |entries: &[::cel::common::ast::IdedEntryExpr],
                         names: &mut BTreeSet<String>| {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(f) => struct_names(&f.value, names),
                EntryExpr::MapEntry(e) => {
                    struct_names(&e.key, names);
                    struct_names(&e.value, names);
                }
            }
        }
    };
    match &expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                struct_names(target, names);
            }
            call.args.iter().for_each(|a| struct_names(a, names));
        }
        Expr::Comprehension(c) => {
            for e in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                struct_names(e, names);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|e| struct_names(e, names)),
        Expr::Map(map) => visit_entries(&map.entries, names),
        Expr::Select(select) => struct_names(&select.operand, names),
        Expr::Struct(s) => {
            names.insert(s.type_name.clone());
            visit_entries(&s.entries, names);
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Whether upstream's mutation environment declares this type name.
fn is_mutation_type(name: &str) -> bool {
    name == JSON_PATCH || name == OBJECT || name.starts_with("Object.")
}

/// One compiled mutation expression (an apply configuration or a JSON patch).
pub struct MutationProgram {
    program: ::cel::Program,
    env: Arc<Env>,
}

impl std::fmt::Debug for MutationProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutationProgram")
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

impl MutationProgram {
    fn build(source: &str) -> Result<MutationProgram, CelError> {
        let program = env()
            .compile(source)
            .map_err(|e| CelError::Compile(e.to_string()))?;
        let mut names = BTreeSet::new();
        struct_names(program.expression(), &mut names);
        let mut own = new_env();
        let declare = |env: &mut Env| -> Result<(), DeclarationError> {
            for name in names.iter().filter(|n| is_mutation_type(n)) {
                env.add_type(AnyFields(Type::new_struct(name.clone())))?;
            }
            env.add_overload(
                "jsonpatch.escapeKey",
                "jsonpatch_escape_key_string",
                vec![STRING_TYPE],
                escape_key,
            )
        };
        declare(&mut own).map_err(|e| CelError::Compile(e.to_string()))?;
        // Compiled again in its own environment: macros and namespaces resolve against it.
        let program = own
            .compile(source)
            .map_err(|e| CelError::Compile(e.to_string()))?;
        Ok(MutationProgram {
            program,
            env: Arc::new(own),
        })
    }

    /// Compiles `source`, or returns the program compiled for it before (a policy's mutations
    /// run on every matching write).
    pub fn compile(source: &str) -> Result<Arc<MutationProgram>, CelError> {
        static COMPILED: LazyLock<Mutex<HashMap<String, Arc<MutationProgram>>>> =
            LazyLock::new(Default::default);
        /// Bound on cached programs; past it the cache starts over.
        const MAX_COMPILED: usize = 1024;
        let mut cache = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(source) {
            return Ok(p.clone());
        }
        if cache.len() >= MAX_COMPILED {
            cache.clear();
        }
        let program = Arc::new(MutationProgram::build(source)?);
        cache.insert(source.to_string(), program.clone());
        Ok(program)
    }

    /// Evaluates with an admission policy's activation (its objects, lazy `variables` and the
    /// `authorizer`); the result keeps its CEL form (struct values included).
    pub fn execute_in(&self, activation: &Activation) -> Result<CelValue, CelError> {
        let ctx = activation.context_in(Arc::clone(&self.env));
        self.program.execute(&ctx).map_err(eval_error)
    }

    /// Evaluates with JSON variables; the result keeps its CEL form (struct values included).
    pub fn execute(&self, vars: &[(&str, &Value)]) -> Result<CelValue, CelError> {
        let mut ctx = Context::with_env(Arc::clone(&self.env));
        for (name, value) in vars {
            ctx.add_variable_from_value(*name, to_cel(value));
        }
        self.program.execute(&ctx).map_err(eval_error)
    }
}

fn field_value(v: &dyn Val) -> Result<CelValue, String> {
    CelValue::try_from(v).map_err(|e| e.to_string())
}

/// A CEL result as JSON, struct values as objects (`ObjectVal.ConvertToNative`).
pub fn to_json(value: &CelValue) -> Result<Value, String> {
    match value {
        CelValue::Struct(s) => {
            let mut out = Map::new();
            for (name, field) in s.field_values() {
                let converted = to_json(&field_value(field.as_ref())?)
                    .map_err(|e| format!("fail to convert field {name:?}: {e}"))?;
                out.insert(name, converted);
            }
            Ok(Value::Object(out))
        }
        CelValue::List(items) => items
            .iter()
            .map(to_json)
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        CelValue::Map(map) => {
            let mut out = Map::new();
            for (k, v) in map.map.iter() {
                let Key::String(key) = k else {
                    return Err(format!("map key {k} is not a string"));
                };
                out.insert(key.to_string(), to_json(v)?);
            }
            Ok(Value::Object(out))
        }
        other => other
            .json()
            .map_err(|_| format!("unable to convert {other:?} to JSON")),
    }
}

/// Upstream's `CheckTypeNamesMatchFieldPathNames`: a struct under field `f` of a struct named
/// `T` must be named `T.f`; lists and maps in between are unnamed.
fn check_names(value: &CelValue, path: &mut Vec<String>, errors: &mut Vec<String>) {
    match value {
        CelValue::Struct(s) => {
            let expected = path.join(".");
            if s.name() != expected {
                errors.push(format!(
                    "unexpected type name {:?}, expected {expected:?}, which matches field name path from root Object type",
                    s.name()
                ));
            }
            for (name, field) in s.field_values() {
                if let Ok(v) = field_value(field.as_ref()) {
                    path.push(name);
                    check_names(&v, path, errors);
                    path.pop();
                }
            }
        }
        CelValue::List(items) => items.iter().for_each(|i| check_names(i, path, errors)),
        CelValue::Map(map) => map.map.values().for_each(|v| check_names(v, path, errors)),
        _ => {}
    }
}

/// The type-name check from a struct's own name; `Err` with upstream's `type mismatch: …`.
fn names_match(value: &CelValue) -> Result<(), String> {
    let CelValue::Struct(s) = value else {
        return Ok(());
    };
    let mut errors = Vec::new();
    check_names(value, &mut vec![s.name().to_string()], &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("type mismatch: {}", errors.join("\n")))
    }
}

fn type_name(value: &CelValue) -> String {
    match value {
        CelValue::Struct(s) => s.name().to_string(),
        other => other.type_of().to_string(),
    }
}

/// An ApplyConfiguration expression's result as the JSON object to merge.
pub fn apply_configuration(value: &CelValue) -> Result<Value, String> {
    match value {
        CelValue::Struct(s) if s.name() == OBJECT => {
            names_match(value)?;
            to_json(value).map_err(|e| format!("invalid return type: {e}"))
        }
        other => Err(format!(
            "unsupported return type from ApplyConfiguration expression: {}",
            type_name(other)
        )),
    }
}

/// A JSONPatch expression's result as a JSON patch document (a list of operations).
pub fn json_patch(value: &CelValue) -> Result<Value, String> {
    let CelValue::List(items) = value else {
        return Err("type mismatch: JSONPatchType.expression should evaluate to array".into());
    };
    let mut ops = Vec::new();
    for item in items.iter() {
        let CelValue::Struct(s) = item else {
            return Err(format!(
                "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element of {}",
                type_name(item)
            ));
        };
        if s.name() != JSON_PATCH {
            return Err(format!(
                "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element of {}",
                s.name()
            ));
        }
        let mut op = Map::new();
        for (name, field) in s.field_values() {
            let v = field_value(field.as_ref())?;
            match name.as_str() {
                "op" | "path" | "from" => match v {
                    CelValue::String(text) => {
                        op.insert(name, Value::String(text.to_string()));
                    }
                    other => {
                        return Err(format!(
                            "type mismatch: JSONPatch field {name:?} must be a string, got {}",
                            type_name(&other)
                        ))
                    }
                },
                "value" => {
                    names_match(&v)?;
                    let json = to_json(&v).map_err(|e| {
                        format!("JSONPath valueExpression evaluated to a type that could not marshal to JSON: {e}")
                    })?;
                    op.insert(name, json);
                }
                other => return Err(format!("type mismatch: JSONPatch has no field {other:?}")),
            }
        }
        // Upstream always writes op and path, empty when unset.
        for required in ["op", "path"] {
            op.entry(required).or_insert(Value::String(String::new()));
        }
        ops.push(Value::Object(op));
    }
    Ok(Value::Array(ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(expr: &str, object: &Value) -> Result<CelValue, CelError> {
        MutationProgram::compile(expr)?.execute(&[("object", object)])
    }

    #[test]
    fn object_initializers_become_apply_configurations() {
        let obj = json!({"metadata": {"name": "web"}});
        let v = run(
            "Object{metadata: Object.metadata{labels: {'owner': object.metadata.name}}}",
            &obj,
        )
        .unwrap();
        assert_eq!(
            apply_configuration(&v).unwrap(),
            json!({"metadata": {"labels": {"owner": "web"}}})
        );
        let nested = run(
            "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'a', env: [Object.spec.containers.env{name: 'X', value: 'y'}]}]}}",
            &obj,
        )
        .unwrap();
        assert_eq!(
            apply_configuration(&nested).unwrap(),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "y"}]}]}})
        );
    }

    #[test]
    fn type_names_must_follow_field_paths() {
        let v = run(
            "Object{spec: Object.spec{selector: Object.spec.wrong{}}}",
            &json!({}),
        )
        .unwrap();
        assert_eq!(
            apply_configuration(&v).unwrap_err(),
            "type mismatch: unexpected type name \"Object.spec.wrong\", expected \"Object.spec.selector\", which matches field name path from root Object type"
        );
        let not_object = run("Object.spec{}", &json!({})).unwrap();
        assert_eq!(
            apply_configuration(&not_object).unwrap_err(),
            "unsupported return type from ApplyConfiguration expression: Object.spec"
        );
    }

    #[test]
    fn json_patches_with_escaped_keys_and_object_values() {
        let v = run(
            "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('example.com/env~x'), value: 'test'}, \
              JSONPatch{op: 'add', path: '/spec/initContainers/-', value: Object.spec.initContainers{name: 'init', image: 'busybox'}}]",
            &json!({}),
        )
        .unwrap();
        assert_eq!(
            json_patch(&v).unwrap(),
            json!([
                {"op": "add", "path": "/metadata/labels/example.com~1env~0x", "value": "test"},
                {"op": "add", "path": "/spec/initContainers/-", "value": {"name": "init", "image": "busybox"}},
            ])
        );
        let wrong = run("[{'op': 'add'}]", &json!({})).unwrap();
        assert!(json_patch(&wrong).unwrap_err().starts_with(
            "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch"
        ));
    }

    #[test]
    fn unknown_struct_names_and_runtime_errors() {
        // Only upstream's mutation types are constructible.
        let err = run("Other{}", &json!({})).unwrap_err();
        assert!(matches!(err, CelError::Eval(_)), "{err:?}");
        let err = run("Object{x: object.nope}", &json!({})).unwrap_err();
        assert_eq!(err, CelError::Eval("no such key: nope".into()));
    }
}
