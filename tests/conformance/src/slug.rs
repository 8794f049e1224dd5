//! Stable names for entries: a codename such as
//! `[sig-node] Pods should get a host IP [NodeConformance] [Conformance]` becomes
//! `sig-node-pods-should-get-a-host-ip-nodeconformance`: lowercase, every run of other characters one
//! `-`, and the `[Conformance]` every entry carries dropped. `passing.txt` and JUnit use these.

/// The slug of a codename.
pub fn slug(codename: &str) -> String {
    let mut out = String::with_capacity(codename.len());
    for ch in codename.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_end_matches('-');
    trimmed
        .strip_suffix("-conformance")
        .unwrap_or(trimmed)
        .to_string()
}

/// The SIG of a codename (`sig-node` from `[sig-node] …`), or `other`.
pub fn sig(codename: &str) -> &str {
    codename
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .map(|(s, _)| s)
        .filter(|s| s.starts_with("sig-"))
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_lowercase_dashed_without_the_conformance_tag() {
        assert_eq!(
            slug("[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"),
            "sig-node-pods-should-get-a-host-ip-nodeconformance"
        );
        assert_eq!(
            slug("[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate everything except 'skip-me' configmaps [Conformance]"),
            "sig-api-machinery-admissionwebhook-privileged-clusteradmin-should-mutate-everything-except-skip-me-configmaps"
        );
    }

    #[test]
    fn sig_is_the_leading_tag() {
        assert_eq!(
            sig("[sig-network] DNS should provide DNS for the cluster [Conformance]"),
            "sig-network"
        );
        assert_eq!(sig("no tag"), "other");
    }
}
