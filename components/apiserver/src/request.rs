//! The parsed request as the layers below HTTP see it: which resource (`Target`), who asked
//! (`Requester`) and upstream's verb for it. Lives below `handlers` so admission and audit can take a
//! request without importing the HTTP layer.

use std::collections::HashMap;

use axum::http::Method;

use crate::registry::ResourceSpec;

/// The parsed, authorized request a generic handler serves.
pub struct Target {
    pub spec: &'static ResourceSpec,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub status: bool,
    /// Who asked: admission checks the user, managedFields record the manager. Empty for the
    /// server's own writes.
    pub requester: Requester,
}

#[derive(Debug, Clone, Default)]
pub struct Requester {
    pub user: Option<crate::auth::User>,
    /// `fieldManager`, else the User-Agent's program name; None = not recorded.
    pub manager: Option<String>,
}

impl Target {
    pub fn key(&self, name: &str) -> String {
        self.spec.key(self.namespace.as_deref(), name)
    }
}

/// A boolean query parameter as upstream decodes it.
pub fn flag(v: &str) -> bool {
    // Upstream's query decoder (Convert_Slice_string_To_bool): a present parameter is true unless it is
    // "0" or "false" in any case. Clients rely on it: the Python client sends `watch=True`.
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// Upstream's verb for a request (`get`, `list`, `watch`, `create`, ...), as RBAC and audit name it.
pub(crate) fn upstream_verb(
    method: &Method,
    has_name: bool,
    query: &HashMap<String, String>,
) -> &'static str {
    let watch = query.get("watch").is_some_and(|v| flag(v));
    match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if has_name => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if has_name => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_flag_is_true_unless_zero_or_false() {
        for v in ["true", "True", "1", "t", "yes", ""] {
            assert!(flag(v), "{v:?}");
        }
        for v in ["false", "False", "FALSE", "0"] {
            assert!(!flag(v), "{v:?}");
        }
    }
}
