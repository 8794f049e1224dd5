//! Kubernetes' CEL list library (k8s.io/apiserver/pkg/cel/library/lists.go: `isSorted`, `sum`,
//! `min`, `max`, `indexOf`, `lastIndexOf` on lists) and cel-go's sets extension
//! (`sets.contains`, `sets.equivalent`, `sets.intersects`), which CRD rules may use and the `cel`
//! crate does not ship. String functions (`lowerAscii`, `split`, `join`, `indexOf` on strings, ...)
//! come from the crate's strings extension.

use std::cmp::Ordering;
use std::sync::Arc;

use ::cel::common::types::{DYN_TYPE, LIST_TYPE};
use ::cel::common::value::{CowVal, Val};
use ::cel::{DeclarationError, Env, ExecutionError, Value};

pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    env.add_overload(
        "sets.contains",
        "list_sets_contains_list",
        vec![LIST_TYPE, LIST_TYPE],
        sets_contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "list_sets_equivalent_list",
        vec![LIST_TYPE, LIST_TYPE],
        sets_equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "list_sets_intersects_list",
        vec![LIST_TYPE, LIST_TYPE],
        sets_intersects,
    )?;
    Ok(())
}

fn value(arg: &CowVal<'_, '_>) -> Result<Value, ExecutionError> {
    Value::try_from(arg.as_ref())
}

/// The elements of the receiver list (argument 0).
fn elements(args: &[CowVal<'_, '_>], function: &str) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match args.first().map(value).transpose()? {
        Some(Value::List(items)) => Ok(items),
        Some(other) => Err(ExecutionError::function_error(
            function,
            format!("not a list: {other:?}"),
        )),
        None => Err(ExecutionError::missing_argument_or_target()),
    }
}

/// The `i`-th argument, converted.
fn nth(args: &[CowVal<'_, '_>], i: usize) -> Result<Value, ExecutionError> {
    args.get(i)
        .map(value)
        .transpose()?
        .ok_or_else(|| ExecutionError::invalid_argument_count(i + 1, args.len()))
}

fn owned<'b, 'v>(v: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let boxed: Box<dyn Val> = v.try_into()?;
    Ok(CowVal::Owned(boxed))
}

/// Upstream compares only values of one comparable type; mixed or map/list elements are errors.
fn compare(a: &Value, b: &Value, function: &str) -> Result<Ordering, ExecutionError> {
    let comparable = matches!(
        a,
        Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::String(_) | Value::Bool(_)
    ) || matches!(a, Value::Duration(_) | Value::Timestamp(_));
    match a.partial_cmp(b) {
        Some(order) if comparable => Ok(order),
        _ => Err(ExecutionError::function_error(
            function,
            format!("cannot compare {a:?} and {b:?}"),
        )),
    }
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(&args, "isSorted")?;
    for pair in items.windows(2) {
        if compare(&pair[0], &pair[1], "isSorted")? == Ordering::Greater {
            return owned(Value::Bool(false));
        }
    }
    owned(Value::Bool(true))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(&args, "sum")?;
    let overflow = || ExecutionError::function_error("sum", "integer overflow");
    let mut total = match items.first() {
        None => return owned(Value::Int(0)),
        Some(first) => first.clone(),
    };
    for item in &items[1..] {
        total = match (&total, item) {
            (Value::Int(a), Value::Int(b)) => Value::Int(a.checked_add(*b).ok_or_else(overflow)?),
            (Value::UInt(a), Value::UInt(b)) => {
                Value::UInt(a.checked_add(*b).ok_or_else(overflow)?)
            }
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Duration(a), Value::Duration(b)) => {
                Value::Duration(a.checked_add(b).ok_or_else(overflow)?)
            }
            (a, b) => {
                return Err(ExecutionError::function_error(
                    "sum",
                    format!("cannot add {a:?} and {b:?}"),
                ))
            }
        };
    }
    owned(total)
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    keep: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(&args, function)?;
    let mut best = items.first().cloned().ok_or_else(|| {
        ExecutionError::function_error(function, format!("{function}(list) called on empty list"))
    })?;
    for item in &items[1..] {
        if compare(item, &best, function)? == keep {
            best = item.clone();
        }
    }
    owned(best)
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", Ordering::Greater)
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(&args, "indexOf")?;
    let wanted = nth(&args, 1)?;
    let found = items.iter().position(|v| *v == wanted);
    owned(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(&args, "lastIndexOf")?;
    let wanted = nth(&args, 1)?;
    let found = items.iter().rposition(|v| *v == wanted);
    owned(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn two_lists(args: &[CowVal<'_, '_>]) -> Result<(Vec<Value>, Vec<Value>), ExecutionError> {
    match (nth(args, 0)?, nth(args, 1)?) {
        (Value::List(a), Value::List(b)) => Ok((a.to_vec(), b.to_vec())),
        _ => Err(ExecutionError::function_error(
            "sets",
            "arguments must be lists",
        )),
    }
}

fn contains_all(haystack: &[Value], needles: &[Value]) -> bool {
    needles.iter().all(|n| haystack.contains(n))
}

fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args)?;
    owned(Value::Bool(contains_all(&a, &b)))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args)?;
    owned(Value::Bool(contains_all(&a, &b) && contains_all(&b, &a)))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args)?;
    owned(Value::Bool(a.iter().any(|x| b.contains(x))))
}

#[cfg(test)]
mod tests {
    use crate::cel::Program;
    use serde_json::{json, Value};

    fn eval(expr: &str) -> Value {
        let this = json!({"ints": [3, 1, 2], "sorted": ["a", "b", "b"], "empty": [],
                          "names": ["x", "y", "x"], "csv": "a,b,c"});
        Program::compile(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .eval(&[("self", &this)])
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    #[test]
    fn list_library() {
        assert_eq!(eval("self.ints.isSorted()"), json!(false));
        assert_eq!(eval("self.sorted.isSorted()"), json!(true));
        assert_eq!(eval("self.ints.sum()"), json!(6));
        assert_eq!(eval("self.empty.sum()"), json!(0));
        assert_eq!(eval("[1.5, 2.0].sum()"), json!(3.5));
        assert_eq!(eval("self.ints.min()"), json!(1));
        assert_eq!(eval("self.ints.max()"), json!(3));
        assert_eq!(eval("self.names.indexOf('x')"), json!(0));
        assert_eq!(eval("self.names.lastIndexOf('x')"), json!(2));
        assert_eq!(eval("self.names.indexOf('z')"), json!(-1));
    }

    #[test]
    fn strings_extension_and_string_index_of_still_work() {
        assert_eq!(eval("self.csv.split(',')"), json!(["a", "b", "c"]));
        assert_eq!(eval("self.csv.split(',').join('-')"), json!("a-b-c"));
        assert_eq!(eval("'AbC'.lowerAscii()"), json!("abc"));
        assert_eq!(eval("self.csv.indexOf('b')"), json!(2));
        assert_eq!(
            eval("self.csv.endsWith('c') && self.csv.contains('b')"),
            json!(true)
        );
    }

    #[test]
    fn sets_extension() {
        assert_eq!(eval("sets.contains(self.names, ['y'])"), json!(true));
        assert_eq!(eval("sets.equivalent(['x', 'y'], self.names)"), json!(true));
        assert_eq!(eval("sets.intersects(self.names, ['q'])"), json!(false));
    }

    #[test]
    fn min_of_empty_list_is_an_error() {
        let p = Program::compile("self.min()").unwrap();
        let err = p.eval(&[("self", &json!([]))]).unwrap_err().to_string();
        assert!(err.contains("called on empty list"), "{err}");
    }
}
