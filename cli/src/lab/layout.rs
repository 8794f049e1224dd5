//! Where a lab keeps its things, and how hosts are named and addressed. Pure data: no side effects beyond
//! creating and removing the lab's own directory.

use std::path::{Path, PathBuf};

use super::LabError;

/// All labs live under this directory, one folder per lab. It is outside /etc, /var and /usr, which hosts
/// overlay (an overlay's upper dir may not sit inside its lower dir), and hosts mount a fresh /tmp, so no host
/// can see any lab's internals.
pub const LABS_ROOT: &str = "/tmp/kiln-lab";
/// The lab side of the bridge: where `kiln lab run` commands (kiln, kubectl, ssh) live.
pub const LAB_GATEWAY: &str = "10.250.0.1";
pub const LAB_PREFIX: u8 = 24;
pub const REGISTRY_ADDR: &str = "10.250.0.1:5000";
pub const MAX_HOSTS: u32 = 200;

pub fn host_name(n: u32) -> String {
    format!("host{n}")
}

pub fn host_ip(n: u32) -> String {
    format!("10.250.0.{}", 10 + n)
}

/// Accepts `host3`, `3` or `10.250.0.13`.
pub fn parse_host(s: &str) -> Option<u32> {
    if let Some(rest) = s.strip_prefix("host") {
        return rest.parse().ok();
    }
    if let Some(last) = s.strip_prefix("10.250.0.") {
        return last.parse::<u32>().ok().and_then(|v| v.checked_sub(10));
    }
    s.parse().ok()
}

#[derive(Debug, Clone)]
pub struct LabLayout {
    pub name: String,
    pub netns: String,
    pub dir: PathBuf,
}

impl LabLayout {
    pub fn new(name: &str) -> Result<LabLayout, LabError> {
        let ok = !name.is_empty()
            && name.len() <= 12
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(LabError::BadName {
                name: name.to_string(),
            });
        }
        Ok(LabLayout {
            name: name.to_string(),
            netns: format!("kiln-lab-{name}"),
            dir: Path::new(LABS_ROOT).join(name),
        })
    }

    pub fn state_file(&self) -> PathBuf {
        self.dir.join("lab.json")
    }
    pub fn ssh_dir(&self) -> PathBuf {
        self.dir.join("ssh")
    }
    pub fn ssh_key(&self) -> PathBuf {
        self.ssh_dir().join("id_ed25519")
    }
    pub fn known_hosts(&self) -> PathBuf {
        self.ssh_dir().join("known_hosts")
    }
    pub fn ssh_config(&self) -> PathBuf {
        self.dir.join("ssh_config")
    }
    pub fn cluster_yaml(&self) -> PathBuf {
        self.dir.join("cluster.yaml")
    }
    pub fn registry_dir(&self) -> PathBuf {
        self.dir.join("registry")
    }
    pub fn host_dir(&self, n: u32) -> PathBuf {
        self.dir.join("hosts").join(host_name(n))
    }

    pub fn create_dirs(&self) -> Result<(), LabError> {
        for d in [self.dir.clone(), self.ssh_dir(), self.dir.join("hosts")] {
            std::fs::create_dir_all(&d).map_err(LabError::io("creating lab directory", &d))?;
        }
        set_mode(&self.ssh_dir(), 0o700)
    }

    /// Hosts that have a directory (running, stopped or half-made).
    pub fn existing_hosts(&self) -> Vec<u32> {
        let mut v: Vec<u32> = std::fs::read_dir(self.dir.join("hosts"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| parse_host(e.file_name().to_str()?))
            .collect();
        v.sort_unstable();
        v
    }

    pub fn remove_all(&self) -> Result<(), LabError> {
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(LabError::io("removing lab directory", &self.dir)(e)),
        }
    }
}

pub fn set_mode(path: &Path, mode: u32) -> Result<(), LabError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(LabError::io("setting permissions", path))
}

/// Write a file atomically (temp file + rename) with the given mode.
pub fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), LabError> {
    let tmp = path.with_extension("kiln-tmp");
    std::fs::write(&tmp, data).map_err(LabError::io("writing", &tmp))?;
    set_mode(&tmp, mode)?;
    std::fs::rename(&tmp, path).map_err(LabError::io("renaming into place", path))
}

pub fn list_labs() -> Result<Vec<String>, LabError> {
    let mut v: Vec<String> = std::fs::read_dir(LABS_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("lab.json").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_and_addresses_round_trip() {
        for n in [1, 3, 10, 200] {
            assert_eq!(parse_host(&host_name(n)), Some(n));
            assert_eq!(parse_host(&host_ip(n)), Some(n));
            assert_eq!(parse_host(&n.to_string()), Some(n));
        }
        assert_eq!(parse_host("hostx"), None);
        assert_eq!(parse_host("10.250.0.5"), None);
    }

    #[test]
    fn lab_names_are_checked() {
        assert!(LabLayout::new("kiln").is_ok());
        assert!(LabLayout::new("ci-2").is_ok());
        for bad in ["", "Kiln", "1lab", "a/b", "averyveryverylongname", "a b"] {
            assert!(
                matches!(LabLayout::new(bad), Err(LabError::BadName { .. })),
                "{bad}"
            );
        }
    }
}
