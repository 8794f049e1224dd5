//! `kiln upgrade apply`: the plan (skew-checked before anything changes), a snapshot bundle, then
//! [`super::steps::walk`] with the real [`super::host_actions::HostActions`].

use super::host_actions::{self, HostActions};
use super::plan::{self, Step};
use super::{gather, steps};
use crate::bootstrap::Context;

pub struct ApplyOptions {
    pub max_unavailable: usize,
    pub force: bool,
    pub dry_run: bool,
}

/// Hosts an interrupted run left marked but whose binaries are already the target's: resumed (the
/// restart and the gates again) with the binaries they have, in their role's place in the order.
fn resumed(p: &mut plan::Plan, interrupted: &[String], hosts: &[plan::HostState]) {
    for name in interrupted {
        if p.steps.iter().any(|s| &s.host == name) {
            continue;
        }
        let Some(h) = hosts.iter().find(|h| &h.name == name) else {
            continue;
        };
        p.up_to_date.retain(|u| u != name);
        let step = Step {
            host: name.clone(),
            controller: h.controller,
            batch: 0,
            changes: vec![],
        };
        // Controllers before workers, each resumed host in a batch of its own.
        let at = if h.controller {
            p.steps
                .iter()
                .position(|s| !s.controller)
                .unwrap_or(p.steps.len())
        } else {
            p.steps.len()
        };
        p.steps.insert(at, step);
    }
    // Renumber: a resumed host shifts the batches after it.
    let mut batch = 0;
    let mut last = None;
    for s in &mut p.steps {
        if s.controller || s.batch == 0 || last != Some(s.batch) {
            batch += 1;
        }
        last = Some(s.batch);
        s.batch = batch;
    }
}

pub async fn apply(ctx: &Context, opts: &ApplyOptions) -> anyhow::Result<i32> {
    let targets = gather::targets(ctx)?;
    let hosts = gather::hosts(ctx).await?;
    let mut p = plan::plan(&hosts, &targets, opts.max_unavailable);
    let target = &targets["kiln-apiserver"].stamp;
    println!(
        "target: kiln {target} (Kubernetes v{}) from {}",
        target.kube_or_default(),
        ctx.bin_dir.display()
    );
    if let Some(why) = &p.refused {
        println!("REFUSED {why}");
        return Ok(1);
    }
    resumed(&mut p, &host_actions::interrupted(ctx).await, &hosts);
    if !ctx.opts.only_hosts.is_empty() {
        // `--host`: only these hosts move now (the skew check above still saw every host).
        let only = &ctx.opts.only_hosts;
        p.steps.retain(|s| only.contains(&s.host));
    }
    let leftovers = host_actions::with_previous_binaries(ctx).await;
    if p.steps.is_empty() {
        println!("nothing to upgrade: every host runs the binaries this kiln would push");
        if leftovers.is_empty() || opts.dry_run {
            return Ok(0);
        }
    }
    if opts.dry_run {
        println!("upgrade plan (nothing was changed):");
        println!("local:\n  - save a snapshot bundle of the store (kept)");
        print!("{}", steps::render_dry_run(&p.steps));
        println!("every upgraded host, at the end:\n  - remove the <bin>.prev binaries");
        return Ok(0);
    }
    if !p.steps.is_empty() {
        let info = crate::snapshot::save(ctx, crate::snapshot::SaveOptions::default()).await?;
        println!(
            "snapshot bundle {} (revision {}), kept: `kiln snapshot restore` goes back to it",
            info.path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            info.revision
        );
    }
    let client = crate::bootstrap::phases::wait::admin_client(ctx).await?;
    let acts = HostActions {
        ctx,
        client,
        targets: &targets,
        force: opts.force,
    };
    let mut cleanup: Vec<Step> = p.steps.clone();
    for name in leftovers {
        if !cleanup.iter().any(|s| s.host == name) {
            cleanup.push(Step {
                host: name,
                controller: false,
                batch: 0,
                changes: vec![],
            });
        }
    }
    let say = |host: &str, step: &str, detail: &str| println!("{host}: {step}: {detail}");
    let report = steps::walk(&acts, &p.steps, &cleanup, &say).await;
    if let Some(why) = report.failure() {
        println!("{why}");
        return Ok(1);
    }
    println!(
        "upgraded {} host(s) to kiln {target}{}",
        report.upgraded.len(),
        if p.up_to_date.is_empty() {
            String::new()
        } else {
            format!("; already there: {}", p.up_to_date.join(", "))
        }
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn state(name: &str, controller: bool) -> plan::HostState {
        plan::HostState {
            name: name.into(),
            controller,
            binaries: BTreeMap::new(),
        }
    }

    #[test]
    fn an_interrupted_host_already_on_the_target_is_resumed_in_its_place() {
        let mut p = plan::Plan {
            steps: vec![Step {
                host: "w2".into(),
                controller: false,
                batch: 1,
                changes: vec![],
            }],
            up_to_date: vec!["c1".into(), "w1".into()],
            refused: None,
        };
        let hosts = [state("c1", true), state("w1", false), state("w2", false)];
        resumed(&mut p, &["w1".into(), "c1".into()], &hosts);
        let order: Vec<(&str, usize)> =
            p.steps.iter().map(|s| (s.host.as_str(), s.batch)).collect();
        assert_eq!(order, [("c1", 1), ("w2", 2), ("w1", 3)]);
        assert!(p.up_to_date.is_empty());
    }
}
