//! The node's CNI network config: a bridge (`cni0`, the gateway of the node's podCIDR) with host-local IPAM,
//! then portmap (hostPort) — the containernetworking-plugins chain containerd runs for every sandbox.
//! ipMasq is off (kiln-proxy masquerades only what needs it) and hairpinMode on (a pod reaching itself via
//! a Service).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub const CONFLIST_NAME: &str = "10-kiln.conflist";
pub const NETWORK_NAME: &str = "kiln";
pub const BRIDGE: &str = "cni0";
/// host-local's default `dataDir` (the conflist sets none): under it one directory per network name, holding
/// one file per reserved IP (named by the IP; content: the sandbox ID, on newer plugins `\r\n` and the
/// interface name), `last_reserved_ip.<range>` and `lock`.
pub const IPAM_DATA_DIR: &str = "/var/lib/cni/networks";
/// The file host-local flocks in a network's directory around every allocation and release.
pub const IPAM_LOCK_FILE: &str = "lock";

#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("--pod-cidr {cidr:?}: {message}")]
    Cidr { cidr: String, message: String },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Checks an IPv4 CIDR (`10.244.1.0/24`) and returns it normalised.
pub fn parse_cidr(cidr: &str) -> Result<(Ipv4Addr, u8), CniError> {
    let err = |message: &str| CniError::Cidr {
        cidr: cidr.into(),
        message: message.into(),
    };
    let (ip, len) = cidr
        .split_once('/')
        .ok_or_else(|| err("expected ADDRESS/PREFIX"))?;
    let ip: Ipv4Addr = ip.parse().map_err(|_| err("not an IPv4 address"))?;
    let len: u8 = len.parse().map_err(|_| err("bad prefix length"))?;
    if !(8..=30).contains(&len) {
        return Err(err("prefix length must be between 8 and 30"));
    }
    let mask = u32::MAX << (32 - len);
    if u32::from(ip) & !mask != 0 {
        return Err(err("host bits are set"));
    }
    Ok((ip, len))
}

/// The conflist JSON for a node's pod CIDR.
pub fn render_conflist(pod_cidr: &str) -> Result<String, CniError> {
    let (net, len) = parse_cidr(pod_cidr)?;
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": format!("{net}/{len}") }]],
                    "routes": [{ "dst": "0.0.0.0/0" }]
                }
            },
            { "type": "portmap", "capabilities": { "portMappings": true } }
        ]
    });
    Ok(serde_json::to_string_pretty(&conf).unwrap_or_default() + "\n")
}

/// Writes the conflist into `conf_dir` atomically (containerd reloads the directory on change); returns
/// its path. Unchanged content is not rewritten.
pub fn write_conflist(conf_dir: &Path, pod_cidr: &str) -> Result<PathBuf, CniError> {
    let body = render_conflist(pod_cidr)?;
    let path = conf_dir.join(CONFLIST_NAME);
    let werr = |p: &Path, source| CniError::Write {
        path: p.display().to_string(),
        source,
    };
    if std::fs::read_to_string(&path).ok().as_deref() == Some(body.as_str()) {
        return Ok(path);
    }
    std::fs::create_dir_all(conf_dir).map_err(|e| werr(conf_dir, e))?;
    // A temp name containerd ignores (not .conf/.conflist/.json), then rename.
    let tmp = conf_dir.join(format!(".{CONFLIST_NAME}.tmp"));
    std::fs::write(&tmp, body).map_err(|e| werr(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| werr(&path, e))?;
    tracing::info!(path = %path.display(), %pod_cidr, "wrote CNI config");
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_bridge_host_local_portmap() {
        let v: serde_json::Value =
            serde_json::from_str(&render_conflist("10.244.3.0/24").unwrap()).unwrap();
        assert_eq!(v["name"], "kiln");
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "cni0");
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["hairpinMode"], true);
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipam"]["type"], "host-local");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.244.3.0/24");
        assert_eq!(v["plugins"][1]["type"], "portmap");
        assert_eq!(v["plugins"][1]["capabilities"]["portMappings"], true);
    }

    #[test]
    fn rejects_bad_cidrs() {
        for bad in [
            "10.244.3.1/24",
            "10.244.3.0",
            "x/24",
            "10.0.0.0/31",
            "::1/64",
        ] {
            assert!(render_conflist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_atomically_and_idempotently() {
        let d = tempfile::tempdir().unwrap();
        let p = write_conflist(d.path(), "10.244.1.0/24").unwrap();
        let first = std::fs::metadata(&p).unwrap().modified().unwrap();
        write_conflist(d.path(), "10.244.1.0/24").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), first);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(CONFLIST_NAME)]);
    }
}
