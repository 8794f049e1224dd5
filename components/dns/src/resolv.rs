//! The upstream resolvers: `--upstream IP[:port]` values and the `nameserver` lines of resolv.conf.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ResolvError {
    #[error("--upstream {value:?}: not an IP address or IP:port")]
    Upstream { value: String },
    #[error("--resolv-conf {path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("--resolv-conf {path}: no usable nameserver line; pass --upstream")]
    NoNameserver { path: String },
}

/// `10.0.0.2`, `10.0.0.2:5353`, `fd00::2`, `[fd00::2]:5353`; the port defaults to 53.
pub fn parse_upstream(value: &str) -> Result<SocketAddr, ResolvError> {
    let v = value.trim();
    if let Ok(addr) = v.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bare = v.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
    match bare.unwrap_or(v).parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, 53)),
        Err(_) => Err(ResolvError::Upstream {
            value: value.to_string(),
        }),
    }
}

/// The `nameserver` addresses of a resolv.conf text, in order, on port 53. Comments (`#`, `;`), other
/// options and unparsable addresses are skipped; a link-local address's `%zone` is dropped (a zone
/// index cannot be carried in a plain address).
pub fn nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then_some(())?;
            let addr = words.next()?;
            let addr = addr.split('%').next().unwrap_or(addr);
            addr.parse::<IpAddr>()
                .ok()
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .collect()
}

/// Reads `path` and returns its nameservers; an error when there is none.
pub fn read_nameservers(path: &Path) -> Result<Vec<SocketAddr>, ResolvError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ResolvError::Read {
        path: shown.clone(),
        source,
    })?;
    let found = nameservers(&text);
    if found.is_empty() {
        return Err(ResolvError::NoNameserver { path: shown });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_nameservers_in_order() {
        let text = "# generated\n\
                    search default.svc.cluster.local svc.cluster.local\n\
                    nameserver 10.0.0.2\n\
                    nameserver   fd00::53 # comment\n\
                    ;nameserver 1.1.1.1\n\
                    nameserver fe80::1%eth0\n\
                    nameserver not-an-ip\n\
                    options ndots:5\n\
                    nameserver 127.0.0.53\n";
        let got: Vec<String> = nameservers(text).iter().map(|a| a.to_string()).collect();
        assert_eq!(
            got,
            [
                "10.0.0.2:53",
                "[fd00::53]:53",
                "[fe80::1]:53",
                "127.0.0.53:53"
            ]
        );
        assert!(nameservers("search x\n").is_empty());
        assert!(nameservers("").is_empty());
    }

    #[test]
    fn upstream_values() {
        let p = |v| parse_upstream(v).map(|a| a.to_string());
        assert_eq!(p("10.0.0.2").unwrap(), "10.0.0.2:53");
        assert_eq!(p("10.0.0.2:5353").unwrap(), "10.0.0.2:5353");
        assert_eq!(p("fd00::2").unwrap(), "[fd00::2]:53");
        assert_eq!(p("[fd00::2]").unwrap(), "[fd00::2]:53");
        assert_eq!(p("[fd00::2]:5353").unwrap(), "[fd00::2]:5353");
        let err = parse_upstream("dns.example").unwrap_err().to_string();
        assert!(err.contains("--upstream \"dns.example\""), "{err}");
        assert!(parse_upstream("10.0.0.2:99999").is_err());
    }

    #[test]
    fn read_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.conf");
        let err = read_nameservers(&missing).unwrap_err().to_string();
        assert!(
            err.starts_with("--resolv-conf ") && err.contains("nope.conf"),
            "{err}"
        );
        let empty = dir.path().join("resolv.conf");
        std::fs::write(&empty, "search x\n").unwrap();
        let err = read_nameservers(&empty).unwrap_err().to_string();
        assert!(err.contains("no usable nameserver"), "{err}");
        std::fs::write(&empty, "nameserver 192.0.2.1\n").unwrap();
        assert_eq!(
            read_nameservers(&empty).unwrap(),
            ["192.0.2.1:53".parse().unwrap()]
        );
    }
}
