//! A compiled CEL expression and its evaluation over JSON variables, in one shared environment:
//! the standard library, cel-go's strings and lists extensions, and Kubernetes' own functions.

use std::sync::{Arc, OnceLock};

use ::cel::common::types::CelOptional as Optional;
use ::cel::common::value::Val;
use ::cel::{Context, Env, ExecutionError, Value as CelValue};
use serde_json::Value;

use super::convert::{to_cel, to_json};
use super::{library, CelError};

/// The environment every expression compiles and runs in, built once.
pub(super) fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(new_env()))
}

/// A fresh environment with everything `env()` has, for callers that add types of their own
/// (MutatingAdmissionPolicy's `Object` types: `cel::mutation`).
pub(super) fn new_env() -> Env {
    let mut env = Env::stdlib();
    // The crate's extensions and ours never declare one signature twice; a clash would be a
    // programming error caught by every test, so it is fatal here.
    env.add_extension(::cel::extensions::strings)
        .expect("strings extension");
    env.add_extension(::cel::extensions::lists)
        .expect("lists extension");
    library::register(&mut env).expect("kubernetes library");
    super::authz::register(&mut env).expect("kubernetes authz library");
    env
}

/// One compiled expression.
#[derive(Debug)]
pub struct Program {
    source: String,
    program: ::cel::Program,
}

/// Variables for one evaluation: plain JSON values, or optionals (`oldSelf` of a rule with
/// `optionalOldSelf`, which is `optional.none()` on create).
#[derive(Debug, Default)]
pub struct Bindings<'a> {
    plain: Vec<(&'a str, &'a Value)>,
    optional: Vec<(&'a str, Option<&'a Value>)>,
}

impl<'a> Bindings<'a> {
    pub fn new() -> Self {
        Bindings::default()
    }

    pub fn var(mut self, name: &'a str, value: &'a Value) -> Self {
        self.plain.push((name, value));
        self
    }

    pub fn optional(mut self, name: &'a str, value: Option<&'a Value>) -> Self {
        self.optional.push((name, value));
        self
    }
}

impl Program {
    pub fn compile(source: &str) -> Result<Program, CelError> {
        // cel-go indents the source line and caret of each issue with " | ".
        let program = env()
            .compile(source)
            .map_err(|e| CelError::Compile(e.to_string().replace("\n| ", "\n | ")))?;
        Ok(Program {
            source: source.to_string(),
            program,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The parsed program, for the type checker (`check.rs`).
    pub(super) fn inner(&self) -> &::cel::Program {
        &self.program
    }

    /// Whether the expression reads `name` (a transition rule reads `oldSelf`).
    pub fn references(&self, name: &str) -> bool {
        self.program.references().has_variable(name)
    }

    /// Evaluates with JSON variables and returns the result as JSON.
    pub fn eval(&self, vars: &[(&str, &Value)]) -> Result<Value, CelError> {
        let bindings = Bindings {
            plain: vars.to_vec(),
            optional: Vec::new(),
        };
        to_json(&self.execute(&bindings)?)
    }

    /// Evaluates and returns the CEL value itself (a rule checks for `true`, a message
    /// expression for a string).
    pub fn execute(&self, bindings: &Bindings<'_>) -> Result<CelValue, CelError> {
        let mut ctx = Context::with_env(Arc::clone(env()));
        for (name, value) in &bindings.plain {
            ctx.add_variable_from_value(*name, to_cel(value));
        }
        for (name, value) in &bindings.optional {
            let optional = match value {
                Some(v) => Optional::of(boxed(to_cel(v))?),
                None => Optional::none(),
            };
            ctx.add_variable_as_val(*name, Box::new(optional));
        }
        self.program.execute(&ctx).map_err(eval_error)
    }
}

fn boxed(value: CelValue) -> Result<Box<dyn Val>, CelError> {
    value.try_into().map_err(eval_error)
}

/// cel-go's wording for the runtime errors rules commonly hit, so messages read as upstream's.
pub(super) fn eval_error(e: ExecutionError) -> CelError {
    match e {
        ExecutionError::NoSuchKey(key) => CelError::Eval(format!("no such key: {key}")),
        ExecutionError::NoSuchOverload(o) => CelError::NoSuchOverload(o.to_string()),
        ExecutionError::DivisionByZero(_) => CelError::Eval("division by zero".to_string()),
        ExecutionError::RemainderByZero(_) => CelError::Eval("modulus by zero".to_string()),
        ExecutionError::Overflow(..) => CelError::Eval("integer overflow".to_string()),
        ExecutionError::UndeclaredReference(name) => {
            CelError::Eval(format!("undeclared reference to '{name}'"))
        }
        other => CelError::Eval(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(expr: &str, this: &Value) -> Result<Value, CelError> {
        Program::compile(expr)?.eval(&[("self", this)])
    }

    #[test]
    fn compile_error_names_position_like_upstream() {
        let err = Program::compile("self.x == ").unwrap_err().to_string();
        assert!(
            err.starts_with("compilation failed: ERROR: <input>:1:"),
            "{err}"
        );
    }

    #[test]
    fn json_variables_evaluate() {
        let obj = json!({"replicas": 3, "maxReplicas": 5, "name": "abc", "tags": ["a", "b"]});
        assert_eq!(
            eval("self.replicas <= self.maxReplicas", &obj).unwrap(),
            json!(true)
        );
        assert_eq!(eval("self.replicas + 1", &obj).unwrap(), json!(4));
        assert_eq!(
            eval("self.name.startsWith('a')", &obj).unwrap(),
            json!(true)
        );
        assert_eq!(eval("size(self.tags)", &obj).unwrap(), json!(2));
        assert_eq!(eval("has(self.missing)", &obj).unwrap(), json!(false));
        assert_eq!(
            eval("self.tags.map(t, t.upperAscii())", &obj).unwrap(),
            json!(["A", "B"])
        );
        assert_eq!(
            eval("self.tags.all(t, t.matches('^[a-z]$'))", &obj).unwrap(),
            json!(true)
        );
        assert_eq!(eval("{'n': self.name}", &obj).unwrap(), json!({"n": "abc"}));
    }

    #[test]
    fn missing_key_is_cel_go_wording() {
        let err = eval("self.nope == 1", &json!({})).unwrap_err();
        assert_eq!(err, CelError::Eval("no such key: nope".into()));
    }

    #[test]
    fn optional_binding_is_none_or_some() {
        let p = Program::compile("oldSelf.hasValue()").unwrap();
        let v = json!(1);
        let none = p
            .execute(&Bindings::new().optional("oldSelf", None))
            .unwrap();
        let some = p
            .execute(&Bindings::new().optional("oldSelf", Some(&v)))
            .unwrap();
        assert_eq!((none, some), (CelValue::Bool(false), CelValue::Bool(true)));
    }

    #[test]
    fn programs_are_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Program>();
    }
}
