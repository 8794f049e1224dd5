//! apiextensions' `x-kubernetes-validations` semantics for one schema node: each rule is a CEL
//! expression over `self` (and `oldSelf` for transition rules) that must be `true`; a failure
//! becomes a field cause with the rule's message (or `messageExpression`), reason and fieldPath,
//! worded as upstream's field errors (`Invalid value: "object": <message>`).

use serde_json::{json, Value};
use tracing::debug;

use super::program::{Bindings, Program};
use super::CelError;
use crate::status::Cause;

/// Upstream's limit on an evaluated messageExpression (celconfig.MaxEvaluatedMessageExpressionSizeBytes).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// One `x-kubernetes-validations[]` entry, compiled.
#[derive(Debug)]
struct CompiledRule {
    rule: String,
    message: String,
    message_expression: Option<Result<Program, CelError>>,
    reason: String,
    field_path: String,
    optional_old_self: bool,
    program: Result<Program, CelError>,
}

impl CompiledRule {
    fn new(raw: &Value) -> CompiledRule {
        let text = |field: &str| raw[field].as_str().unwrap_or("").to_string();
        let rule = text("rule");
        let message_expression = raw["messageExpression"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(Program::compile);
        CompiledRule {
            program: Program::compile(&rule),
            rule,
            message: text("message"),
            message_expression,
            reason: text("reason"),
            field_path: text("fieldPath"),
            optional_old_self: raw["optionalOldSelf"].as_bool().unwrap_or(false),
        }
    }

    /// upstream's ruleErrorString: the message when set, else the rule.
    fn error_string(&self) -> &str {
        if self.message.is_empty() {
            self.rule.trim()
        } else {
            self.message.trim()
        }
    }

    fn default_message(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.error_string())
        } else {
            self.message.trim().to_string()
        }
    }
}

/// The compiled rules of one schema node, with the node's type (the "value" upstream's field
/// errors print) and, when known, the node's schema for resolving rule fieldPaths.
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<CompiledRule>,
    schema: Option<Value>,
}

impl RuleSet {
    /// The rules of a schema node (its `x-kubernetes-validations`).
    pub fn from_schema(schema: &Value) -> RuleSet {
        let mut set = RuleSet::from_rules(&schema["x-kubernetes-validations"]);
        set.schema = Some(schema.clone());
        set
    }

    /// Rules alone; the type is then taken from the value checked.
    pub fn from_rules(rules: &Value) -> RuleSet {
        let rules = rules
            .as_array()
            .map(|a| a.iter().map(CompiledRule::new).collect())
            .unwrap_or_default();
        RuleSet {
            rules,
            schema: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Checks `self_value` (and `old_self` on an update, when the old object had this value) at
    /// `field_path` (`spec.template`, `""` for the resource root).
    pub fn check(
        &self,
        self_value: &Value,
        old_self: Option<&Value>,
        field_path: &str,
    ) -> Vec<Cause> {
        // Rules validate non-null values only; a nullable field's rules skip a null.
        if self_value.is_null() {
            return Vec::new();
        }
        let old_self = old_self.filter(|v| !v.is_null());
        let type_value = json!(self.schema_type(self_value));
        let mut causes = Vec::new();
        for rule in &self.rules {
            if rule.rule.trim().is_empty() {
                continue;
            }
            let program = match &rule.program {
                Ok(p) => p,
                Err(e) => {
                    causes.push(Cause::invalid(
                        field_path,
                        &type_value,
                        &format!("rule compile error: {e}"),
                    ));
                    continue;
                }
            };
            let transition = program.references("oldSelf");
            // Transition rules compare with the stored value, so they only run on an update where
            // this value existed before, unless the rule asks for an optional oldSelf.
            if transition && old_self.is_none() && !rule.optional_old_self {
                continue;
            }
            let plain = activation(self_value, old_self);
            let bindings = if rule.optional_old_self {
                Bindings::new()
                    .var("self", self_value)
                    .optional("oldSelf", old_self)
            } else {
                activation(self_value, old_self)
            };
            match program.execute(&bindings) {
                Ok(::cel::Value::Bool(true)) => continue,
                Ok(_) => {}
                Err(e @ CelError::NoSuchOverload(_)) => {
                    causes.push(Cause::invalid(
                        field_path,
                        &type_value,
                        &format!(
                            "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                            rule.error_string()
                        ),
                    ));
                    continue;
                }
                Err(e) => {
                    causes.push(Cause::invalid(
                        field_path,
                        &type_value,
                        &format!("{e} evaluating rule: {}", rule.error_string()),
                    ));
                    continue;
                }
            }
            let field = self.failure_path(field_path, &rule.field_path);
            let detail = rule
                .message_expression
                .as_ref()
                .and_then(|m| evaluated_message(m, &plain))
                .unwrap_or_else(|| rule.default_message());
            causes.push(cause_for_reason(&rule.reason, &field, &type_value, &detail));
        }
        causes
    }

    /// The node's schema type; without a schema, the JSON type of the value.
    fn schema_type(&self, value: &Value) -> String {
        if let Some(schema) = &self.schema {
            return schema["type"].as_str().unwrap_or("").to_string();
        }
        match value {
            Value::Object(_) => "object",
            Value::Array(_) => "array",
            Value::String(_) => "string",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::Null => "",
        }
        .to_string()
    }

    /// `field_path` plus the rule's relative fieldPath (`.spec.replicas`, `.labels['a.b']`); a
    /// path that does not parse is ignored, as upstream only accepts valid ones at CRD creation.
    fn failure_path(&self, field_path: &str, rule_path: &str) -> String {
        if rule_path.is_empty() {
            return field_path.to_string();
        }
        match normalize_field_path(rule_path, self.schema.as_ref()) {
            Some(rel) if field_path.is_empty() => rel,
            Some(rel) if rel.starts_with('[') => format!("{field_path}{rel}"),
            Some(rel) => format!("{field_path}.{rel}"),
            None => field_path.to_string(),
        }
    }
}

/// `self`, and `oldSelf` when there is one.
fn activation<'a>(self_value: &'a Value, old_self: Option<&'a Value>) -> Bindings<'a> {
    let bindings = Bindings::new().var("self", self_value);
    match old_self {
        Some(old) => bindings.var("oldSelf", old),
        None => bindings,
    }
}

/// A messageExpression's result, or `None` (then the static message is used) when it fails,
/// is not a string, is empty, too long or spans lines — upstream logs those and falls back.
fn evaluated_message(
    program: &Result<Program, CelError>,
    bindings: &Bindings<'_>,
) -> Option<String> {
    let program = program.as_ref().ok()?;
    let result = program.execute(bindings);
    let message = match result {
        Ok(::cel::Value::String(s)) => s.trim().to_string(),
        other => {
            debug!(expression = program.source(), result = ?other, "messageExpression evaluation failed");
            return None;
        }
    };
    let usable =
        !message.is_empty() && message.len() <= MAX_MESSAGE_BYTES && !message.contains('\n');
    usable.then_some(message)
}

fn cause_for_reason(reason: &str, field: &str, type_value: &Value, detail: &str) -> Cause {
    match reason {
        "FieldValueForbidden" => Cause::forbidden(field, detail),
        "FieldValueRequired" => Cause::required(field, detail),
        "FieldValueDuplicate" => Cause::duplicate(field, type_value),
        _ => Cause::invalid(field, type_value, detail),
    }
}

/// A rule's fieldPath as a field-path string: `.a.b` → `a.b`; `['x.y']` → `.x.y` under a
/// schema's properties, `[x.y]` under additionalProperties (a map key). Without a schema, bracket
/// segments are taken as property names. `None` when it does not parse.
fn normalize_field_path(path: &str, schema: Option<&Value>) -> Option<String> {
    let mut out = String::new();
    let mut node = schema.cloned();
    let mut rest = path;
    while !rest.is_empty() {
        let name;
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            name = after[..end].to_string();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("['") {
            let (quoted, tail) = split_quoted(after)?;
            name = quoted;
            rest = tail.strip_prefix(']')?;
        } else {
            return None;
        }
        if name.is_empty() {
            return None;
        }
        let is_key = node
            .as_ref()
            .is_some_and(|s| !s["properties"].is_object() && s["additionalProperties"].is_object());
        node = node.and_then(|s| {
            let next = if is_key {
                s["additionalProperties"].clone()
            } else {
                s["properties"][&name].clone()
            };
            (!next.is_null()).then_some(next)
        });
        if is_key {
            out.push_str(&format!("[{name}]"));
        } else if out.is_empty() {
            out.push_str(&name);
        } else {
            out.push_str(&format!(".{name}"));
        }
    }
    Some(out)
}

/// The single-quoted string at the start of `s` (its opening quote already consumed), unescaped,
/// and what follows its closing quote.
fn split_quoted(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => return Some((out, &s[i + 1..])),
            '\\' => {
                let (_, escaped) = chars.next()?;
                out.push(match escaped {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '\'' => '\'',
                    '\\' => '\\',
                    _ => return None,
                });
            }
            c => out.push(c),
        }
    }
    None
}

/// Checks one node's rules (a `x-kubernetes-validations` array) against `self_value`; see
/// [`RuleSet::check`]. Compiles on every call: hold a [`RuleSet`] to reuse the programs.
pub fn check_rules(
    rules: &Value,
    self_value: &Value,
    old_self: Option<&Value>,
    field_path: &str,
) -> Vec<Cause> {
    cached(rules).check(self_value, old_self, field_path)
}

/// Compiled rule sets by their JSON: a CRD's rules are compiled once, not on every write.
static COMPILED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<RuleSet>>>,
> = std::sync::LazyLock::new(Default::default);

/// Bound on cached rule sets; past it the cache starts over (CRD churn cannot grow it forever).
const MAX_COMPILED: usize = 4096;

fn cached(rules: &Value) -> std::sync::Arc<RuleSet> {
    let key = rules.to_string();
    let mut cache = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(set) = cache.get(&key) {
        return set.clone();
    }
    if cache.len() >= MAX_COMPILED {
        cache.clear();
    }
    let set = std::sync::Arc::new(RuleSet::from_rules(rules));
    cache.insert(key, set.clone());
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(causes: &[Cause]) -> Vec<(String, String, &'static str)> {
        causes
            .iter()
            .map(|c| (c.field.clone(), c.message.clone(), c.reason))
            .collect()
    }

    #[test]
    fn failing_rule_gets_default_message() {
        let rules = json!([{"rule": "self.replicas <= self.maxReplicas"}]);
        let ok = check_rules(
            &rules,
            &json!({"replicas": 2, "maxReplicas": 3}),
            None,
            "spec",
        );
        assert!(ok.is_empty());
        let bad = check_rules(
            &rules,
            &json!({"replicas": 4, "maxReplicas": 3}),
            None,
            "spec",
        );
        assert_eq!(
            messages(&bad),
            vec![(
                "spec".into(),
                "Invalid value: \"object\": failed rule: self.replicas <= self.maxReplicas".into(),
                "FieldValueInvalid"
            )]
        );
    }

    #[test]
    fn message_reason_and_field_path() {
        let rules = json!([{
            "rule": "self.name.startsWith('a')",
            "message": "name must start with a",
            "reason": "FieldValueForbidden",
            "fieldPath": ".name",
        }]);
        let bad = check_rules(&rules, &json!({"name": "bob"}), None, "spec");
        assert_eq!(
            messages(&bad),
            vec![(
                "spec.name".into(),
                "Forbidden: name must start with a".into(),
                "FieldValueForbidden"
            )]
        );
        let required = json!([{"rule": "has(self.x)", "reason": "FieldValueRequired"}]);
        let causes = check_rules(&required, &json!({}), None, "spec");
        assert_eq!(
            causes[0].message,
            "Required value: failed rule: has(self.x)"
        );
        let dup = json!([{"rule": "false", "reason": "FieldValueDuplicate"}]);
        assert_eq!(
            check_rules(&dup, &json!("v"), None, "spec.a")[0].message,
            "Duplicate value: \"string\""
        );
    }

    #[test]
    fn transition_rule_runs_only_with_an_old_value() {
        let rules = json!([{"rule": "self.x == oldSelf.x", "message": "x is immutable"}]);
        let new = json!({"x": 2});
        assert!(check_rules(&rules, &new, None, "spec").is_empty());
        assert!(check_rules(&rules, &new, Some(&json!({"x": 2})), "spec").is_empty());
        let causes = check_rules(&rules, &new, Some(&json!({"x": 1})), "spec");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"object\": x is immutable"
        );
    }

    #[test]
    fn optional_old_self_runs_on_create() {
        let rules = json!([{
            "rule": "!oldSelf.hasValue() || self.x >= oldSelf.value().x",
            "optionalOldSelf": true,
            "message": "x may only grow",
        }]);
        assert!(check_rules(&rules, &json!({"x": 1}), None, "").is_empty());
        let causes = check_rules(&rules, &json!({"x": 1}), Some(&json!({"x": 5})), "");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"object\": x may only grow"
        );
        assert_eq!(causes[0].field, "");
    }

    #[test]
    fn message_expression_wins_and_falls_back() {
        let rules = json!([{
            "rule": "self.replicas <= 5",
            "message": "too many",
            "messageExpression": "'replicas ' + string(self.replicas) + ' exceeds 5'",
        }]);
        let causes = check_rules(&rules, &json!({"replicas": 7}), None, "spec");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"object\": replicas 7 exceeds 5"
        );
        let broken =
            json!([{"rule": "false", "message": "static", "messageExpression": "self.nope"}]);
        let causes = check_rules(&broken, &json!({}), None, "spec");
        assert_eq!(causes[0].message, "Invalid value: \"object\": static");
    }

    #[test]
    fn compile_and_evaluation_errors_are_reported() {
        let bad = check_rules(&json!([{"rule": "self.x =="}]), &json!({}), None, "spec");
        assert!(
            bad[0].message.starts_with(
                "Invalid value: \"object\": rule compile error: compilation failed: ERROR: <input>:1:"
            ),
            "{}",
            bad[0].message
        );
        let missing = check_rules(&json!([{"rule": "self.x > 1"}]), &json!({}), None, "spec");
        assert_eq!(
            missing[0].message,
            "Invalid value: \"object\": no such key: x evaluating rule: self.x > 1"
        );
    }

    #[test]
    fn null_values_are_not_validated() {
        assert!(check_rules(&json!([{"rule": "false"}]), &Value::Null, None, "spec").is_empty());
    }

    #[test]
    fn field_paths_follow_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}},
                           "a.b": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "false", "fieldPath": ".labels['x.y']"},
                {"rule": "false", "fieldPath": "['a.b']"},
            ],
        });
        let causes = RuleSet::from_schema(&schema).check(&json!({}), None, "spec");
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["spec.labels[x.y]", "spec.a.b"]);
    }
}
