//! Upstream's DNS name checks (apimachinery's IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label)
//! and the messages its validation errors carry, for every kind whose names or fields must be DNS
//! names. One copy, so a kind's 422 reads the same as every other's.

pub const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
pub const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
pub const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Dot-separated labels, at most 253 characters.
pub fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

/// A label that starts with a letter.
pub fn is_dns1035(s: &str) -> bool {
    is_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream() {
        assert!(is_label("web-1"));
        assert!(!is_label("-web") && !is_label("web-") && !is_label("Web") && !is_label(""));
        assert!(!is_label(&"a".repeat(64)));
        assert!(is_subdomain("example.com") && !is_subdomain("example..com"));
        assert!(!is_subdomain(&format!("{}.com", "a".repeat(250))));
        assert!(is_dns1035("v1beta1") && !is_dns1035("1v"));
    }
}
