//! The bootstrapper: playbooks (ordered phases with host selectors, as data) run over the hosts of one
//! cluster.yaml. `init` brings up the first control plane, `reset` undoes everything kiln did on a host.
//! Every phase looks at the host's state first and skips what is done, so a re-run converges.

mod context;
pub mod dry_run;
mod error;
#[cfg(test)]
pub(crate) mod golden_tests;
pub(crate) mod host_files;
pub(crate) mod phases;
pub(crate) mod pki_hash;
mod playbook;
pub mod progress;
mod render;
mod reset;

pub use context::{Context, Options, JOIN_TOKEN_TTL};
pub use error::BootstrapError;
pub use playbook::{Playbook, Selector};

use std::time::Instant;

/// The plan: every phase with the hosts it would run on, without connecting to anything (`--dry-run`).
pub fn plan(
    ctx: &Context,
    playbook: &Playbook,
) -> Result<Vec<(String, Vec<String>)>, BootstrapError> {
    playbook
        .phases
        .iter()
        .map(|p| {
            let hosts = ctx.select(&p.hosts)?;
            Ok((
                p.name.clone(),
                hosts
                    .into_iter()
                    .map(|h| h.unwrap_or_else(|| "local".into()))
                    .collect(),
            ))
        })
        .collect()
}

/// Run a playbook: phases in order; within a phase, its hosts in parallel.
pub async fn run(ctx: &Context, playbook: &Playbook) -> Result<(), BootstrapError> {
    let total = Instant::now();
    for spec in &playbook.phases {
        // `load` checked the name; a playbook built in code is checked here.
        let phase = phases::table::find(&spec.name)?;
        let hosts = ctx.select(&spec.hosts)?;
        tracing::debug!(phase = phase.name, runs_on = ?phase.runs_on(), hosts = ?spec.hosts, "{}", phase.summary);
        // A phase of the store this cluster does not have (kiln-store's members with an external
        // etcd, or the reverse) is reported skipped, with why, where it would have run.
        let external = ctx.cluster.config.spec.store.external.is_some();
        if let Some(why) = phase.store.skip_reason(external) {
            for h in &hosts {
                let skipped = phases::Outcome::Skipped(why.into());
                let who = h.as_deref().unwrap_or("local");
                ctx.report(phase.name, who, &skipped, std::time::Duration::ZERO);
            }
            continue;
        }
        if let phases::table::Run::AllHosts(run) = phase.run {
            // All hosts at once (cross-host checks), reported by the phase itself.
            run(ctx, &hosts).await?;
            continue;
        }
        let started = Instant::now();
        if ctx.plan.is_some() && phase.needs_api {
            for h in &hosts {
                let who = h.as_deref().unwrap_or("local");
                let skipped =
                    phases::Outcome::Skipped("dry run: needs the cluster answering".into());
                ctx.report(phase.name, who, &skipped, started.elapsed());
            }
            continue;
        }
        for h in &hosts {
            ctx.progress
                .started(phase.name, h.as_deref().unwrap_or("local"));
        }
        let results = futures::future::join_all(
            hosts
                .iter()
                .map(|h| phases::run_phase(ctx, phase, h.as_deref())),
        )
        .await;
        for (h, r) in hosts.iter().zip(results) {
            let who = h.as_deref().unwrap_or("local");
            match r {
                Ok(outcome) => ctx.report(phase.name, who, &outcome, started.elapsed()),
                Err(e) => {
                    ctx.report_failure(phase.name, who, &e);
                    return Err(e);
                }
            }
        }
    }
    ctx.progress.finish();
    ctx.say(&format!(
        "{} finished in {:.1}s",
        playbook.name,
        total.elapsed().as_secs_f64()
    ));
    Ok(())
}
