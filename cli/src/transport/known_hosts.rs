//! OpenSSH known_hosts: parsing and host-key verification.
//!
//! Supports what `ssh` writes and users write by hand: plain and hashed (`|1|salt|hash`, HMAC-SHA1) host
//! patterns, `[host]:port` for non-22 ports, comma lists, `*`/`?` wildcards, `!negation`, and
//! `@revoked` markers. `@cert-authority` lines are skipped: kiln does not accept host certificates yet.
//! russh ships a known_hosts checker too, but it compares comments as part of the key, splits on single
//! spaces only and has no @revoked; host-key trust is too important for that.

use std::io::Write;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use russh::keys::ssh_key::{HashAlg, PublicKey};
use sha1::Sha1;

/// The name a host is recorded under: `host` on port 22, `[host]:port` otherwise (OpenSSH's rule).
pub fn host_pattern(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    None,
    Revoked,
}

#[derive(Debug, Clone)]
enum Pattern {
    Hashed { salt: Vec<u8>, hash: Vec<u8> },
    Plain { glob: String, negated: bool },
}

#[derive(Debug, Clone)]
struct Entry {
    line: usize,
    marker: Marker,
    patterns: Vec<Pattern>,
    key: PublicKey,
}

/// What known_hosts says about a host's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An entry for this host holds exactly this key.
    Known,
    /// No entry holds this key; `other_types` is true when the host is known with keys of other types.
    Unknown { other_types: bool },
    /// An entry for this host holds a different key of the same type (line number, 1-based).
    Changed { line: usize },
    /// This key is listed as `@revoked` (line number).
    Revoked { line: usize },
}

#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    entries: Vec<Entry>,
    /// Lines that could not be parsed (line number, reason); ignored like OpenSSH does, but reported.
    pub skipped: Vec<(usize, String)>,
}

impl KnownHosts {
    pub fn parse(text: &str) -> Self {
        let mut kh = KnownHosts::default();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let s = raw.trim();
            if s.is_empty() || s.starts_with('#') {
                continue;
            }
            match parse_line(s) {
                Ok(Some((marker, patterns, key))) => kh.entries.push(Entry {
                    line,
                    marker,
                    patterns,
                    key,
                }),
                Ok(None) => {}
                Err(why) => kh.skipped.push((line, why)),
            }
        }
        kh
    }

    /// Reads `path`; a missing file is an empty list (nothing is known yet).
    pub fn load(path: &Path) -> std::io::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Self::parse(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    pub fn check(&self, host: &str, port: u16, key: &PublicKey) -> Verdict {
        let name = host_pattern(host, port);
        let mut changed = None;
        let mut other_types = false;
        let mut known = false;
        for e in self
            .entries
            .iter()
            .filter(|e| matches_host(&e.patterns, &name))
        {
            let same_type = e.key.algorithm() == key.algorithm();
            let same_key = e.key.key_data() == key.key_data();
            match e.marker {
                Marker::Revoked if same_key => return Verdict::Revoked { line: e.line },
                Marker::Revoked => {}
                Marker::None if same_key => known = true,
                Marker::None if same_type => changed = changed.or(Some(e.line)),
                Marker::None => other_types = true,
            }
        }
        // @revoked applies to a key whatever host it is listed under.
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.marker == Marker::Revoked && e.key.key_data() == key.key_data())
        {
            return Verdict::Revoked { line: e.line };
        }
        // A matching entry wins over a stale one, as in OpenSSH (several keys per host are allowed).
        if known {
            Verdict::Known
        } else if let Some(line) = changed {
            Verdict::Changed { line }
        } else {
            Verdict::Unknown { other_types }
        }
    }
}

type ParsedLine = (Marker, Vec<Pattern>, PublicKey);

fn parse_line(s: &str) -> Result<Option<ParsedLine>, String> {
    let mut fields = s.split_whitespace();
    let mut first = fields.next().ok_or("empty line")?;
    let marker = match first {
        "@revoked" => Marker::Revoked,
        "@cert-authority" => return Ok(None),
        m if m.starts_with('@') => return Err(format!("unknown marker {m}")),
        _ => Marker::None,
    };
    if marker != Marker::None {
        first = fields.next().ok_or("missing host patterns")?;
    }
    let key_type = fields.next().ok_or("missing key type")?;
    let key_b64 = fields.next().ok_or("missing key")?;
    let key = PublicKey::from_openssh(&format!("{key_type} {key_b64}"))
        .map_err(|e| format!("bad key: {e}"))?;
    let patterns = first
        .split(',')
        .map(parse_pattern)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some((marker, patterns, key)))
}

fn parse_pattern(p: &str) -> Result<Pattern, String> {
    if let Some(rest) = p.strip_prefix("|1|") {
        let (salt, hash) = rest.split_once('|').ok_or("hashed entry without hash")?;
        let salt = B64
            .decode(salt)
            .map_err(|e| format!("hashed entry salt: {e}"))?;
        let hash = B64
            .decode(hash)
            .map_err(|e| format!("hashed entry hash: {e}"))?;
        return Ok(Pattern::Hashed { salt, hash });
    }
    let (glob, negated) = match p.strip_prefix('!') {
        Some(g) => (g, true),
        None => (p, false),
    };
    Ok(Pattern::Plain {
        glob: glob.to_ascii_lowercase(),
        negated,
    })
}

/// OpenSSH's rule: a negated match vetoes the line; otherwise any positive match selects it.
fn matches_host(patterns: &[Pattern], name: &str) -> bool {
    let name_lc = name.to_ascii_lowercase();
    let mut hit = false;
    for p in patterns {
        match p {
            Pattern::Hashed { salt, hash } => hit |= hashed_matches(salt, hash, name),
            Pattern::Plain { glob, negated } => {
                if wildcard(glob.as_bytes(), name_lc.as_bytes()) {
                    if *negated {
                        return false;
                    }
                    hit = true;
                }
            }
        }
    }
    hit
}

fn hashed_matches(salt: &[u8], hash: &[u8], name: &str) -> bool {
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(hash).is_ok()
}

/// `*` matches any run, `?` one character; everything else literally.
fn wildcard(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

/// The line `accept-new` appends: plain (not hashed) so users can read and audit it.
pub fn entry_line(host: &str, port: u16, key: &PublicKey) -> String {
    let mut key = key.clone();
    key.set_comment("");
    let openssh = key.to_openssh().unwrap_or_default();
    format!("{} {}", host_pattern(host, port), openssh.trim())
}

/// Appends the host's key, creating the file (0600) and its folder (0700) when missing.
pub fn append(path: &Path, host: &str, port: u16, key: &PublicKey) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    // A file written by hand may lack the final newline; do not glue our entry onto its last line.
    let needs_newline = std::fs::read(path)
        .map(|b| b.last().is_some_and(|c| *c != b'\n'))
        .unwrap_or(false);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let mut line = String::new();
    if needs_newline {
        line.push('\n');
    }
    line.push_str(&entry_line(host, port, key));
    line.push('\n');
    f.write_all(line.as_bytes())
}

/// `SHA256:…` as `ssh-keygen -l` prints it.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real keys from ssh-keygen.
    const K1: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPkmH8/vO6Cf2dcd2YLCFyl1zB2ouC5ii44I/+Bv4Yiz";
    const K2: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPKvb2pK41YfTBNOW7hjmdXmvbFZS0nDA3mNd+foMufM";
    const K3: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBL7PvVS3u98B4RTG26MJ47luwazPaY3vCcoXqaciz6VzFseKvH3rE+2uPVCZM7dihVm/eAOoYrDc+Dj1GJdmvnQ=";

    fn key(s: &str) -> PublicKey {
        PublicKey::from_openssh(s).unwrap()
    }

    /// `|1|salt|hash` for `name`, as `ssh-keygen -H` writes it.
    fn hashed(name: &str, salt: &[u8]) -> String {
        let mut mac = Hmac::<Sha1>::new_from_slice(salt).unwrap();
        mac.update(name.as_bytes());
        format!(
            "|1|{}|{}",
            B64.encode(salt),
            B64.encode(mac.finalize().into_bytes())
        )
    }

    #[test]
    fn plain_entries() {
        let kh = KnownHosts::parse(&format!("# comment\n\n10.0.0.1,node1 {K1} root@x\n"));
        assert_eq!(kh.check("10.0.0.1", 22, &key(K1)), Verdict::Known);
        assert_eq!(
            kh.check("NODE1", 22, &key(K1)),
            Verdict::Known,
            "host names are case-insensitive"
        );
        assert_eq!(
            kh.check("10.0.0.1", 22, &key(K2)),
            Verdict::Changed { line: 3 }
        );
        assert_eq!(
            kh.check("10.0.0.2", 22, &key(K1)),
            Verdict::Unknown { other_types: false }
        );
        // port 22 entries do not cover other ports
        assert_eq!(
            kh.check("10.0.0.1", 2222, &key(K1)),
            Verdict::Unknown { other_types: false }
        );
    }

    #[test]
    fn bracketed_port_and_tabs() {
        let kh = KnownHosts::parse(&format!("[127.0.0.1]:2222\t{}\n", K1.replace(' ', "\t")));
        assert_eq!(kh.check("127.0.0.1", 2222, &key(K1)), Verdict::Known);
        assert_eq!(
            kh.check("127.0.0.1", 22, &key(K1)),
            Verdict::Unknown { other_types: false }
        );
    }

    #[test]
    fn hashed_entries() {
        let line = format!(
            "{} {K1}\n",
            hashed("[10.1.1.1]:2200", b"0123456789abcdefghij")
        );
        let kh = KnownHosts::parse(&line);
        assert!(kh.skipped.is_empty(), "{:?}", kh.skipped);
        assert_eq!(kh.check("10.1.1.1", 2200, &key(K1)), Verdict::Known);
        assert_eq!(
            kh.check("10.1.1.1", 2200, &key(K2)),
            Verdict::Changed { line: 1 }
        );
        assert_eq!(
            kh.check("10.1.1.2", 2200, &key(K1)),
            Verdict::Unknown { other_types: false }
        );
    }

    #[test]
    fn lines_hashed_by_openssh() {
        // `ssh-keygen -H` output for "localhost" and "[10.9.8.7]:2200" holding K1.
        let text = format!(
            "|1|CeQMxlS7VLgngH+O2NOQwUFLzro=|xb3EjrtymNoPXcI8K2lOwYnhN74= {K1}\n\
             |1|mr5SMLZKw+l9gs04/pYJOeqKku4=|CkUaqzSlO+hTHUCFx13QntMk240= {K1}\n"
        );
        let kh = KnownHosts::parse(&text);
        assert!(kh.skipped.is_empty(), "{:?}", kh.skipped);
        assert_eq!(kh.check("localhost", 22, &key(K1)), Verdict::Known);
        assert_eq!(kh.check("10.9.8.7", 2200, &key(K1)), Verdict::Known);
        assert_eq!(
            kh.check("localhost", 22, &key(K2)),
            Verdict::Changed { line: 1 }
        );
        assert_eq!(
            kh.check("10.9.8.7", 22, &key(K1)),
            Verdict::Unknown { other_types: false }
        );
    }

    #[test]
    fn wildcards_and_negation() {
        let kh = KnownHosts::parse(&format!("*.lab,!evil.lab {K1}\n"));
        assert_eq!(kh.check("node1.lab", 22, &key(K1)), Verdict::Known);
        assert_eq!(
            kh.check("evil.lab", 22, &key(K1)),
            Verdict::Unknown { other_types: false }
        );
        assert!(wildcard(b"10.0.0.?", b"10.0.0.7"));
        assert!(!wildcard(b"10.0.0.?", b"10.0.0.17"));
        assert!(wildcard(b"*", b"anything"));
    }

    #[test]
    fn revoked_and_other_types_and_garbage() {
        let text =
            format!("node1 {K3}\n@revoked * {K2}\nnode2 not-a-key\n@cert-authority *.lab {K1}\n");
        let kh = KnownHosts::parse(&text);
        assert_eq!(kh.skipped.len(), 1, "{:?}", kh.skipped);
        assert_eq!(kh.skipped[0].0, 3);
        assert_eq!(
            kh.check("node1", 22, &key(K1)),
            Verdict::Unknown { other_types: true }
        );
        assert_eq!(
            kh.check("node1", 22, &key(K2)),
            Verdict::Revoked { line: 2 }
        );
        // cert-authority lines are not host keys
        assert_eq!(
            kh.check("x.lab", 22, &key(K1)),
            Verdict::Unknown { other_types: false }
        );
    }

    #[test]
    fn append_then_known() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/known_hosts");
        append(&path, "127.0.0.1", 2022, &key(&format!("{K1} comment"))).unwrap();
        std::fs::write(&path, std::fs::read_to_string(&path).unwrap().trim_end()).unwrap();
        append(&path, "node9", 22, &key(K2)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("[127.0.0.1]:2022 {K1}\nnode9 {K2}\n"));
        let kh = KnownHosts::load(&path).unwrap();
        assert_eq!(kh.check("127.0.0.1", 2022, &key(K1)), Verdict::Known);
        assert_eq!(kh.check("node9", 22, &key(K2)), Verdict::Known);
        assert!(KnownHosts::load(&dir.path().join("missing"))
            .unwrap()
            .entries
            .is_empty());
    }
}
