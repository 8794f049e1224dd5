//! Phase preflight: facts from the host in one round trip, checked by kiln-preflight.

use super::{Outcome, MANIFESTS};
use crate::bootstrap::{BootstrapError, Context};

const SEP: &str = "---kiln---";

pub(super) async fn preflight(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let t = ctx.transport(host).await?;
    let script = format!(
        "id -u; echo {SEP}; cat /proc/swaps; echo {SEP}; cat /proc/sys/net/ipv4/ip_forward 2>/dev/null; echo {SEP}; \
         cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null; echo {SEP}; nproc; echo {SEP}; \
         grep MemTotal /proc/meminfo; echo {SEP}; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; echo {SEP}; \
         ls {MANIFESTS} 2>/dev/null; echo {SEP}; for d in /var/lib/kiln/store; do [ -n \"$(ls -A $d 2>/dev/null)\" ] && echo $d; done; \
         echo {SEP}; hostname"
    );
    let out = t.run(&script).await?;
    let parts: Vec<&str> = out.split(&format!("{SEP}\n")).collect();
    let part = |i: usize| parts.get(i).map(|s| s.trim()).unwrap_or("");
    let mut tcp = String::new();
    for l in part(6).lines() {
        // two files concatenated: keep a header line for each parse
        tcp.push_str(l);
        tcp.push('\n');
    }
    let facts = kiln_preflight::Facts {
        hostname: part(9).to_string(),
        is_root: part(0) == "0",
        swaps: part(1).to_string(),
        ip_forward: Some(part(2).to_string()).filter(|s| !s.is_empty()),
        bridge_nf_call_iptables: Some(part(3).to_string()).filter(|s| !s.is_empty()),
        num_cpu: part(4).parse().unwrap_or(0),
        mem_total_kib: part(5)
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        listening: kiln_preflight::parse_listening_ports(&format!("header\n{tcp}")),
        kiln_components: part(7)
            .lines()
            .map(|l| l.trim_end_matches(".yaml").to_string())
            .collect(),
        non_empty_dirs: part(8).lines().map(str::to_string).collect(),
    };
    let role = if ctx.host(host).is_controller() {
        kiln_preflight::Role::Controller
    } else {
        kiln_preflight::Role::Worker
    };
    let findings = kiln_preflight::run_checks(&facts, role, &ctx.opts.ignore_preflight_errors);
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == kiln_preflight::Severity::Error)
        .map(|f| format!("  [ERROR {}]: {}", f.check, f.message))
        .collect();
    for w in findings
        .iter()
        .filter(|f| f.severity == kiln_preflight::Severity::Warning)
    {
        tracing::warn!(host, check = w.check, "{}", w.message);
    }
    if !errors.is_empty() {
        return Err(BootstrapError::Preflight {
            host: host.to_string(),
            findings: errors.join("\n"),
        });
    }
    let warnings = findings.len();
    Ok(Outcome::Done(if warnings == 0 {
        "all checks passed".to_string()
    } else {
        format!("passed with {warnings} warning(s)")
    }))
}
