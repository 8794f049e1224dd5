//! ListOptions as upstream validates them before a list or a watch (metav1 internalversion
//! validation): `resourceVersionMatch` and the watch-list options `sendInitialEvents`. A bad
//! combination is a 422 `ListOptions.meta.k8s.io "" is invalid: …`, so clients see upstream's text.

use std::collections::HashMap;

use crate::request::flag;
use crate::status::{ApiError, Cause};

const NOT_OLDER_THAN: &str = "NotOlderThan";
const EXACT: &str = "Exact";

/// What a watch was asked for beyond the legacy options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchList {
    /// `sendInitialEvents`: None when absent.
    pub send_initial_events: Option<bool>,
}

/// Validates the options of a list (`watch` false) or a watch; Ok carries the watch-list request.
pub fn validate(query: &HashMap<String, String>, watch: bool) -> Result<WatchList, ApiError> {
    let get = |k: &str| query.get(k).map(String::as_str).unwrap_or("");
    let matched = get("resourceVersionMatch");
    let send_initial_events = query.get("sendInitialEvents").map(|v| flag(v));
    let rv = get("resourceVersion");
    let cont = get("continue");
    let field = "resourceVersionMatch";
    let mut causes = Vec::new();
    if watch {
        if send_initial_events.is_some() && matched != NOT_OLDER_THAN {
            causes.push(Cause::forbidden(
                field,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !matched.is_empty() {
            if send_initial_events.is_none() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if matched != NOT_OLDER_THAN {
                causes.push(Cause::not_supported(field, matched, &[NOT_OLDER_THAN]));
            }
            if !cont.is_empty() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !matched.is_empty() {
            if rv.is_empty() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !cont.is_empty() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if matched != EXACT && matched != NOT_OLDER_THAN {
                causes.push(Cause::not_supported(
                    field,
                    matched,
                    &[EXACT, NOT_OLDER_THAN, ""],
                ));
            }
            if matched == EXACT && rv == "0" {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if send_initial_events.is_some() {
            causes.push(Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    if causes.is_empty() {
        Ok(WatchList {
            send_initial_events,
        })
    } else {
        Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(pairs: &[(&str, &str)], watch: bool) -> Option<String> {
        let q = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        validate(&q, watch).err().map(|e| e.message)
    }

    #[test]
    fn watch_list_needs_not_older_than() {
        assert_eq!(
            message(
                &[
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan")
                ],
                true
            ),
            None
        );
        assert_eq!(
            message(&[("sendInitialEvents", "true")], true).as_deref(),
            Some("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        );
        assert_eq!(
            message(&[("resourceVersionMatch", "NotOlderThan")], true).as_deref(),
            Some("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
        );
        let two = message(
            &[
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "Exact"),
            ],
            true,
        )
        .unwrap();
        assert!(two.contains("[resourceVersionMatch: Forbidden: sendInitialEvents requires"));
        assert!(two.contains(r#"Unsupported value: "Exact": supported values: "NotOlderThan"]"#));
    }

    #[test]
    fn list_rules() {
        assert_eq!(message(&[], false), None);
        assert_eq!(
            message(
                &[("resourceVersion", "5"), ("resourceVersionMatch", "Exact")],
                false
            ),
            None
        );
        assert!(message(&[("sendInitialEvents", "true")], false)
            .unwrap()
            .ends_with("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"));
        assert!(message(&[("resourceVersionMatch", "Exact")], false)
            .unwrap()
            .contains("resourceVersionMatch is forbidden unless resourceVersion is provided"));
        assert!(message(
            &[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
            false
        )
        .unwrap()
        .contains(r#"resourceVersionMatch "exact" is forbidden for resourceVersion "0""#));
    }
}
