//! A type-checking pass over a parsed expression, since the `cel` crate has no checker: variables
//! must be declared, fields selected on schema objects must exist, operators must have an
//! overload for their operand types, and the result type is returned so callers can require
//! `bool` (a rule) or `string` (a message expression). Errors read as cel-go's
//! (`ERROR: <input>:1:5: undefined field 'foo'` with the source line and a caret).
//!
//! What it does not cover, by design: function signatures beyond the common ones (an unknown
//! function's result is `Unknown`, never reported), undeclared functions (reported when called),
//! struct construction, and cel-go's full type-parameter unification (mixed-type branches and
//! elements become `dyn` instead of an error).

use std::collections::BTreeMap;

use ::cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

use super::program::Program;
use super::types::Ty;

/// The variables an expression may read, with their types.
#[derive(Debug, Clone, Default)]
pub struct Decls {
    vars: BTreeMap<String, Ty>,
}

impl Decls {
    pub fn new() -> Self {
        Decls::default()
    }

    pub fn var(mut self, name: &str, ty: Ty) -> Self {
        self.vars.insert(name.to_string(), ty);
        self
    }
}

/// Namespaces of global functions spelt like a field selection (`sets.contains(...)`).
const FUNCTION_NAMESPACES: &[&str] = &["optional", "sets", "math", "strings", "base64", "lists"];

/// Type identifiers usable as values (`type(x) == string`).
const TYPE_NAMES: &[&str] = &[
    "bool",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// Checks `program` against `decls`: its result type, or cel-go's issue text.
pub fn check(program: &Program, decls: &Decls) -> Result<Ty, String> {
    let inner = program.inner();
    let mut checker = Checker {
        decls,
        scopes: Vec::new(),
        issues: Vec::new(),
    };
    let ty = checker.expr(inner.expression());
    if checker.issues.is_empty() {
        return Ok(ty);
    }
    let info = inner.source_info();
    let text: Vec<String> = checker
        .issues
        .iter()
        .map(|(id, msg)| {
            let offset = info.offset_for(*id).map_or(0, |(start, _)| start as usize);
            render(&info.source, offset, msg)
        })
        .collect();
    Err(text.join("\n"))
}

/// cel-go's ToDisplayString: position, message, the line and a caret under the column.
fn render(source: &str, offset: usize, msg: &str) -> String {
    let mut line_no = 1;
    let mut line_start = 0;
    for (i, c) in source.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line_no += 1;
            line_start = i + 1;
        }
    }
    let line = source[line_start..].lines().next().unwrap_or("");
    let column = source
        .get(line_start..offset.max(line_start))
        .map_or(0, |s| s.chars().count());
    format!(
        "ERROR: <input>:{line_no}:{}: {msg}\n | {}\n | {}^",
        column + 1,
        line.replace('\t', " "),
        ".".repeat(column)
    )
}

struct Checker<'a> {
    decls: &'a Decls,
    /// Comprehension variables, innermost last.
    scopes: Vec<(String, Ty)>,
    issues: Vec<(u64, String)>,
}

impl Checker<'_> {
    fn issue(&mut self, id: u64, msg: String) -> Ty {
        self.issues.push((id, msg));
        Ty::Unknown
    }

    fn lookup(&self, name: &str) -> Option<Ty> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
            .or_else(|| self.decls.vars.get(name).cloned())
    }

    fn expr(&mut self, e: &IdedExpr) -> Ty {
        match &e.expr {
            Expr::Unspecified => Ty::Unknown,
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            },
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(s) => {
                let operand = self.expr(&s.operand);
                self.select(e.id, &operand, &s.field, s.test)
            }
            Expr::List(l) => {
                let mut elem: Option<Ty> = None;
                for item in &l.elements {
                    let t = self.expr(item);
                    elem = Some(match elem {
                        None => t,
                        Some(prev) => Ty::join(&prev, &t),
                    });
                }
                Ty::List(Box::new(elem.unwrap_or(Ty::Unknown)))
            }
            Expr::Map(m) => {
                let (mut key, mut value): (Option<Ty>, Option<Ty>) = (None, None);
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        let k = self.expr(&me.key);
                        let v = self.expr(&me.value);
                        key = Some(key.map_or(k.clone(), |p| Ty::join(&p, &k)));
                        value = Some(value.map_or(v.clone(), |p| Ty::join(&p, &v)));
                    }
                }
                Ty::Map(
                    Box::new(key.unwrap_or(Ty::Unknown)),
                    Box::new(value.unwrap_or(Ty::Unknown)),
                )
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        self.expr(&f.value);
                    }
                }
                Ty::Unknown
            }
            Expr::Comprehension(c) => {
                let range = self.expr(&c.iter_range);
                let (first, second) = match &range {
                    Ty::List(elem) => (Ty::Int, (**elem).clone()),
                    Ty::Map(k, v) => ((**k).clone(), (**v).clone()),
                    Ty::Dyn => (Ty::Dyn, Ty::Dyn),
                    Ty::Unknown => (Ty::Unknown, Ty::Unknown),
                    other => {
                        let msg = format!("expression of type '{other}' cannot be range of a comprehension (must be list, map, or dynamic)");
                        self.issue(c.iter_range.id, msg);
                        (Ty::Unknown, Ty::Unknown)
                    }
                };
                // One variable: a list's element or a map's key; two: index/key and value.
                let vars = match &c.iter_var2 {
                    None if matches!(range, Ty::List(_)) => vec![(c.iter_var.clone(), second)],
                    None => vec![(c.iter_var.clone(), first)],
                    Some(v2) => vec![(c.iter_var.clone(), first), (v2.clone(), second)],
                };
                let init = self.expr(&c.accu_init);
                let depth = self.scopes.len();
                self.scopes.extend(vars);
                self.scopes.push((c.accu_var.clone(), init.clone()));
                self.expr(&c.loop_cond);
                let step = self.expr(&c.loop_step);
                let accu = Ty::join(&init, &step);
                self.scopes.truncate(depth);
                self.scopes.push((c.accu_var.clone(), accu));
                let result = self.expr(&c.result);
                self.scopes.truncate(depth);
                result
            }
            Expr::Call(call) => {
                // `ns.f(x)` names a global function when `ns` is a function namespace and no
                // variable.
                if let Some(target) = &call.target {
                    if let Expr::Ident(root) = &target.expr {
                        if self.lookup(root).is_none()
                            && FUNCTION_NAMESPACES.contains(&root.as_str())
                        {
                            let args: Vec<Ty> = call.args.iter().map(|a| self.expr(a)).collect();
                            return namespaced_result(root, &call.func_name, &args);
                        }
                    }
                }
                let target = call.target.as_ref().map(|t| self.expr(t));
                let args: Vec<Ty> = call.args.iter().map(|a| self.expr(a)).collect();
                self.call(e.id, &call.func_name, target, &args)
            }
        }
    }

    fn ident(&mut self, id: u64, name: &str) -> Ty {
        if let Some(t) = self.lookup(name) {
            return t;
        }
        if TYPE_NAMES.contains(&name) {
            return Ty::Type;
        }
        self.issue(
            id,
            format!("undeclared reference to '{name}' (in container '')"),
        )
    }

    fn select(&mut self, id: u64, operand: &Ty, field: &str, test: bool) -> Ty {
        let result = match operand {
            Ty::Object(o) => match o.fields.get(field) {
                Some(t) => t.clone(),
                None => return self.issue(id, format!("undefined field '{field}'")),
            },
            Ty::Map(_, v) => (**v).clone(),
            Ty::Dyn => Ty::Dyn,
            // `authorizer.requestResource`.
            Ty::Authorizer => Ty::Authorizer,
            Ty::Unknown => Ty::Unknown,
            other => {
                return self.issue(
                    id,
                    format!("type '{other}' does not support field selection"),
                )
            }
        };
        if test {
            Ty::Bool
        } else {
            result
        }
    }

    fn no_overload(&mut self, id: u64, name: &str, target: Option<&Ty>, args: &[Ty]) -> Ty {
        let list: Vec<String> = args.iter().map(Ty::to_string).collect();
        let applied = match target {
            Some(t) => format!("{t}.({})", list.join(", ")),
            None => format!("({})", list.join(", ")),
        };
        self.issue(
            id,
            format!("found no matching overload for '{name}' applied to '{applied}'"),
        )
    }

    fn call(&mut self, id: u64, name: &str, target: Option<Ty>, args: &[Ty]) -> Ty {
        let all_known = args.iter().all(Ty::is_known);
        match (name, target.as_ref(), args) {
            ("_&&_" | "_||_", None, [a, b]) => {
                if [a, b].iter().any(|t| t.is_known() && **t != Ty::Bool) {
                    return self.no_overload(id, name, None, args);
                }
                Ty::Bool
            }
            ("!_", None, [a]) => {
                if a.is_known() && *a != Ty::Bool {
                    return self.no_overload(id, name, None, args);
                }
                Ty::Bool
            }
            ("_?_:_", None, [c, a, b]) => {
                if c.is_known() && *c != Ty::Bool {
                    return self.no_overload(id, name, None, args);
                }
                Ty::join(a, b)
            }
            ("_==_" | "_!=_", None, [a, b]) => {
                if a.is_scalar() && b.is_scalar() && a != b {
                    return self.no_overload(id, name, None, args);
                }
                Ty::Bool
            }
            ("_<_" | "_<=_" | "_>_" | "_>=_", None, [a, b]) => {
                if all_known && !comparable(a, b) {
                    return self.no_overload(id, name, None, args);
                }
                Ty::Bool
            }
            ("_+_" | "_-_" | "_*_" | "_/_" | "_%_", None, [a, b]) => match arithmetic(name, a, b) {
                Some(t) => t,
                None if all_known => self.no_overload(id, name, None, args),
                None => arithmetic_with_dyn(name, a, b).unwrap_or_else(|| Ty::join(a, b)),
            },
            ("-_", None, [a]) => {
                if a.is_known() && !matches!(a, Ty::Int | Ty::Double | Ty::Duration) {
                    return self.no_overload(id, name, None, args);
                }
                a.clone()
            }
            ("_[_]", None, [container, index]) => match (container, index) {
                (Ty::List(elem), i) if !i.is_known() || matches!(i, Ty::Int | Ty::Uint) => {
                    (**elem).clone()
                }
                (Ty::Map(_, v), _) => (**v).clone(),
                (Ty::Dyn, _) => Ty::Dyn,
                (Ty::Unknown | Ty::Object(_), _) => Ty::Unknown,
                _ if all_known => self.no_overload(id, name, None, args),
                _ => Ty::Unknown,
            },
            ("@in", None, [_, container]) => {
                if container.is_known()
                    && !matches!(container, Ty::List(_) | Ty::Map(..) | Ty::Object(_))
                {
                    return self.no_overload(id, name, None, args);
                }
                Ty::Bool
            }
            ("size", _, _) => {
                let subject = target.as_ref().or(args.first());
                if let Some(t) = subject {
                    if t.is_known()
                        && !matches!(t, Ty::String | Ty::Bytes | Ty::List(_) | Ty::Map(..))
                    {
                        return self.no_overload(id, name, target.as_ref(), args);
                    }
                }
                Ty::Int
            }
            (_, Some(Ty::Authorizer), _) => authorizer_result(name),
            (_, Some(t), _) => member_result(name, t, args),
            (_, None, _) => global_result(name),
        }
    }
}

fn comparable(a: &Ty, b: &Ty) -> bool {
    (a.is_numeric() && b.is_numeric())
        || (a == b
            && matches!(
                a,
                Ty::String | Ty::Bytes | Ty::Bool | Ty::Duration | Ty::Timestamp
            ))
}

fn arithmetic(op: &str, a: &Ty, b: &Ty) -> Option<Ty> {
    use Ty::*;
    Some(match (op, a, b) {
        (_, Int, Int) | (_, Uint, Uint) => a.clone(),
        ("_+_" | "_-_" | "_*_" | "_/_", Double, Double) => Double,
        ("_+_", String, String) => String,
        ("_+_", Bytes, Bytes) => Bytes,
        ("_+_", List(x), List(y)) => List(Box::new(Ty::join_elements(x, y))),
        ("_+_", Timestamp, Duration) | ("_+_", Duration, Timestamp) => Timestamp,
        ("_+_" | "_-_", Duration, Duration) => Duration,
        ("_-_", Timestamp, Timestamp) => Duration,
        ("_-_", Timestamp, Duration) => Timestamp,
        _ => return None,
    })
}

/// One operand known, the other dyn: cel-go keeps the overloads the known operand allows, and when
/// they all give one result type, that is the expression's type (`'at most ' + params.x + ' keys'`
/// is a string). None when the overloads disagree or neither operand is known.
fn arithmetic_with_dyn(op: &str, a: &Ty, b: &Ty) -> Option<Ty> {
    use Ty::*;
    let candidates = [
        Int,
        Uint,
        Double,
        String,
        Bytes,
        Duration,
        Timestamp,
        List(Box::new(Dyn)),
    ];
    let results: Vec<Ty> = match (a.is_known(), b.is_known()) {
        (true, false) => candidates
            .iter()
            .filter_map(|c| arithmetic(op, a, c))
            .collect(),
        (false, true) => candidates
            .iter()
            .filter_map(|c| arithmetic(op, c, b))
            .collect(),
        _ => return None,
    };
    let first = results.first()?;
    results.iter().all(|r| r == first).then(|| first.clone())
}

/// Result types of the member functions rules commonly call; others are unknown.
fn member_result(name: &str, target: &Ty, args: &[Ty]) -> Ty {
    let elem = match target {
        Ty::List(e) => (**e).clone(),
        _ => Ty::Unknown,
    };
    match name {
        "contains" | "startsWith" | "endsWith" | "matches" | "isSorted" | "hasValue" => Ty::Bool,
        "indexOf" | "lastIndexOf" => Ty::Int,
        "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "charAt" | "join"
        | "format" | "reverse" => Ty::String,
        "split" => Ty::List(Box::new(Ty::String)),
        "sum" | "min" | "max" => elem,
        "value" | "orValue" => match target {
            Ty::Optional(t) => (**t).clone(),
            _ => args.first().cloned().unwrap_or(Ty::Unknown),
        },
        "getFullYear" | "getMonth" | "getDayOfYear" | "getDayOfMonth" | "getDate"
        | "getDayOfWeek" | "getHours" | "getMinutes" | "getSeconds" | "getMilliseconds" => Ty::Int,
        _ => Ty::Unknown,
    }
}

fn global_result(name: &str) -> Ty {
    match name {
        "int" => Ty::Int,
        "uint" => Ty::Uint,
        "double" => Ty::Double,
        "string" => Ty::String,
        "bytes" => Ty::Bytes,
        "bool" => Ty::Bool,
        "duration" => Ty::Duration,
        "timestamp" => Ty::Timestamp,
        "type" => Ty::Type,
        "dyn" => Ty::Dyn,
        "matches" | "contains" | "startsWith" | "endsWith" => Ty::Bool,
        _ => Ty::Unknown,
    }
}

fn namespaced_result(namespace: &str, name: &str, args: &[Ty]) -> Ty {
    match (namespace, name) {
        ("sets", _) => Ty::Bool,
        ("optional", "of" | "ofNonZeroValue") => {
            Ty::Optional(Box::new(args.first().cloned().unwrap_or(Ty::Unknown)))
        }
        ("optional", "none") => Ty::Optional(Box::new(Ty::Unknown)),
        ("strings", "quote") | ("base64", "encode") => Ty::String,
        ("base64", "decode") => Ty::Bytes,
        _ => Ty::Unknown,
    }
}

/// upstream's authz library: builders stay `Authorizer`-typed; the decision's accessors are typed.
fn authorizer_result(name: &str) -> Ty {
    match name {
        "allowed" | "errored" => Ty::Bool,
        "reason" | "error" => Ty::String,
        _ => Ty::Authorizer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn self_decls() -> Decls {
        let schema = json!({"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
        let t = Ty::from_schema(&schema, false);
        Decls::new().var("self", t.clone()).var("oldSelf", t)
    }

    fn run(expr: &str) -> Result<Ty, String> {
        check(&Program::compile(expr).unwrap(), &self_decls())
    }

    #[test]
    fn well_typed_rules_have_their_result_type() {
        for (expr, ty) in [
            ("self.replicas <= 5", Ty::Bool),
            ("self.replicas + 1", Ty::Int),
            ("self.name.startsWith('a')", Ty::Bool),
            (
                "size(self.tags) > 0 && self.tags.all(t, t.size() < 5)",
                Ty::Bool,
            ),
            (
                "self.tags.map(t, t.upperAscii())",
                Ty::List(Box::new(Ty::String)),
            ),
            ("self.labels['a']", Ty::String),
            ("has(self.extra.anything) || self.extra.x.y == 1", Ty::Bool),
            ("self.replicas == oldSelf.replicas", Ty::Bool),
            ("self.tags.exists(t, t == self.name)", Ty::Bool),
            ("'x' + self.name", Ty::String),
            ("sets.contains(self.tags, ['a'])", Ty::Bool),
            ("self.replicas < 2.5", Ty::Bool),
            ("type(self.name) == string", Ty::Bool),
        ] {
            assert_eq!(run(expr), Ok(ty), "{expr}");
        }
    }

    #[test]
    fn undefined_fields_and_variables_are_reported_like_cel_go() {
        assert_eq!(
            run("self.replicaz > 1").unwrap_err(),
            "ERROR: <input>:1:5: undefined field 'replicaz'\n | self.replicaz > 1\n | ....^"
        );
        let err = run("has(self.nope)").unwrap_err();
        assert!(err.contains("undefined field 'nope'"), "{err}");
        assert_eq!(
            run("other.x == 1").unwrap_err(),
            "ERROR: <input>:1:1: undeclared reference to 'other' (in container '')\n | other.x == 1\n | ^"
        );
        let err = run("self.tags.all(t, t.nope)").unwrap_err();
        assert!(
            err.contains("type 'string' does not support field selection"),
            "{err}"
        );
    }

    #[test]
    fn a_known_operand_decides_the_type_of_arithmetic_with_dyn() {
        assert_eq!(run("'at most ' + dyn(1) + ' keys'"), Ok(Ty::String));
        assert_eq!(run("dyn(1) + 2"), Ok(Ty::Int));
        // duration + timestamp and duration + duration differ: no single type.
        assert_eq!(run("duration('1s') + dyn(1)"), Ok(Ty::Dyn));
    }

    #[test]
    fn operator_mismatches_are_no_matching_overload() {
        let err = run("self.replicas > 'a'").unwrap_err();
        assert!(
            err.starts_with("ERROR: <input>:1:15: found no matching overload for '_>_' applied to '(int, string)'"),
            "{err}"
        );
        let err = run("self.name == 1").unwrap_err();
        assert!(err.contains("'_==_' applied to '(string, int)'"), "{err}");
        assert!(run("self.name + 1").is_err());
        assert!(run("!self.replicas").is_err());
    }
}
