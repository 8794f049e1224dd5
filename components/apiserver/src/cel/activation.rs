//! An admission policy's evaluation context: its JSON variables (`object`, `request`, `params`,
//! ...), the `authorizer` (`authz.rs`), and `variables`, whose entries are evaluated lazily, as
//! upstream's composition does: each at most once per activation, only when an expression reads
//! it, and an error in one surfaces only in the expressions that read it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use ::cel::common::traits::Indexer;
use ::cel::common::types::{CelString, Type};
use ::cel::common::value::{CowVal, Val};
use ::cel::{Context, Env, ExecutionError, Value as CelValue};
use serde_json::Value;

use super::authz::AuthorizerVal;
use super::convert::{to_cel, to_json};
use super::program::{env, eval_error, Program};
use super::CelError;

static VARIABLES: Type = Type::new_unspecified_type("kubernetes.variables");

/// Everything one policy evaluation binds.
#[derive(Debug, Clone)]
pub struct Activation {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    values: Vec<(String, Value)>,
    authorizer: Option<AuthorizerVal>,
    variables: Vec<LazyVariable>,
}

#[derive(Debug)]
struct LazyVariable {
    name: String,
    program: Result<Arc<Program>, CelError>,
    value: OnceLock<Result<Box<dyn Val>, ExecutionError>>,
    /// Set while evaluating, so a variable that reads itself fails instead of recursing.
    busy: AtomicBool,
}

impl Activation {
    /// `variables` are (name, compiled expression) in declaration order.
    pub fn new(
        values: Vec<(String, Value)>,
        authorizer: Option<AuthorizerVal>,
        variables: Vec<(String, Result<Arc<Program>, CelError>)>,
    ) -> Self {
        let variables = variables
            .into_iter()
            .map(|(name, program)| LazyVariable {
                name,
                program,
                value: OnceLock::new(),
                busy: AtomicBool::new(false),
            })
            .collect();
        Activation {
            inner: Arc::new(Inner {
                values,
                authorizer,
                variables,
            }),
        }
    }

    fn context(&self) -> Context<'static, 'static> {
        self.context_in(Arc::clone(env()))
    }

    /// The bindings in `env` (a mutation's environment of its own, `mutation.rs`).
    pub(super) fn context_in(&self, env: Arc<Env>) -> Context<'static, 'static> {
        let mut ctx = Context::with_env(env);
        for (name, value) in &self.inner.values {
            ctx.add_variable_from_value(name.as_str(), to_cel(value));
        }
        if let Some(a) = &self.inner.authorizer {
            ctx.add_variable_as_val("authorizer", Box::new(a.clone()));
        }
        ctx.add_variable_as_val("variables", Box::new(VariablesVal(self.clone())));
        ctx
    }

    fn execute(&self, program: &Program) -> Result<Box<dyn Val>, ExecutionError> {
        let ctx = self.context();
        let value =
            CelValue::resolve_val(program.inner().expression(), &ctx).map(CowVal::into_owned);
        value
    }

    /// Evaluates `program` to JSON.
    pub fn eval(&self, program: &Program) -> Result<Value, CelError> {
        let val = self.execute(program).map_err(eval_error)?;
        let value = CelValue::try_from(val.as_ref()).map_err(eval_error)?;
        to_json(&value)
    }

    /// How many variables have been evaluated (for tests of laziness).
    pub fn evaluated_variables(&self) -> usize {
        self.inner
            .variables
            .iter()
            .filter(|v| v.value.get().is_some())
            .count()
    }

    fn variable(&self, name: &str) -> Option<Result<&(dyn Val + 'static), ExecutionError>> {
        let var = self.inner.variables.iter().find(|v| v.name == name)?;
        // Checked before the OnceLock: initialising it again from inside its own
        // initialisation would never return.
        if var.value.get().is_none() && var.busy.swap(true, Ordering::SeqCst) {
            return Some(Err(ExecutionError::function_error(
                "variables",
                format!("variable '{name}' refers to itself"),
            )));
        }
        let result = var.value.get_or_init(|| {
            let out = match &var.program {
                Ok(p) => self.execute(p),
                Err(e) => Err(ExecutionError::function_error("variables", e)),
            };
            var.busy.store(false, Ordering::SeqCst);
            out
        });
        Some(match result {
            Ok(v) => Ok(v.as_ref()),
            Err(e) => Err(e.clone()),
        })
    }
}

/// The `variables` object: a field read evaluates that variable (once).
#[derive(Debug, Clone)]
struct VariablesVal(Activation);

impl Val for VariablesVal {
    fn get_type(&self) -> &Type {
        &VARIABLES
    }
    fn cel_type() -> &'static Type {
        &VARIABLES
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}

impl Indexer for VariablesVal {
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let name = field
            .downcast_ref::<CelString>()
            .map(CelString::inner)
            .unwrap_or_default();
        match self.0.variable(name) {
            Some(Ok(v)) => Ok(CowVal::Borrowed(v)),
            Some(Err(e)) => Err(e),
            None => Err(ExecutionError::no_such_key(name)),
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compiled(vars: &[(&str, &str)]) -> Vec<(String, Result<Arc<Program>, CelError>)> {
        vars.iter()
            .map(|(n, e)| (n.to_string(), Program::compile(e).map(Arc::new)))
            .collect()
    }

    #[test]
    fn variables_are_evaluated_once_and_only_when_read() {
        let a = Activation::new(
            vec![("object".into(), json!({"n": 2}))],
            None,
            compiled(&[
                ("double", "object.n * 2"),
                ("quad", "variables.double * 2"),
                ("unused", "object.n / 0"),
            ]),
        );
        assert_eq!(a.evaluated_variables(), 0);
        let p = Program::compile("variables.quad + variables.double").unwrap();
        assert_eq!(a.eval(&p).unwrap(), json!(12));
        assert_eq!(a.evaluated_variables(), 2, "unused is never evaluated");
        assert_eq!(a.eval(&p).unwrap(), json!(12));
    }

    #[test]
    fn a_failing_variable_fails_only_its_readers() {
        let a = Activation::new(
            vec![("object".into(), json!({}))],
            None,
            compiled(&[("bad", "object.missing"), ("good", "1")]),
        );
        let ok = Program::compile("variables.good == 1").unwrap();
        assert_eq!(a.eval(&ok).unwrap(), json!(true));
        let bad = Program::compile("variables.bad == 1").unwrap();
        assert_eq!(
            a.eval(&bad).unwrap_err(),
            CelError::Eval("no such key: missing".into())
        );
        let short = Program::compile("true || variables.bad == 1").unwrap();
        assert_eq!(a.eval(&short).unwrap(), json!(true));
    }
}
