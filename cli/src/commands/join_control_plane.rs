//! `kiln join --control-plane`: ask the running store which controllers of cluster.yaml are not part of
//! the control plane yet, join them one at a time (playbook `join-control-plane`), then roll the new API
//! servers out to every node's balancer (playbook `apiserver-lb`). Nothing pending → nothing is touched.

use std::time::Duration;

use super::cluster::{runtime, ClusterArgs};
use crate::bootstrap::phases::cp_join;
use crate::bootstrap::{self, Context, Playbook};

/// Bound on asking the cluster which controllers have joined, for the hint after a worker join.
const SURVEY_TIMEOUT: Duration = Duration::from_secs(30);

/// The playbooks' phases minus --skip-phases; a name in neither playbook is refused.
fn playbooks(args: &ClusterArgs) -> anyhow::Result<(Playbook, Playbook)> {
    let join = Playbook::load("join-control-plane", args.playbook.as_deref())?;
    let lb = Playbook::load("apiserver-lb", None)?;
    let (mut in_join, mut in_lb) = (vec![], vec![]);
    for s in &args.skip_phases {
        if lb.phases.iter().any(|p| &p.name == s) {
            in_lb.push(s.clone());
        } else {
            in_join.push(s.clone());
        }
    }
    Ok((join.without(&in_join)?, lb.without(&in_lb)?))
}

pub fn run(args: ClusterArgs, ignore: Vec<String>, wait: u64) -> anyhow::Result<i32> {
    let mut ctx = args.context(ignore, wait)?;
    let file = args.file.display().to_string();
    if ctx.cluster.config.spec.store.external.is_some() {
        // Which controllers are pending is read from kiln-store's member list, which an external
        // etcd does not have: refused rather than guessed.
        anyhow::bail!(
            "{file}: join --control-plane asks kiln-store's member list which controllers have              joined; with spec.store.external there is none, and adding a controller to a running              cluster on an external etcd is not supported yet"
        );
    }
    let controllers: Vec<String> = ctx
        .cluster
        .config
        .controllers()
        .map(|c| c.name.clone())
        .collect();
    for h in &args.hosts {
        if !controllers.contains(h) {
            anyhow::bail!(
                "--host {h} is not a controller in {file} (controllers: {}); \
                 `kiln join -f {file} --host {h}` joins a worker",
                controllers.join(", ")
            );
        }
    }
    let (join, lb) = playbooks(&args)?;
    let rt = runtime()?;
    let survey = rt.block_on(cp_join::survey(&ctx, &args.hosts))?;
    if survey.pending.is_empty() && !cp_join::lb_pending(&ctx) {
        let named = if args.hosts.is_empty() {
            controllers.join(", ")
        } else {
            args.hosts.join(", ")
        };
        if ctx.opts.json {
            println!(
                "{}",
                serde_json::json!({"result": "ok", "joined": [], "detail": "nothing to do"})
            );
        } else {
            println!(
                "nothing to do: {named} of {file} already part of the control plane \
                 (voting store members, nodes labelled control-plane; asked {})",
                survey.via
            );
        }
        return Ok(0);
    }
    if !survey.pending.is_empty() {
        ctx.say(&format!(
            "joining {} to the control plane (one at a time; store members via {})",
            survey.pending.join(", "),
            survey.via
        ));
        cp_join::mark_lb_pending(&ctx)?;
    }
    // Every joining controller is a backend from the start: the first one's kubelet need not restart
    // when the next one joins.
    ctx.opts.joining_controllers = survey.pending.clone();
    for h in &survey.pending {
        ctx.opts.only_hosts = vec![h.clone()];
        rt.block_on(bootstrap::run(&ctx, &join))?;
    }
    ctx.opts.only_hosts = vec![];
    rt.block_on(bootstrap::run(&ctx, &lb))?;
    if let Some(plan) = &ctx.plan {
        let text = plan.render();
        println!(
            "\nchanges (nothing was changed):\n{}",
            if text.is_empty() {
                "  none\n".into()
            } else {
                text
            }
        );
        return Ok(0);
    }
    if ctx.opts.json {
        println!(
            "{}",
            serde_json::json!({"result": "ok", "joined": survey.pending})
        );
    } else if !survey.pending.is_empty() {
        println!(
            "\n{} joined the control plane. Every node's kubelet balances over {}.",
            survey.pending.join(", "),
            controllers.join(", ")
        );
    }
    Ok(0)
}

/// After a worker join: name the controllers of cluster.yaml that are not part of the control plane
/// yet (a worker join never touches them). Best effort: a cluster that does not answer says nothing.
pub fn mention_unjoined(args: &ClusterArgs, ctx: &Context) {
    let only: Vec<String> = args
        .hosts
        .iter()
        .filter(|h| ctx.host(h).is_controller())
        .cloned()
        .collect();
    if (!args.hosts.is_empty() && only.is_empty())
        || ctx.cluster.config.spec.store.external.is_some()
    {
        return;
    }
    let Ok(rt) = runtime() else { return };
    let survey = rt.block_on(async {
        tokio::time::timeout(SURVEY_TIMEOUT, cp_join::survey(ctx, &only)).await
    });
    let pending = match survey {
        Ok(Ok(s)) => s.pending,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "could not ask which controllers have joined");
            return;
        }
        Err(_) => return,
    };
    if pending.is_empty() {
        return;
    }
    let file = args.file.display();
    if ctx.opts.json {
        println!(
            "{}",
            serde_json::json!({"controllersNotJoined": pending,
                "hint": format!("kiln join --control-plane -f {file}")})
        );
    } else {
        println!(
            "\n{}: controller(s) in {file} not part of the control plane yet (a worker join leaves them \
             alone): run kiln join --control-plane -f {file}",
            pending.join(", ")
        );
    }
}
