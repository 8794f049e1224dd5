//! Phase preflight: facts from every host of the phase in one round trip each (plus a clock reading),
//! checked by kiln-preflight per host and then across hosts. Results are reported in host order, each host
//! with a table of what it found, then the cross-host findings once; any error fails the phase.
//! With `kiln preflight --fix`, the remedies of kiln-preflight's fix plan run first, and the facts are
//! gathered again before checking.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kiln_preflight::{ClockSample, Facts, Finding, HostFacts, Role, Severity};

use super::Outcome;
use crate::bootstrap::{BootstrapError, Context};

const PHASE: &str = "preflight";

struct Gathered {
    host: String,
    role: Role,
    facts: Facts,
    clock: Option<ClockSample>,
}

fn role(ctx: &Context, host: &str) -> Role {
    match ctx.host(host).role {
        crate::config::Role::Controller => Role::Controller,
        crate::config::Role::Worker => Role::Worker,
        crate::config::Role::ControllerWorker => Role::ControllerWorker,
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The host's clock against ours: the best (shortest round trip) of two readings, so a slow first exec on
/// a fresh connection does not blur it.
async fn read_clock(t: &dyn crate::transport::Transport) -> Option<ClockSample> {
    let mut best: Option<ClockSample> = None;
    for _ in 0..2 {
        let before = unix_now();
        let out = t.run("date +%s.%N").await.ok()?;
        let after = unix_now();
        let host: f64 = out.trim().parse().ok()?;
        let s = ClockSample::from_reading(before, host, after);
        if best.is_none_or(|b| s.uncertainty < b.uncertainty) {
            best = Some(s);
        }
    }
    best
}

async fn gather(ctx: &Context, host: &str) -> Result<Gathered, BootstrapError> {
    let t = ctx.transport(host).await?;
    let clock = read_clock(&*t).await;
    let out = t.run(kiln_preflight::GATHER_SCRIPT).await?;
    let mut facts = kiln_preflight::parse_gathered(&out);
    facts.node_address = ctx.host(host).node_address();
    Ok(Gathered {
        host: host.to_string(),
        role: role(ctx, host),
        facts,
        clock,
    })
}

/// Runs the fix plan on one host; returns the changes made, in words.
async fn fix(ctx: &Context, g: &Gathered) -> Result<Vec<(&'static str, String)>, BootstrapError> {
    let t = ctx.transport(&g.host).await?;
    let mut done = vec![];
    for step in kiln_preflight::fix_plan(&g.facts, g.role) {
        tracing::debug!(
            host = g.host,
            check = step.check,
            command = step.command,
            "fix"
        );
        t.run(&step.command).await.map_err(|e| {
            BootstrapError::phase(
                PHASE,
                &g.host,
                format!("--fix for {} ({}): {e}", step.check, step.change),
            )
        })?;
        done.push((step.check, step.change));
    }
    Ok(done)
}

/// The findings as a table under the host's report line (text), or one JSON object each.
fn render(ctx: &Context, who: &str, findings: &[Finding]) {
    if ctx.opts.json {
        for f in findings {
            println!(
                "{}",
                serde_json::json!({"phase": PHASE, "host": who, "check": f.check, "severity": severity(f), "message": f.message})
            );
        }
        return;
    }
    if findings.is_empty() {
        return;
    }
    let width = findings.iter().map(|f| f.check.len()).max().unwrap_or(5);
    ctx.say(&format!(
        "           {:<width$}  {:<8} MESSAGE",
        "CHECK", "RESULT"
    ));
    for f in findings {
        ctx.say(&format!(
            "           {:<width$}  {:<8} {}",
            f.check,
            severity(f),
            f.message
        ));
    }
}

fn severity(f: &Finding) -> &'static str {
    match f.severity {
        Severity::Error => "ERROR",
        Severity::Warning => "WARNING",
    }
}

fn summary(findings: &[Finding]) -> String {
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    if findings.is_empty() {
        "all checks passed".to_string()
    } else if warnings == findings.len() {
        format!("passed with {warnings} warning(s)")
    } else {
        format!(
            "{} error(s), {warnings} warning(s)",
            findings.len() - warnings
        )
    }
}

fn error_lines(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| format!("  [ERROR {}]: {}", f.check, f.message))
        .collect()
}

/// One report line (done, or FAILED) and the findings table; the error lines when there are errors.
fn report(
    ctx: &Context,
    label: &str,
    who: &str,
    findings: &[Finding],
    started: Instant,
) -> Option<Vec<String>> {
    let errs = error_lines(findings);
    if errs.is_empty() {
        let outcome = Outcome::Done(summary(findings));
        ctx.report(label, who, &outcome, started.elapsed());
    } else {
        let e = BootstrapError::Preflight {
            host: who.to_string(),
            findings: errs.join("\n"),
        };
        ctx.report_failure(label, who, &e);
    }
    render(ctx, who, findings);
    (!errs.is_empty()).then_some(errs)
}

/// The preflight phase over `hosts` (all of them at once: the cross-host checks need every host's facts).
pub(crate) async fn preflight_hosts(
    ctx: &Context,
    hosts: &[Option<String>],
) -> Result<(), BootstrapError> {
    let started = Instant::now();
    let names: Vec<&str> = hosts
        .iter()
        .map(|h| {
            h.as_deref().ok_or_else(|| {
                BootstrapError::phase(PHASE, "local", "this phase runs on hosts, not locally")
            })
        })
        .collect::<Result<_, _>>()?;
    let mut gathered = gather_all(ctx, &names).await?;

    if ctx.opts.preflight_fix && fix_all(ctx, &gathered).await? && !ctx.opts.dry_run {
        gathered = gather_all(ctx, &names).await?;
    }

    let ignore = &ctx.opts.ignore_preflight_errors;
    let mut errors: Vec<(String, Vec<String>)> = vec![];
    for g in &gathered {
        let mut findings = kiln_preflight::run_checks(&g.facts, g.role, ignore);
        // kiln-store's ports are not kiln's to check when the store is an external etcd.
        findings.retain(|f| {
            !super::external_etcd::skipped_checks(&ctx.cluster.config).contains(&f.check)
        });
        if let Some(errs) = report(ctx, PHASE, &g.host, &findings, started) {
            errors.push((g.host.clone(), errs));
        }
    }

    // Across hosts, once, after the per-host tables (one host has nothing to compare).
    if gathered.len() > 1 {
        let view: Vec<HostFacts> = gathered
            .iter()
            .map(|g| HostFacts {
                name: &g.host,
                role: g.role,
                facts: &g.facts,
                clock: g.clock,
            })
            .collect();
        let findings = kiln_preflight::run_cluster_checks(&view, ignore);
        if let Some(errs) = report(ctx, "preflight-cluster", "all", &findings, started) {
            errors.push(("all hosts (cross-host checks)".into(), errs));
        }
    }

    if errors.is_empty() {
        return Ok(());
    }
    Err(BootstrapError::Preflight {
        host: errors
            .iter()
            .map(|(h, _)| h.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        findings: match errors.as_slice() {
            [(_, e)] => e.join("\n"),
            _ => errors
                .iter()
                .map(|(h, e)| format!("{h}:\n{}", e.join("\n")))
                .collect::<Vec<_>>()
                .join("\n"),
        },
    })
}

/// `--fix`: every host's fix plan, run in parallel, each change reported; whether anything changed.
async fn fix_all(ctx: &Context, gathered: &[Gathered]) -> Result<bool, BootstrapError> {
    let results = futures::future::join_all(gathered.iter().map(|g| fix(ctx, g))).await;
    let mut changed_any = false;
    for (g, r) in gathered.iter().zip(results) {
        let done = r.inspect_err(|e| ctx.report_failure(PHASE, &g.host, e))?;
        changed_any |= !done.is_empty();
        if ctx.opts.json && done.is_empty() {
            println!(
                "{}",
                serde_json::json!({"phase": PHASE, "host": g.host, "fix": null, "change": "nothing to change"})
            );
        } else if ctx.opts.json {
            for (check, change) in &done {
                println!(
                    "{}",
                    serde_json::json!({"phase": PHASE, "host": g.host, "fix": check, "change": change})
                );
            }
        } else if done.is_empty() {
            ctx.say(&format!("[{:>8}] fix: nothing to change", g.host));
        } else {
            for (check, change) in &done {
                // In a dry run the transport records the commands instead of running them.
                let verb = if ctx.opts.dry_run { "would fix" } else { "fix" };
                ctx.say(&format!("[{:>8}] {verb} {check}: {change}", g.host));
            }
        }
    }
    Ok(changed_any)
}

/// Every host's facts, in parallel; a host that cannot be reached fails the phase after the others are
/// reported.
async fn gather_all(ctx: &Context, names: &[&str]) -> Result<Vec<Gathered>, BootstrapError> {
    for h in names {
        ctx.progress.started(PHASE, h);
    }
    let results = futures::future::join_all(names.iter().map(|h| gather(ctx, h))).await;
    let mut out = vec![];
    let mut first_err = None;
    for (h, r) in names.iter().zip(results) {
        match r {
            Ok(g) => out.push(g),
            Err(e) => {
                ctx.report_failure(PHASE, h, &e);
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
