//! CEL for CustomResourceDefinition validation rules (`x-kubernetes-validations`), on the `cel`
//! crate: compiling and evaluating expressions over JSON (`program.rs`, `convert.rs`), the
//! Kubernetes library functions the crate lacks (`library.rs`), and apiextensions' rule semantics
//! — messages, reasons, field paths, transition rules — producing field causes (`rules.rs`), also
//! over a whole schema tree (`tree.rs`).

mod activation;
pub mod authz;
mod check;
mod convert;
mod library;
pub mod mutation;
mod program;
mod rules;
mod schema_check;
mod tree;
mod types;

pub use activation::Activation;
pub use check::{check, Decls};
pub use program::{Bindings, Program};
pub use rules::{check_rules, RuleSet};
pub use schema_check::check_schema_rules;
pub use tree::validate_tree;
pub use types::Ty;

/// What compiling or evaluating an expression can fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    /// The parser's report, upstream's shape: `ERROR: <input>:1:6: ...` with the source line and
    /// a caret under the column.
    #[error("compilation failed: {0}")]
    Compile(String),
    /// A runtime error in cel-go's wording where it differs (`no such key: x`).
    #[error("{0}")]
    Eval(String),
    /// A call matched no overload (a value of an unexpected type reached an operator or function).
    #[error("no such overload: {0}")]
    NoSuchOverload(String),
    /// The result has no JSON form (a type, an optional, ...).
    #[error("result has no JSON form: {0}")]
    NotJson(String),
}

/// `IDENT ::= [_a-zA-Z][_a-zA-Z0-9]* - RESERVED`, as upstream's `isCELIdentifier`.
pub fn is_identifier(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&name)
}
