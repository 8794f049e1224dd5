//! Kernel settings the Service datapath needs, set per network namespace at start.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    #[error("cannot set {name}=1: {source}")]
    Write {
        name: &'static str,
        source: std::io::Error,
    },
}

/// (sysctl, required). bridge-nf-call-iptables only exists with br_netfilter; without it, pod → ClusterIP →
/// pod on the same bridge skips the nat hooks about half the time (lab NOTES, pitfall 7).
const SETTINGS: &[(&str, bool)] = &[
    ("net/ipv4/ip_forward", true),
    ("net/bridge/bridge-nf-call-iptables", false),
];

/// Writes `1` to every setting under `proc_sys` (normally `/proc/sys`); returns the names it set.
/// An optional setting whose file does not exist is skipped.
pub fn ensure(proc_sys: &Path) -> Result<Vec<&'static str>, SysctlError> {
    let mut set = Vec::new();
    for (name, required) in SETTINGS {
        let path = proc_sys.join(name);
        if !required && !path.exists() {
            tracing::info!(sysctl = name, "not present, skipped");
            continue;
        }
        if std::fs::read_to_string(&path).is_ok_and(|v| v.trim() == "1") {
            set.push(*name);
            continue;
        }
        std::fs::write(&path, "1\n").map_err(|source| SysctlError::Write { name, source })?;
        tracing::info!(sysctl = name, "set to 1");
        set.push(*name);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_required_and_present_optional_settings() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("net/ipv4")).unwrap();
        std::fs::write(dir.path().join("net/ipv4/ip_forward"), "0\n").unwrap();
        assert_eq!(ensure(dir.path()).unwrap(), vec!["net/ipv4/ip_forward"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("net/ipv4/ip_forward")).unwrap(),
            "1\n"
        );

        std::fs::create_dir_all(dir.path().join("net/bridge")).unwrap();
        std::fs::write(dir.path().join("net/bridge/bridge-nf-call-iptables"), "0\n").unwrap();
        assert_eq!(ensure(dir.path()).unwrap().len(), 2);
    }

    #[test]
    fn missing_required_setting_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ensure(dir.path()).is_err());
    }
}
