//! Audit annotations PodSecurity adds to the request's audit event, under upstream's keys
//! (`pod-security.kubernetes.io/enforce-policy`, `…/audit-violations`, `…/exempt`, `…/error`),
//! through the audit log's [`crate::audit::annotate`] (nothing when the request is not audited).

/// The annotation key upstream uses for `key`.
pub fn key(key: &str) -> String {
    format!("{}{key}", super::api::PREFIX)
}

/// Records `pod-security.kubernetes.io/<key>` = `value` on the current request's audit event.
pub fn annotate(key_suffix: &str, value: &str) {
    let key = key(key_suffix);
    tracing::debug!(%key, %value, "PodSecurity audit annotation");
    crate::audit::annotate(&key, value);
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_carry_upstreams_prefix() {
        assert_eq!(
            super::key("audit-violations"),
            "pod-security.kubernetes.io/audit-violations"
        );
        // Outside an audited request nothing happens (and nothing panics).
        super::annotate("exempt", "namespace");
    }
}
