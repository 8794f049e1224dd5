//! Upstream's field validators that a PodDisruptionBudget needs, with their exact messages:
//! int-or-percent values (apps validation), label selectors (metav1 validation, which also checks
//! qualified names and label values) and metav1.Conditions. Pure functions over JSON.

use serde_json::Value;

use crate::registry::dns_names::SUBDOMAIN_MSG;
use crate::status::Cause;

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const PERCENT_MSG: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
const REASON_MSG: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let ext = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(ext)
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

pub fn subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !s.split('.').all(is_dns_label) {
        errs.push(SUBDOMAIN_MSG.to_string());
    }
    errs
}

/// Upstream's `validation.IsQualifiedName`.
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!("a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    errs
}

/// Upstream's `validation.IsValidLabelValue`.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(LABEL_VALUE_MSG.to_string());
    }
    errs
}

fn label_name(causes: &mut Vec<Cause>, name: &str, field: &str) {
    for msg in qualified_name_errors(name) {
        causes.push(Cause::invalid(field, &Value::from(name), &msg));
    }
}

/// metav1 validation's `ValidateLabelSelector` (label values in expressions checked too).
pub fn label_selector(selector: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if selector.is_null() {
        return causes;
    }
    let labels_field = format!("{field}.matchLabels");
    for (k, v) in selector["matchLabels"].as_object().into_iter().flatten() {
        label_name(&mut causes, k, &labels_field);
        let v = v.as_str().unwrap_or("");
        for msg in label_value_errors(v) {
            causes.push(Cause::invalid(&labels_field, &Value::from(v), &msg));
        }
    }
    for (i, expr) in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{field}.matchExpressions[{i}]");
        let values: Vec<&str> = expr["values"]
            .as_array()
            .map(|l| l.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let operator = expr["operator"].as_str().unwrap_or("");
        match operator {
            "In" | "NotIn" if values.is_empty() => causes.push(Cause::required(
                &format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(Cause::forbidden(
                &format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(Cause::invalid(
                &format!("{at}.operator"),
                &Value::from(other),
                "not a valid selector operator",
            )),
        }
        label_name(
            &mut causes,
            expr["key"].as_str().unwrap_or(""),
            &format!("{at}.key"),
        );
        for (j, v) in values.iter().enumerate() {
            for msg in label_value_errors(v) {
                causes.push(Cause::invalid(
                    &format!("{at}.values[{j}]"),
                    &Value::from(*v),
                    &msg,
                ));
            }
        }
    }
    causes
}

/// Go's `%#v` of an intstr.IntOrString value, as field errors print it.
pub fn go_int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => format!("intstr.IntOrString{{Type:1, IntVal:0, StrVal:{s:?}}}"),
        other => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            other.as_i64().unwrap_or(0)
        ),
    }
}

/// `N` of an `N%` string, when it is one (upstream's `getPercentValue`).
pub fn percent(s: &str) -> Option<i64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// apps validation's `ValidatePositiveIntOrPercent` followed by `IsNotMoreThan100Percent`.
pub fn int_or_percent(value: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    match value {
        Value::String(s) => match percent(s) {
            None => causes.push(Cause::invalid_raw(
                field,
                &go_int_or_string(value),
                PERCENT_MSG,
            )),
            Some(p) if p > 100 => causes.push(Cause::invalid_raw(
                field,
                &go_int_or_string(value),
                "must not be greater than 100%",
            )),
            Some(_) => {}
        },
        other if other.as_i64().is_some_and(|n| n < 0) => causes.push(Cause::invalid(
            field,
            other,
            "must be greater than or equal to 0",
        )),
        _ => {}
    }
    causes
}

fn is_condition_reason(s: &str) -> bool {
    let b = s.as_bytes();
    let mid = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':');
    !b.is_empty()
        && b[0].is_ascii_alphabetic()
        && (b.len() == 1 || b[b.len() - 1].is_ascii_alphanumeric() || b[b.len() - 1] == b'_')
        && b.iter().all(mid)
}

fn too_long(field: &str, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooLong",
        message: format!("Too long: may not be more than {max} bytes"),
        field: field.to_string(),
    }
}

/// metav1 validation's `ValidateConditions`.
pub fn conditions(list: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in list.as_array().into_iter().flatten().enumerate() {
        let at = format!("{field}[{i}]");
        let type_ = c["type"].as_str().unwrap_or("");
        if seen.contains(&type_) {
            causes.push(Cause::duplicate(&format!("{at}.type"), &Value::from(type_)));
        } else {
            seen.push(type_);
        }
        label_name(&mut causes, type_, &format!("{at}.type"));
        let status = c["status"].as_str().unwrap_or("");
        if !matches!(status, "True" | "False" | "Unknown") {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                message: format!(
                    "Unsupported value: {status:?}: supported values: \"False\", \"True\", \"Unknown\""
                ),
                field: format!("{at}.status"),
            });
        }
        if c["observedGeneration"].as_i64().is_some_and(|g| g < 0) {
            causes.push(Cause::invalid(
                &format!("{at}.observedGeneration"),
                &c["observedGeneration"],
                "must be greater than or equal to zero",
            ));
        }
        if c["lastTransitionTime"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required(
                &format!("{at}.lastTransitionTime"),
                "must be set",
            ));
        }
        let reason = c["reason"].as_str().unwrap_or("");
        if reason.is_empty() {
            causes.push(Cause::required(&format!("{at}.reason"), "must be set"));
        } else {
            if !is_condition_reason(reason) {
                causes.push(Cause::invalid(
                    &format!("{at}.reason"),
                    &Value::from(reason),
                    REASON_MSG,
                ));
            }
            if reason.len() > 1024 {
                causes.push(too_long(&format!("{at}.reason"), 1024));
            }
        }
        if c["message"].as_str().is_some_and(|m| m.len() > 32 * 1024) {
            causes.push(too_long(&format!("{at}.message"), 32 * 1024));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn qualified_names_and_label_values() {
        assert!(qualified_name_errors("app").is_empty());
        assert!(qualified_name_errors("example.com/App_1").is_empty());
        assert_eq!(
            qualified_name_errors("-x"),
            [format!("name part {QUALIFIED_NAME_MSG}")]
        );
        assert_eq!(
            qualified_name_errors("/x"),
            ["prefix part must be non-empty"]
        );
        assert_eq!(qualified_name_errors("a/b/c").len(), 1);
        assert!(label_value_errors("").is_empty());
        assert_eq!(label_value_errors("bad value"), [LABEL_VALUE_MSG]);
    }

    #[test]
    fn selectors_are_checked_as_upstream() {
        let causes = label_selector(
            &json!({"matchLabels": {"app": "bad value"},
                    "matchExpressions": [{"key": "k", "operator": "In"},
                                         {"key": "k", "operator": "Exists", "values": ["v"]},
                                         {"key": "k", "operator": "Near", "values": ["v"]}]}),
            "spec.selector",
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.selector.matchLabels",
                "spec.selector.matchExpressions[0].values",
                "spec.selector.matchExpressions[1].values",
                "spec.selector.matchExpressions[2].operator",
            ]
        );
        assert_eq!(
            causes[1].message,
            "Required value: must be specified when `operator` is 'In' or 'NotIn'"
        );
        assert_eq!(
            causes[3].message,
            "Invalid value: \"Near\": not a valid selector operator"
        );
        assert!(label_selector(&Value::Null, "spec.selector").is_empty());
    }

    #[test]
    fn int_or_percent_values() {
        assert!(int_or_percent(&json!(2), "f").is_empty());
        assert!(int_or_percent(&json!("100%"), "f").is_empty());
        assert_eq!(
            int_or_percent(&json!(-1), "f")[0].message,
            "Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            int_or_percent(&json!("101%"), "f")[0].message,
            "Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"101%\"}: must not be greater than 100%"
        );
        assert_eq!(
            int_or_percent(&json!("5"), "f")[0].message,
            format!("Invalid value: intstr.IntOrString{{Type:1, IntVal:0, StrVal:\"5\"}}: {PERCENT_MSG}")
        );
        assert_eq!(percent("50%"), Some(50));
        assert_eq!(percent("%"), None);
    }

    #[test]
    fn conditions_need_reason_status_and_time() {
        let ok = json!([{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                         "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
        assert!(conditions(&ok, "status.conditions").is_empty());
        let bad = json!([{"type": "A", "status": "Maybe", "reason": "9lives"},
                         {"type": "A", "status": "True", "reason": "R", "lastTransitionTime": "t"}]);
        let fields: Vec<String> = conditions(&bad, "status.conditions")
            .into_iter()
            .map(|c| format!("{} {}", c.field, c.reason))
            .collect();
        assert_eq!(
            fields,
            [
                "status.conditions[0].status FieldValueNotSupported",
                "status.conditions[0].lastTransitionTime FieldValueRequired",
                "status.conditions[0].reason FieldValueInvalid",
                "status.conditions[1].type FieldValueDuplicate",
            ]
        );
    }
}
