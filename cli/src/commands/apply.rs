//! `kiln apply -f cluster.yaml`: gather what the cluster is, plan what makes it match the file
//! ([`crate::apply::plan`]), and walk the plan's steps ([`crate::apply::steps`]) with the executor
//! here: playbooks for renders, joins, removals and the record, `kiln upgrade`'s drain and gates
//! between hosts. `--dry-run` prints the plan and its steps and changes nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::cluster::{runtime, ClusterArgs};
use crate::apply::plan::{self, Action, Live};
use crate::apply::steps::{self, Executor, Step};
use crate::bootstrap::phases::{store_start, wait};
use crate::bootstrap::{self, Context, Playbook};
use crate::config::{ClusterConfig, ClusterFile};
use crate::upgrade::host_actions::HostActions;
use crate::upgrade::plan::Target;
use crate::upgrade::steps::{Action as UpgradeAction, Actions as _};

/// Init's phases that render files onto a host, in init's order: a roll runs these on one host.
const ROLL_PHASES: &[&str] = &[
    "push",
    "store-start",
    "control-plane",
    "proxy",
    "dns",
    "container-runtime",
    "kubelet-start",
    "backup-schedule",
];

/// The cluster-wide phases of init that read the file (run once, after the hosts).
const RECORD_PHASES: &[&str] = &["dns-service", "storage-class", "upload-config"];

/// A dry run's lines that are file changes (the commands it would run follow from those).
const FILE_CHANGES: &[&str] = &["install ", "replace ", "change "];

/// Bound on asking the cluster what it is.
const API_TIMEOUT: Duration = Duration::from_secs(20);

/// Init's phases named in `names`, in init's order and with init's host selectors.
fn init_phases(names: &[&str], name: &str) -> anyhow::Result<Playbook> {
    let mut pb = Playbook::load("init", None)?;
    // kubelet-start runs twice in init (controllers, later workers): once per host is enough here.
    let mut seen: Vec<String> = vec![];
    pb.phases.retain(|p| {
        let keep = names.contains(&p.name.as_str()) && !seen.contains(&p.name);
        seen.push(p.name.clone());
        keep
    });
    pb.name = name.into();
    Ok(pb)
}

fn copy_args(a: &ClusterArgs, hosts: Vec<String>) -> ClusterArgs {
    ClusterArgs {
        file: a.file.clone(),
        accept_new_host_keys: a.accept_new_host_keys,
        local: a.local,
        playbook: None,
        bin_dir: a.bin_dir.clone(),
        dry_run: false,
        skip_phases: vec![],
        hosts,
        output: a.output.clone(),
    }
}

/// A context over the same file for `hosts` only.
fn narrowed(ctx: &Context, cluster: ClusterFile, hosts: &[String]) -> anyhow::Result<Context> {
    let mut opts = ctx.opts.clone();
    opts.only_hosts = hosts.to_vec();
    opts.dry_run = false;
    Ok(Context::new(cluster, opts)?)
}

async fn with_timeout<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(API_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| anyhow::anyhow!("{what}: {e}")),
        Err(_) => anyhow::bail!("{what}: no answer within {API_TIMEOUT:?}"),
    }
}

/// The live cluster: the file last applied, the Nodes, the recorded store members, and what init would
/// change on each host already in the cluster (a quiet dry run of [`ROLL_PHASES`] there).
async fn gather(ctx: &Context) -> anyhow::Result<Live> {
    if !ctx.admin_conf().exists() {
        return Ok(Live::default());
    }
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    let client = with_timeout("the admin kubeconfig", wait::admin_client(ctx)).await?;
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "kube-system");
    let cm = with_timeout(
        "reading kube-system/kiln-config (is the cluster up? `kiln init` brings it up)",
        cms.get_opt("kiln-config"),
    )
    .await?;
    let applied = match cm
        .and_then(|c| c.data)
        .and_then(|d| d.get("cluster.yaml").cloned())
    {
        Some(text) => crate::config::parse(&text, "kube-system/kiln-config")?,
        // A cluster from before kiln-config: take the file's hosts as what runs.
        None => ctx.cluster.config.clone(),
    };
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let nodes = with_timeout("listing Nodes", nodes.list(&Default::default()))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let members = applied
        .controllers()
        .chain(ctx.cluster.config.controllers())
        .filter(|c| store_start::load(ctx, &c.name).is_some())
        .map(|c| c.name.clone())
        .collect();
    let mut live = Live {
        applied: Some(applied),
        nodes,
        members,
        drift: BTreeMap::new(),
    };
    let joined: Vec<String> = ctx
        .cluster
        .config
        .spec
        .hosts
        .iter()
        .filter(|h| {
            if h.is_controller() {
                live.members.contains(&h.name)
            } else {
                live.nodes.contains(&h.name)
            }
        })
        .map(|h| h.name.clone())
        .collect();
    if joined.is_empty() {
        return Ok(live);
    }
    let mut opts = ctx.opts.clone();
    opts.only_hosts = joined;
    opts.dry_run = true;
    let mut look = Context::new(ctx.cluster.clone(), opts)?;
    look.progress = bootstrap::progress::Progress::quiet();
    bootstrap::run(&look, &init_phases(ROLL_PHASES, "apply-look")?).await?;
    if let Some(p) = &look.plan {
        for (host, lines) in p.lines() {
            let files: Vec<String> = lines
                .into_iter()
                .filter(|l| FILE_CHANGES.iter().any(|p| l.starts_with(p)))
                .collect();
            if !files.is_empty() {
                live.drift.insert(host, files);
            }
        }
    }
    Ok(live)
}

/// The upgrade's version skew rules over the hosts that run now, when a roll changes binaries.
async fn skew_refusal(ctx: &Context, p: &plan::Plan) -> anyhow::Result<Option<String>> {
    let rolled: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Roll {
                host,
                binaries: true,
                ..
            } => Some(host.as_str()),
            _ => None,
        })
        .collect();
    if rolled.is_empty() {
        return Ok(None);
    }
    let targets = crate::upgrade::gather::targets(ctx)?;
    let hosts: Vec<_> = crate::upgrade::gather::hosts(ctx)
        .await?
        .into_iter()
        .filter(|h| rolled.contains(&h.name.as_str()))
        .collect();
    Ok(crate::upgrade::plan::plan(&hosts, &targets, 1).refused)
}

struct Real<'a> {
    args: &'a ClusterArgs,
    ctx: &'a Context,
    rt: &'a tokio::runtime::Runtime,
    applied: Option<ClusterConfig>,
    ignore: Vec<String>,
    wait: u64,
    force: bool,
    targets: BTreeMap<String, Target>,
    client: std::sync::OnceLock<kube::Client>,
    /// Per mirror pod of the host being rolled, its config hash before the render.
    before: std::sync::Mutex<BTreeMap<String, String>>,
}

/// The annotation a mirror pod carries with its static pod's config hash (upstream's).
const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";

/// (config hash, Ready) of the mirror pods on `host`.
async fn mirror_pods(
    client: kube::Client,
    host: &str,
) -> Result<BTreeMap<String, (String, bool)>, String> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "kube-system");
    let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={host}"));
    let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| {
            let hash = p.metadata.annotations.as_ref()?.get(CONFIG_MIRROR)?.clone();
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some((p.metadata.name?, (hash, ready)))
        })
        .collect())
}

impl Real<'_> {
    fn client(&self) -> Result<kube::Client, String> {
        if let Some(c) = self.client.get() {
            return Ok(c.clone());
        }
        let c = self
            .rt
            .block_on(wait::admin_client(self.ctx))
            .map_err(|e| e.to_string())?;
        Ok(self.client.get_or_init(|| c).clone())
    }

    /// One of `kiln upgrade apply`'s host actions (cordon, drain, a gate) on `host`.
    fn upgrade_action(
        &self,
        host: &str,
        controller: bool,
        action: UpgradeAction,
    ) -> Result<String, String> {
        let acts = HostActions {
            ctx: self.ctx,
            client: self.client()?,
            targets: &self.targets,
            force: self.force,
        };
        let st = crate::upgrade::plan::Step {
            host: host.into(),
            controller,
            batch: 0,
            changes: vec![],
        };
        self.rt.block_on(acts.act(&st, action))
    }

    fn play(&self, ctx: &Context, pb: &Playbook) -> Result<String, String> {
        self.rt
            .block_on(bootstrap::run(ctx, pb))
            .map_err(|e| e.to_string())?;
        Ok(format!("{} done", pb.name))
    }

    /// The file's hosts plus `host` as the applied file had it (a host deleted from the file is still
    /// reached the way it was).
    fn with_removed(&self, host: &str) -> Result<ClusterFile, String> {
        let old = self
            .applied
            .as_ref()
            .and_then(|a| a.host(host))
            .ok_or_else(|| format!("{host} is in neither the file nor kube-system/kiln-config"))?;
        let mut cluster = self.ctx.cluster.clone();
        cluster.config.spec.hosts.push(old.clone());
        Ok(cluster)
    }

    /// The pods `changes` restart run from their new manifests and are Ready.
    fn restarted(&self, host: &str, changes: &[String]) -> Result<String, String> {
        let want = plan::restarted_pods(host, changes);
        if want.is_empty() {
            return Ok("no static pod manifest changed".into());
        }
        let before = self.before.lock().map_err(|e| e.to_string())?.clone();
        let client = self.client()?;
        let start = Instant::now();
        loop {
            let last = match self.rt.block_on(mirror_pods(client.clone(), host)) {
                Ok(now) => {
                    let waiting: Vec<String> = want
                        .iter()
                        .filter(|p| match (now.get(*p), before.get(*p)) {
                            (Some((hash, true)), old) => old == Some(hash),
                            _ => true,
                        })
                        .cloned()
                        .collect();
                    if waiting.is_empty() {
                        return Ok(format!(
                            "{} running from the new manifest and Ready after {:.1}s",
                            want.join(", "),
                            start.elapsed().as_secs_f64()
                        ));
                    }
                    format!("not restarted and Ready yet: {}", waiting.join(", "))
                }
                Err(e) => e,
            };
            if start.elapsed() > self.ctx.opts.wait_timeout {
                return Err(format!(
                    "not within {}s: {last}",
                    self.ctx.opts.wait_timeout.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn node_gone(&self, host: &str) -> Result<String, String> {
        use k8s_openapi::api::core::v1::Node;
        let nodes: kube::Api<Node> = kube::Api::all(self.client()?);
        let start = Instant::now();
        loop {
            match self.rt.block_on(nodes.get_opt(host)) {
                Ok(None) => {
                    return Ok(format!(
                        "node {host} gone after {:.1}s",
                        start.elapsed().as_secs_f64()
                    ))
                }
                Ok(Some(_)) if start.elapsed() > self.ctx.opts.wait_timeout => {
                    return Err(format!("node {host} still registered"))
                }
                Err(e) if start.elapsed() > self.ctx.opts.wait_timeout => return Err(e.to_string()),
                _ => std::thread::sleep(Duration::from_secs(1)),
            }
        }
    }
}

impl Executor for Real<'_> {
    fn run(&self, action: &Action, step: Step) -> Result<String, String> {
        let err = |e: anyhow::Error| format!("{e:#}");
        let (host, controller) = match action {
            Action::Roll {
                host, controller, ..
            }
            | Action::Remove { host, controller } => (host.as_str(), *controller),
            _ => ("", false),
        };
        match step {
            Step::Init => {
                super::cluster::init(copy_args(self.args, vec![]), self.ignore.clone(), self.wait)
                    .map_err(err)
                    .map(|_| "init done".into())
            }
            Step::Cordon => self.upgrade_action(host, controller, UpgradeAction::Cordon),
            Step::Drain => self.upgrade_action(host, controller, UpgradeAction::Drain),
            Step::Uncordon => self.upgrade_action(host, controller, UpgradeAction::Uncordon),
            Step::Gate(g) => self.upgrade_action(host, controller, UpgradeAction::Gate(g)),
            Step::Restarted => {
                let Action::Roll { changes, .. } = action else {
                    return Err("not a roll".into());
                };
                self.restarted(host, changes)
            }
            Step::Render => {
                // What runs now, to tell the restarted pods from the old ones afterwards.
                let now = self.rt.block_on(mirror_pods(self.client()?, host))?;
                *self.before.lock().map_err(|e| e.to_string())? =
                    now.into_iter().map(|(k, (h, _))| (k, h)).collect();
                let ctx =
                    narrowed(self.ctx, self.ctx.cluster.clone(), &[host.into()]).map_err(err)?;
                let pb = init_phases(ROLL_PHASES, "apply-roll").map_err(err)?;
                self.play(&ctx, &pb)
            }
            Step::JoinControllers => {
                let Action::JoinControllers(hosts) = action else {
                    return Err("not a controller join".into());
                };
                super::join_control_plane::run(
                    copy_args(self.args, hosts.clone()),
                    self.ignore.clone(),
                    self.wait,
                )
                .map_err(err)
                .map(|_| format!("joined {}", hosts.join(", ")))
            }
            Step::JoinWorkers => {
                let Action::JoinWorkers(hosts) = action else {
                    return Err("not a worker join".into());
                };
                let ctx = narrowed(self.ctx, self.ctx.cluster.clone(), hosts).map_err(err)?;
                let pb = Playbook::load("join", None).map_err(|e| e.to_string())?;
                self.play(&ctx, &pb)
            }
            Step::Leave => {
                let cluster = self.with_removed(host)?;
                let ctx = narrowed(self.ctx, cluster, &[host.into()]).map_err(err)?;
                let pb = Playbook::load("reset", None).map_err(|e| e.to_string())?;
                self.play(&ctx, &pb)?;
                // Its member is gone: a later init must not count it as a founder.
                store_start::forget(&ctx, host);
                Ok(format!("{host} left the cluster and was reset"))
            }
            Step::NodeGone => self.node_gone(host),
            Step::Record => {
                let pb = init_phases(RECORD_PHASES, "apply-record").map_err(err)?;
                self.play(self.ctx, &pb)
            }
        }
    }
}

pub fn run(args: ClusterArgs, ignore: Vec<String>, wait: u64, force: bool) -> anyhow::Result<i32> {
    if !args.hosts.is_empty() {
        anyhow::bail!(
            "--host does not apply to `kiln apply`: the file says which hosts the cluster has"
        );
    }
    let mut args = args;
    // The dry run here is apply's own (its plan and steps), not the bootstrapper's.
    let dry_run = std::mem::take(&mut args.dry_run);
    let ctx = args.context(ignore.clone(), wait)?;
    let rt = runtime()?;
    let live = rt.block_on(gather(&ctx))?;
    let mut p = plan::plan(&ctx.cluster.config, &live);
    if let Some(why) = rt.block_on(skew_refusal(&ctx, &p))? {
        p.actions.clear();
        p.refused.push(format!("binaries: {why}"));
    }
    if !p.refused.is_empty() || p.actions.is_empty() {
        print!("{}", plan::render(&p));
        return Ok(if p.refused.is_empty() { 0 } else { 1 });
    }
    if dry_run {
        println!(
            "apply plan for {} (nothing was changed):",
            args.file.display()
        );
        print!("{}", steps::render_dry_run(&p.actions));
        return Ok(0);
    }
    if p.actions == [Action::Init] {
        // No cluster: init is the whole apply.
        drop(rt);
        return super::cluster::init(args, ignore, wait);
    }
    let real = Real {
        args: &args,
        ctx: &ctx,
        rt: &rt,
        applied: live.applied.clone(),
        ignore,
        wait,
        force,
        targets: crate::upgrade::gather::targets(&ctx)?,
        client: Default::default(),
        before: Default::default(),
    };
    let report = steps::walk(&real, &p.actions, &|line| println!("{line}"));
    if let Some((n, step, why)) = &report.failed {
        println!(
            "apply stopped: action {n} ({step}) failed: {why}\nwhat is done stays done; fix the cause and run `kiln apply` again to go on"
        );
        return Ok(1);
    }
    println!(
        "applied {} action(s): the cluster matches {}",
        p.actions.len(),
        args.file.display()
    );
    Ok(0)
}
