//! ObjectMeta as the generic registry handles it: name validation (a DNS-1123 subdomain),
//! generateName, the fields the server owns (uid, creationTimestamp, resourceVersion), label
//! selectors of list and deletecollection, and JSON merge patch.

use rand::Rng;
use serde_json::{json, Map, Value};

use super::status::{ApiError, Cause};

const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn is_dns1123_subdomain(name: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= DNS1123_SUBDOMAIN_MAX && name.split('.').all(label_ok)
}

/// ValidateObjectMeta's name checks.
pub fn validate_name(name: &str) -> Vec<Cause> {
    if name.is_empty() {
        return vec![Cause::required(
            "metadata.name",
            "name or generateName is required",
        )];
    }
    if !is_dns1123_subdomain(name) {
        return vec![Cause::invalid(
            "metadata.name",
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        )];
    }
    Vec::new()
}

/// `generateName` plus five random characters when no name is given, as the registry's
/// SimpleNameGenerator does.
pub fn generate_name(obj: &mut Value) {
    let has_name = obj["metadata"]["name"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let base = obj["metadata"]["generateName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if has_name || base.is_empty() {
        return;
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    obj["metadata"]["name"] = json!(format!("{base}{suffix}"));
}

pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` (equality- and set-based, as labels.Parse takes them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selector(Vec<Requirement>);

/// Splits on the commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, ApiError> {
        let bad = || ApiError::bad_request(format!("unable to parse requirement: {s:?}"));
        let mut out = Vec::new();
        for part in split_top(s).into_iter().map(str::trim) {
            if part.is_empty() {
                continue;
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(v).ok_or_else(bad)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(v).ok_or_else(bad)?)
            } else if part.contains(char::is_whitespace) || part.contains('(') {
                return Err(bad());
            } else {
                Requirement::Exists(part.into())
            };
            out.push(req);
        }
        Ok(Selector(out))
    }

    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Some(t) = target.as_object_mut() {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn selectors_match_as_labels_parse_them() {
        let l = labels(json!({"a": "1", "b": "2"}));
        for (sel, want) in [
            ("a=1", true),
            ("a==1,b=2", true),
            ("a!=1", false),
            ("a in (1, 3)", true),
            ("b notin (2)", false),
            ("c", false),
            ("!c", true),
            ("", true),
        ] {
            assert_eq!(Selector::parse(sel).unwrap().matches(&l), want, "{sel}");
        }
        assert!(Selector::parse("a in 1").is_err());
    }

    #[test]
    fn names_must_be_subdomains() {
        assert!(validate_name("rest-flunder-12").is_empty());
        assert_eq!(validate_name("")[0].reason, "FieldValueRequired");
        assert_eq!(validate_name("Bad_Name")[0].reason, "FieldValueInvalid");
    }

    #[test]
    fn merge_patch_replaces_and_removes() {
        let mut t = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        merge_patch(
            &mut t,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": "s"}),
        );
        assert_eq!(
            t,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": "s"})
        );
        let mut named = json!({"metadata": {"generateName": "g-"}});
        generate_name(&mut named);
        assert!(named["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("g-"));
        assert_eq!(new_uid().len(), 36);
    }
}
