//! `dns-suffix`, `dns-server-list`, `etc-hosts`: what the pod's resolver configuration says, printed
//! the way the DNS e2e tests compare it.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("Could not find DNS search list!")]
    NotFound,
}

pub const RESOLV_CONF: &str = "/etc/resolv.conf";
pub const ETC_HOSTS: &str = "/etc/hosts";

fn read(path: &Path) -> Result<String, DnsError> {
    std::fs::read_to_string(path).map_err(|source| DnsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The words after the first line starting with `keyword`, split on single spaces as upstream does (so
/// a doubled space gives an empty entry there too), joined with commas.
pub fn list_after(resolv_conf: &str, keyword: &str) -> Result<String, DnsError> {
    resolv_conf
        .split('\n')
        .find(|l| l.starts_with(keyword))
        .map(|l| l.split(' ').skip(1).collect::<Vec<_>>().join(","))
        .ok_or(DnsError::NotFound)
}

pub fn suffixes(path: &Path) -> Result<String, DnsError> {
    list_after(&read(path)?, "search")
}

pub fn servers(path: &Path) -> Result<String, DnsError> {
    list_after(&read(path)?, "nameserver")
}

/// Upstream panics when the file or the line is missing: exit status 2, the message on stderr.
pub fn run(what: fn(&Path) -> Result<String, DnsError>, path: &str) -> i32 {
    match what(Path::new(path)) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(e) => {
            eprintln!("panic: {e}");
            2
        }
    }
}

pub fn run_etc_hosts() -> i32 {
    match read(Path::new(ETC_HOSTS)) {
        // Go's Println adds a newline after the file's own.
        Ok(text) => {
            println!("{text}");
            0
        }
        Err(e) => {
            eprintln!("panic: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESOLV: &str = "nameserver 10.96.0.10\nsearch ns.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n";

    #[test]
    fn suffixes_are_the_search_line() {
        assert_eq!(
            list_after(RESOLV, "search").unwrap(),
            "ns.svc.cluster.local,svc.cluster.local,cluster.local"
        );
    }

    #[test]
    fn servers_are_the_first_nameserver_line() {
        assert_eq!(list_after(RESOLV, "nameserver").unwrap(), "10.96.0.10");
    }

    #[test]
    fn a_missing_line_is_an_error() {
        assert!(matches!(
            list_after("options ndots:5\n", "search"),
            Err(DnsError::NotFound)
        ));
    }

    #[test]
    fn reads_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("resolv.conf");
        std::fs::write(&p, RESOLV).unwrap();
        assert_eq!(servers(&p).unwrap(), "10.96.0.10");
    }
}
