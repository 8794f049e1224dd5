//! Why an entry without a kiln test cannot pass yet, in one line: matched by a part of its codename,
//! first match wins. Each reason names what kiln lacks (and the issue that delivers it), so the report
//! says what to build, not only that something failed.

/// (part of the codename, reason)
pub const REASONS: &[(&str, &str)] = &[
    ("[sig-apps] Job ", "Jobs are not served (issue #23)"),
    (
        "[sig-apps] StatefulSet",
        "the kubelet does not reject a pod whose hostPort is taken (no Failed pod for the StatefulSet to recreate)",
    ),
    (
        "PersistentVolume",
        "PersistentVolumes are not served (issue #23)",
    ),
    ("CSI", "CSI objects are not served (issue #23)"),
];

/// The one-line reason of an entry no case covers.
pub fn unwritten(codename: &str) -> String {
    let why = REASONS
        .iter()
        .find(|(part, _)| codename.contains(part))
        .map(|(_, r)| *r);
    match why {
        Some(r) => format!("no kiln test yet: {r}"),
        None => "no kiln test yet".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_matching_part_gives_the_reason() {
        assert_eq!(
            super::unwritten("[sig-apps] Job should run a job to completion [Conformance]"),
            "no kiln test yet: Jobs are not served (issue #23)"
        );
        assert_eq!(
            super::unwritten("[sig-node] Something else"),
            "no kiln test yet"
        );
    }
}
