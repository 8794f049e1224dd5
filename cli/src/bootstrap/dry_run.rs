//! `--dry-run`: the playbook walks every phase on every host as it would, but nothing changes anywhere.
//! Host phases run against a [`PlanTransport`] that forwards read-only probes (hashes, tests, diffs) to
//! the real host — every `probe()`, and the `exec`s that read as probes — and records every other
//! command instead of running it; file installs are compared with
//! the host (`diff -u` for text, sha256 for binaries) and recorded; local phases report what they would
//! create; phases that wait on or write to the API are only named. The plan is printed per host.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::transport::{ExecOutput, Payload, Result, Transport};

/// Commands that only look: forwarded to the host in a dry run. Everything else is recorded.
const PROBES: &[&str] = &[
    "sha256sum ",
    "test ",
    "[ ",
    "ls ",
    "cat ",
    "diff -u ",
    "command -v ",
    "kill -0 ",
    "for p in containerd runc",
    "for p in /proc/",
    "if [ -e ",
];

/// The first line of preflight's gathering script, which only reads.
fn kiln_preflight_gather_prefix() -> &'static str {
    "f() { echo \"@@kiln-fact:"
}

pub fn is_probe(cmd: &str) -> bool {
    let c = cmd.trim_start();
    // kiln's own read-only scripts: the diff of a staged file against the host's, preflight's fact
    // gathering (kiln_preflight::gather) and its clock reading.
    if c.starts_with("diff -u ")
        || c.starts_with(kiln_preflight_gather_prefix())
        || c == "date +%s.%N"
    {
        return true;
    }
    let quiet = c
        .replace("2>&1", "")
        .replace("2>/dev/null", "")
        .replace(">/dev/null", "");
    PROBES.iter().any(|p| c.starts_with(p)) && !quiet.contains('>')
}

/// What a dry run found, per host (`local` for the operator's machine), in order.
#[derive(Debug, Default, Clone)]
pub struct Plan {
    items: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
}

impl Plan {
    pub fn add(&self, host: &str, line: impl Into<String>) {
        self.items
            .lock()
            .expect("plan")
            .entry(host.to_string())
            .or_default()
            .push(line.into());
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for (host, lines) in self.items.lock().expect("plan").iter() {
            out.push_str(&format!("{host}:\n"));
            for l in lines {
                for (i, part) in l.lines().enumerate() {
                    let lead = if i == 0 { "  - " } else { "      " };
                    out.push_str(&format!("{lead}{part}\n"));
                }
            }
        }
        out
    }

    /// What was found, per host (`kiln apply` reads the file changes from it).
    pub fn lines(&self) -> BTreeMap<String, Vec<String>> {
        self.items.lock().expect("plan").clone()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!(self.items.lock().expect("plan").clone())
    }
}

/// A transport that looks but does not touch (see the module docs).
pub struct PlanTransport {
    pub inner: Arc<dyn Transport>,
    pub plan: Plan,
}

/// First line of a command, shortened, for the plan.
fn summary(cmd: &str) -> String {
    let first = cmd.trim().lines().next().unwrap_or_default();
    let more = if cmd.trim().lines().count() > 1 {
        " …"
    } else {
        ""
    };
    let short: String = first.chars().take(160).collect();
    format!("{short}{more}")
}

#[async_trait]
impl Transport for PlanTransport {
    fn host(&self) -> &str {
        self.inner.host()
    }

    async fn exec(&self, cmd: &str, stdin: Option<&[u8]>) -> Result<ExecOutput> {
        if is_probe(cmd) {
            return self.inner.exec(cmd, stdin).await;
        }
        self.plan
            .add(self.inner.host(), format!("run: {}", summary(cmd)));
        Ok(ExecOutput::default())
    }

    async fn probe(&self, cmd: &str, stdin: Option<&[u8]>) -> Result<ExecOutput> {
        self.inner.probe(cmd, stdin).await
    }

    async fn upload(&self, _src: Payload<'_>, remote: &str, mode: u32) -> Result<()> {
        self.plan
            .add(self.inner.host(), format!("write {remote} (mode {mode:o})"));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_read_only_commands() {
        assert!(is_probe("sha256sum /etc/kiln/a 2>/dev/null; true"));
        assert!(is_probe("test -d /run/systemd/system"));
        assert!(is_probe("diff -u --label a /x - > /dev/null"));
        assert!(!is_probe("systemctl restart kiln-kubelet"));
        assert!(!is_probe("mkdir -p /run/kiln"));
        assert!(!is_probe("cat > /etc/kiln/x"), "a redirect writes");
        assert!(!is_probe("rm -f /etc/kiln/manifests/*"));
    }

    /// The commands kiln sends as `probe()` also read as probes, so marking them changed no dry run.
    #[test]
    fn every_probe_call_reads_as_a_probe() {
        for cmd in [
            "sha256sum '/etc/kiln/a b' /usr/local/bin/kiln-store 2>/dev/null; true",
            "diff -u --label /etc/kiln/x --label /etc/kiln/x.kiln /etc/kiln/x -",
            "test -s /etc/kiln/kubelet.conf",
            "test -d /run/systemd/system",
            "test -f /run/systemd/resolve/resolv.conf",
            "test -d /var/lib/kiln/store",
            "test -f /etc/systemd/system/kiln-kubelet.service",
            "[ -e /etc/rc.local ] && ! grep -q '^# managed by kiln' /etc/rc.local",
            "kill -0 \"$(cat /run/kiln/kubelet-supervisor.pid 2>/dev/null)\" 2>/dev/null",
            "cat -- '/etc/kiln/a b'",
            "if [ -e '/etc/kiln/a b' ]; then exec cat -- '/etc/kiln/a b'; else exit 44; fi",
        ] {
            assert!(is_probe(cmd), "{cmd}");
        }
    }

    #[tokio::test]
    async fn probes_reach_the_host_and_other_commands_are_recorded() {
        let plan = Plan::default();
        let t = PlanTransport {
            inner: Arc::new(crate::transport::LocalTransport::new("here")),
            plan: plan.clone(),
        };
        // Not a probe by its text: recorded, not run; the same command as a probe() runs.
        let out = t.exec("echo looked", None).await.unwrap();
        assert!(out.stdout.is_empty());
        let out = t.probe("echo looked", None).await.unwrap();
        assert_eq!(out.stdout_str(), "looked\n");
        assert!(t.exec("test -d /", None).await.unwrap().success());
        assert_eq!(plan.render(), "here:\n  - run: echo looked\n");
    }

    #[test]
    fn the_plan_groups_by_host() {
        let p = Plan::default();
        p.add("host2", "write /etc/x (mode 644)");
        p.add("host1", "run: systemctl start kiln-kubelet");
        p.add("host1", "diff:\n-a\n+b");
        assert_eq!(
            p.render(),
            "host1:\n  - run: systemctl start kiln-kubelet\n  - diff:\n      -a\n      +b\nhost2:\n  - write /etc/x (mode 644)\n"
        );
    }
}
