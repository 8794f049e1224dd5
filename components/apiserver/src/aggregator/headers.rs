//! The front-proxy identity: the user kiln authenticated travels to the extension server as
//! X-Remote-User, one X-Remote-Group per group and X-Remote-Extra-<key> per extra value, which the
//! extension server believes because kiln's client certificate is the front-proxy one. Whatever
//! the client sent under those names is dropped first, so no client can claim another identity.

use std::collections::BTreeMap;

use http::header::{HeaderMap, HeaderName, HeaderValue};

pub const USER: &str = "x-remote-user";
pub const GROUP: &str = "x-remote-group";
pub const UID: &str = "x-remote-uid";
pub const EXTRA_PREFIX: &str = "x-remote-extra-";

/// Hop-by-hop headers (RFC 9110 §7.6.1) a proxy never forwards.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Drops hop-by-hop headers, and those the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        headers.remove(name);
    }
}

/// Percent-encodes an extra key for a header name, as upstream's SetAuthProxyHeaders does
/// (`url.PathEscape`), so `example.com/key` travels as `example.com%2fkey`.
fn escape_extra_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        let keep = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.to_ascii_lowercase()
}

/// Replaces every identity header with the authenticated user's; the client's credentials stay
/// with kiln (upstream's authentication filter removes Authorization once it has authenticated).
pub fn set_identity(
    headers: &mut HeaderMap,
    user: &str,
    groups: &[String],
    extra: &BTreeMap<String, Vec<String>>,
) {
    let spoofed: Vec<HeaderName> = headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k == USER
                || k == GROUP
                || k == UID
                || k.starts_with(EXTRA_PREFIX)
                || k.starts_with("impersonate-")
        })
        .cloned()
        .collect();
    for k in spoofed {
        headers.remove(k);
    }
    headers.remove(http::header::AUTHORIZATION);
    if let Ok(v) = HeaderValue::from_str(user) {
        headers.insert(USER, v);
    }
    for g in groups {
        if let Ok(v) = HeaderValue::from_str(g) {
            headers.append(GROUP, v);
        }
    }
    for (key, values) in extra {
        let Ok(name) = HeaderName::try_from(format!("{EXTRA_PREFIX}{}", escape_extra_key(key)))
        else {
            continue;
        };
        for value in values {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.append(name.clone(), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(headers: &HeaderMap, name: &str) -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn client_sent_identity_headers_are_replaced() {
        let mut h = HeaderMap::new();
        h.insert("X-Remote-User", HeaderValue::from_static("system:admin"));
        h.append("X-Remote-Group", HeaderValue::from_static("system:masters"));
        h.insert("X-Remote-Extra-Scopes", HeaderValue::from_static("all"));
        h.insert("Impersonate-User", HeaderValue::from_static("root"));
        h.insert("Authorization", HeaderValue::from_static("Bearer secret"));
        h.insert("Accept", HeaderValue::from_static("application/json"));
        let mut extra = BTreeMap::new();
        extra.insert(
            "authentication.kubernetes.io/pod-name".to_string(),
            vec!["p1".to_string()],
        );
        set_identity(
            &mut h,
            "alice",
            &["dev".to_string(), "system:authenticated".to_string()],
            &extra,
        );
        assert_eq!(all(&h, USER), ["alice"]);
        assert_eq!(all(&h, GROUP), ["dev", "system:authenticated"]);
        assert!(h.get("x-remote-extra-scopes").is_none());
        assert!(h.get("impersonate-user").is_none());
        assert!(h.get("authorization").is_none());
        assert_eq!(
            all(&h, "x-remote-extra-authentication.kubernetes.io%2fpod-name"),
            ["p1"]
        );
        assert_eq!(all(&h, "accept"), ["application/json"]);
    }

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        let mut h = HeaderMap::new();
        h.insert(
            "Connection",
            HeaderValue::from_static("keep-alive, X-Trace"),
        );
        h.insert("Keep-Alive", HeaderValue::from_static("timeout=5"));
        h.insert("X-Trace", HeaderValue::from_static("1"));
        h.insert("Transfer-Encoding", HeaderValue::from_static("chunked"));
        h.insert("Content-Type", HeaderValue::from_static("application/json"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.get("content-type").is_some());
    }
}
