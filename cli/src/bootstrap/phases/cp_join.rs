//! `kiln join --control-plane`: a controller listed in cluster.yaml after the cluster started joins the
//! running control plane, as kubeadm's `join --control-plane` does with stacked etcd. Phases (see
//! `playbooks/join-control-plane.yaml`): its store member is added as a learner through a running
//! member (`store-learner`), the kubelet starts kiln-store with `--initial-cluster-state existing`,
//! kiln waits until the learner's applied index is close to the leader's and promotes it
//! (`store-promote`); then the API server, scheduler and controller-manager. At the end every node's
//! kubelet learns the new API servers (`apiserver-lb`). Controllers join one at a time, so the store
//! never has more than one learner.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;

use super::member_client::{Member, MemberClient};
use super::store_start::{self, peer_url, StoreStart};
use super::*;
use crate::bootstrap::host_files::{install_files, staged, Install};

/// A learner is promoted once its applied index is at most this far behind the leader's, and at most a
/// tenth of it (a young cluster's whole log may be shorter than this).
const CATCH_UP_SLACK: u64 = 100;

/// Whether a learner that applied `learner` entries has caught up with a leader that applied `leader`.
fn caught_up(learner: u64, leader: u64) -> bool {
    learner > 0 && learner + CATCH_UP_SLACK.min(leader / 10) >= leader
}

fn err(phase: &str, host: &str, e: impl std::fmt::Display) -> BootstrapError {
    BootstrapError::phase(phase, host, e.to_string())
}

/// The member of `members` that is controller `h` (by peer URL, which a learner has before it has a name).
pub fn member_of<'a>(members: &'a [Member], h: &crate::config::Host) -> Option<&'a Member> {
    let url = peer_url(h);
    members
        .iter()
        .find(|m| m.peer_urls.contains(&url))
        .or_else(|| members.iter().find(|m| m.name == h.name))
}

/// A client to a voting member that knows a leader, trying the controllers of cluster.yaml in order
/// (except `except`); the error names every member tried and why.
pub async fn live_member(
    ctx: &Context,
    except: Option<&str>,
) -> Result<(MemberClient, String), BootstrapError> {
    let pki = ctx.pki_dir(&ctx.first_controller().name);
    let mut tried = vec![];
    let mut leaderless = vec![];
    for c in ctx.cluster.config.controllers() {
        if Some(c.name.as_str()) == except {
            continue;
        }
        let mut client = match MemberClient::connect(&c.node_address(), &pki).await {
            Ok(m) => m,
            Err(e) => {
                tried.push(format!("{}: {e}", c.name));
                continue;
            }
        };
        match client.status().await {
            Ok(s) if s.learner => tried.push(format!("{}: a learner", c.name)),
            Ok(s) if s.leader == 0 => leaderless.push(c.name.clone()),
            Ok(_) => match client.quorum_read().await {
                Ok(()) => return Ok((client, c.name.clone())),
                Err(e) => {
                    leaderless.push(c.name.clone());
                    tried.push(format!("{}: linearizable read failed: {e}", c.name));
                }
            },
            Err(e) => tried.push(format!("{}: {e}", c.name)),
        }
    }
    let file = ctx.cluster.path.display();
    if !leaderless.is_empty() {
        return Err(err(
            "join",
            &leaderless[0],
            format!(
                "the store has no leader (no quorum): {} answered but cannot reach a quorum; \
                 bring the stopped controllers of {file} back before adding members ({})",
                leaderless.join(", "),
                tried.join("; ")
            ),
        ));
    }
    Err(err(
        "join",
        "local",
        format!(
            "no voting store member of {file} answered ({}); is the control plane running? \
             (`kiln init -f {file}` starts it)",
            tried.join("; ")
        ),
    ))
}

/// A client for the API server at `addr` with the operator's admin.conf (whose server names
/// controlPlaneEndpoint, which may be the controller that is down).
pub async fn api_client_at(ctx: &Context, addr: &str) -> Result<kube::Client, BootstrapError> {
    let path = ctx.admin_conf();
    let fail = |e: String| err("join", "local", format!("{}: {e}", path.display()));
    let kc = kube::config::Kubeconfig::read_from(&path).map_err(|e| fail(e.to_string()))?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| fail(e.to_string()))?;
    let host = if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    };
    cfg.cluster_url = format!("https://{host}:6443")
        .parse()
        .map_err(|e: http::uri::InvalidUri| fail(e.to_string()))?;
    cfg.connect_timeout = Some(Duration::from_secs(5));
    cfg.read_timeout = Some(Duration::from_secs(10));
    kube::Client::try_from(cfg).map_err(|e| fail(e.to_string()))
}

/// What the running cluster says about the controllers of cluster.yaml.
pub struct Survey {
    /// The voting member that answered.
    pub via: String,
    /// Controllers (of `only`, else all) that are not yet voting members with a control-plane Node.
    pub pending: Vec<String>,
}

pub async fn survey(ctx: &Context, only: &[String]) -> Result<Survey, BootstrapError> {
    let (mut client, via) = live_member(ctx, None).await?;
    let members = client.members().await.map_err(|e| err("join", &via, e))?;
    let api = api_client_at(ctx, &ctx.host(&via).node_address()).await?;
    let nodes: kube::Api<Node> = kube::Api::all(api);
    let mut pending = vec![];
    for c in ctx.cluster.config.controllers() {
        if !only.is_empty() && !only.contains(&c.name) {
            continue;
        }
        let voter = member_of(&members, c).is_some_and(|m| !m.learner && !m.name.is_empty());
        let marked = if voter {
            let node = nodes
                .get_opt(&c.name)
                .await
                .map_err(|e| err("join", &via, format!("reading node {}: {e}", c.name)))?;
            node.and_then(|n| n.metadata.labels)
                .is_some_and(|l| l.contains_key(wait::CONTROL_PLANE_LABEL))
        } else {
            false
        };
        if !(voter && marked) {
            pending.push(c.name.clone());
        }
    }
    Ok(Survey { via, pending })
}

/// `name=peerURL` of every member, naming unstarted ones (MemberList shows no name until a member
/// has started) by the controller of cluster.yaml with that peer URL.
fn initial_cluster(ctx: &Context, members: &[Member]) -> String {
    members
        .iter()
        .filter_map(|m| {
            let url = m.peer_urls.first()?;
            let name = if !m.name.is_empty() {
                m.name.clone()
            } else {
                ctx.cluster
                    .config
                    .controllers()
                    .find(|c| m.peer_urls.contains(&peer_url(c)))
                    .map(|c| c.name.clone())
                    .unwrap_or_else(|| format!("{:x}", m.id))
            };
            Some(format!("{name}={url}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A data dir left by an earlier incarnation of this member would carry another member ID: stop the
/// store (manifest away, wait for the process) and remove it before the new member starts.
async fn remove_stale_store(ctx: &Context, host: &str) -> Result<bool, BootstrapError> {
    let t = ctx.transport(host).await?;
    if !t
        .probe("test -d /var/lib/kiln/store", None)
        .await?
        .success()
    {
        return Ok(false);
    }
    t.run(&format!(
        "rm -f {MANIFESTS}/kiln-store.yaml; \
         for i in $(seq 60); do n=''; for p in /proc/[0-9]*; do \
           [ \"$(readlink $p/exe 2>/dev/null)\" = {REMOTE_BIN}/kiln-store ] && n=\"$n ${{p#/proc/}}\"; done; \
           [ -z \"$n\" ] && break; sleep 0.5; done; \
         [ -n \"$n\" ] && kill -KILL $n 2>/dev/null; rm -rf /var/lib/kiln/store"
    ))
    .await?;
    Ok(true)
}

/// Phase store-learner: add `host` as a learner (or find it added by an earlier run), record how it
/// starts, and install only its store manifest (the kubelet, started next, runs it).
pub(super) async fn store_learner(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    const PHASE: &str = "store-learner";
    let h = ctx.host(host);
    let url = peer_url(h);
    let (mut client, via) = live_member(ctx, Some(host)).await?;
    let members = client.members().await.map_err(|e| err(PHASE, host, e))?;
    let voters: Vec<(String, String)> = members
        .iter()
        .filter(|m| !m.learner && !m.name.is_empty())
        .filter_map(|m| Some((m.name.clone(), m.peer_urls.first()?.clone())))
        .collect();
    store_start::adopt_voters(ctx, &voters)?;
    let existing = member_of(&members, h).cloned();
    let mut notes = vec![];
    let members = match &existing {
        Some(m) if !m.learner => {
            notes.push(format!("already a voting member ({:x})", m.id));
            members
        }
        Some(m) => {
            notes.push(format!("learner {:x} already added; reused", m.id));
            members
        }
        None if ctx.plan.is_some() => {
            notes.push(format!("would add learner {url} via {via}"));
            members
        }
        None => {
            let id = client
                .add_learner(&url)
                .await
                .map_err(|e| err(PHASE, host, format!("MemberAdd via {via}: {e}")))?;
            notes.push(format!("learner {id:x} added via {via}"));
            if remove_stale_store(ctx, host).await? {
                notes.push("stale store data of an earlier member removed".into());
            }
            // The member list with the new learner: what the store asks at its first start.
            store_start::forget(ctx, host);
            client.members().await.map_err(|e| err(PHASE, host, e))?
        }
    };
    if store_start::load(ctx, host).is_none() && ctx.plan.is_none() {
        let mut list = members.clone();
        if member_of(&list, h).is_none() {
            list.push(Member {
                id: 0,
                name: host.into(),
                peer_urls: vec![url.clone()],
                learner: true,
            });
        }
        let record = StoreStart {
            initial_cluster: initial_cluster(ctx, &list),
            state: store_start::EXISTING.into(),
        };
        store_start::save(ctx, host, &record)?;
    }
    let c = push::control_plane_context(ctx, host);
    let manifest = staged(
        ctx,
        host,
        "kiln-store.yaml",
        &c,
        format!("{MANIFESTS}/kiln-store.yaml"),
        0o600,
    )?;
    if !install_files(ctx, host, &[manifest]).await?.is_empty() {
        notes.push("wrote kiln-store.yaml (--initial-cluster-state existing)".into());
    }
    Ok(
        if existing.as_ref().is_some_and(|m| !m.learner) && notes.len() == 1 {
            Outcome::Skipped(notes.join("; "))
        } else {
            Outcome::Done(notes.join("; "))
        },
    )
}

/// Maintenance Status of the store's leader (its ID from `via`'s status, its address from the member
/// list and cluster.yaml); `via`'s own status when the leader is no controller of cluster.yaml.
async fn leader_status(
    ctx: &Context,
    via: &mut MemberClient,
    members: &[Member],
    pki: &std::path::Path,
) -> Result<super::member_client::Status, super::member_client::MemberError> {
    let s = via.status().await?;
    let leader = members
        .iter()
        .find(|m| m.id == s.leader)
        .and_then(|m| {
            ctx.cluster
                .config
                .controllers()
                .find(|c| m.peer_urls.contains(&peer_url(c)))
        })
        .map(|c| c.node_address());
    match leader {
        Some(addr) => MemberClient::connect(&addr, pki).await?.status().await,
        None => Ok(s),
    }
}

/// Phase store-promote: wait until the learner's applied index is close to the leader's (Maintenance
/// Status on both), then MemberPromote (retried while the leader still finds it behind).
pub(super) async fn store_promote(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    const PHASE: &str = "store-promote";
    let h = ctx.host(host);
    let (mut client, via) = live_member(ctx, Some(host)).await?;
    let members = client.members().await.map_err(|e| err(PHASE, host, e))?;
    let Some(me) = member_of(&members, h).cloned() else {
        return Err(err(
            PHASE,
            host,
            format!("not a store member (the store-learner phase adds it; asked {via})"),
        ));
    };
    if !me.learner {
        return Ok(Outcome::Skipped(format!(
            "already a voting member ({:x})",
            me.id
        )));
    }
    let pki = ctx.pki_dir(&ctx.first_controller().name);
    let deadline = Instant::now() + ctx.opts.wait_timeout;
    let mut last = String::from("its store did not answer yet");
    let caught_up = loop {
        if Instant::now() > deadline {
            return Err(BootstrapError::Timeout {
                what: format!("the store learner on {host} to catch up ({last})"),
                seconds: ctx.opts.wait_timeout.as_secs(),
            });
        }
        let mine = match MemberClient::connect(&h.node_address(), &pki).await {
            Ok(mut c) => c.status().await,
            Err(e) => Err(e),
        };
        match (mine, leader_status(ctx, &mut client, &members, &pki).await) {
            (Ok(m), Ok(leader)) if caught_up(m.applied_index, leader.applied_index) => {
                break (m.applied_index, leader.applied_index);
            }
            (Ok(m), Ok(leader)) => {
                last = format!(
                    "applied {} of the leader's {}",
                    m.applied_index, leader.applied_index
                )
            }
            (Err(e), _) | (_, Err(e)) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    loop {
        match client.promote(me.id).await {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(host, error = %e, "promote not accepted yet");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(err(PHASE, host, format!("MemberPromote via {via}: {e}"))),
        }
    }
    Ok(Outcome::Done(format!(
        "caught up (applied index {} of {}), promoted {:x} to voter",
        caught_up.0, caught_up.1, me.id
    )))
}

/// Set when a control-plane join starts and cleared once every node's balancer knows the controllers,
/// so a re-run after a failure in between still rolls the balancers out.
fn lb_marker(ctx: &Context) -> std::path::PathBuf {
    ctx.state_dir.join("apiserver-lb-pending")
}

pub fn mark_lb_pending(ctx: &Context) -> Result<(), BootstrapError> {
    if ctx.plan.is_some() {
        return Ok(());
    }
    kiln_pki::files::write_atomic(&lb_marker(ctx), b"1\n", 0o600).map_err(super::pki::pki_err)
}

pub fn lb_pending(ctx: &Context) -> bool {
    lb_marker(ctx).exists()
}

async fn restart_kubelet(ctx: &Context, host: &str) -> Result<(), BootstrapError> {
    let t = ctx.transport(host).await?;
    if t.probe("test -d /run/systemd/system", None)
        .await?
        .success()
    {
        t.run("systemctl restart kiln-kubelet").await?;
    } else {
        crate::bootstrap::reset::stop_supervisor(&*t).await?;
        t.run(&format!(
            "setsid /bin/sh {SUPERVISOR} </dev/null >/dev/null 2>&1 &"
        ))
        .await?;
    }
    Ok(())
}

/// The node's Lease renew time (as written), through `api`.
async fn lease_renewed(api: &kube::Api<Lease>, host: &str) -> Option<String> {
    let lease = tokio::time::timeout(Duration::from_secs(10), api.get_opt(host))
        .await
        .ok()?
        .ok()??;
    serde_json::to_value(&lease).ok()?["spec"]["renewTime"]
        .as_str()
        .map(str::to_string)
}

/// Point one node's kubeconfigs at the node-local balancer and give its kubelet the current backends;
/// the kubelet restarts only when something changed, and kiln waits for its next lease renewal (which
/// the restarted kubelet makes through its balancer) before the next node.
async fn rewire_node(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let t = ctx.transport(host).await?;
    let controller = ctx.host(host).is_controller();
    let mut files: Vec<Install> = super::push::node_kubeconfigs(ctx).collect();
    if controller {
        files.push(Install {
            local: super::pki::kubeconfig_dir(ctx, host).join("kubelet.conf"),
            remote: format!("{KILN_ETC}/kubelet.conf"),
            mode: 0o600,
        });
    }
    let mut changed = install_files(ctx, host, &files).await?;
    if !controller {
        // A worker's kubelet.conf is the kubelet's own (TLS bootstrap): only its server changes.
        let lb = push::node_api_server(ctx);
        let out = t
            .run(&format!(
                "for f in {KILN_ETC}/kubelet.conf {BOOTSTRAP_KUBECONFIG}; do [ -f \"$f\" ] || continue; \
                 grep -Eq '^[[:space:]]*server:[[:space:]]*{lb}$' \"$f\" && continue; \
                 sed -i -E 's#^([[:space:]]*server:[[:space:]]*).*#\\1{lb}#' \"$f\" && echo \"$f\"; done"
            ))
            .await?;
        changed.extend(out.lines().map(str::to_string));
    }
    // Watch the node's lease through another controller: this host's own API server may restart too.
    let other = push::api_controllers(ctx)
        .into_iter()
        .find(|c| c.name != host)
        .expect("several controllers");
    let leases: kube::Api<Lease> = kube::Api::namespaced(
        api_client_at(ctx, &other.node_address()).await?,
        "kube-node-lease",
    );
    let restarted = match push::kubelet_start(ctx, host).await? {
        Outcome::Done(_) => true,
        Outcome::Skipped(_) if !changed.is_empty() => {
            restart_kubelet(ctx, host).await?;
            true
        }
        Outcome::Skipped(_) => false,
    };
    if !restarted {
        return Ok(Outcome::Skipped(
            "balancer and kubeconfigs up to date".into(),
        ));
    }
    // Read after the old kubelet has stopped: any later renewal is the new kubelet's (at worst this
    // waits for its next one).
    let before = lease_renewed(&leases, host).await;
    let deadline = Instant::now() + ctx.opts.wait_timeout;
    loop {
        let now = lease_renewed(&leases, host).await;
        if now.is_some() && now != before {
            break;
        }
        if Instant::now() > deadline {
            return Err(BootstrapError::Timeout {
                what: format!("the restarted kubelet on {host} to renew its lease"),
                seconds: ctx.opts.wait_timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let what = if changed.is_empty() {
        String::new()
    } else {
        format!(" ({} updated)", changed.join(", "))
    };
    Ok(Outcome::Done(format!(
        "kubelet restarted with the balancer's backends{what}; lease renewed"
    )))
}

/// Phase apiserver-lb (local): every registered node, one at a time (workers first, so at most one
/// controller's static pods restart at once), gets the node-local balancer with every controller.
pub(super) async fn apiserver_lb(ctx: &Context) -> Result<Outcome, BootstrapError> {
    if !push::highly_available(ctx) {
        return Ok(Outcome::Skipped(
            "one controller: nodes reach it directly".into(),
        ));
    }
    // Any live voting member's API server: controlPlaneEndpoint may be the controller that is down.
    let (_, via) = live_member(ctx, None).await?;
    let api = api_client_at(ctx, &ctx.host(&via).node_address()).await?;
    let nodes: kube::Api<Node> = kube::Api::all(api);
    let registered: Vec<String> = nodes
        .list(&Default::default())
        .await
        .map_err(|e| err("apiserver-lb", "local", format!("listing nodes: {e}")))?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let cfg = &ctx.cluster.config;
    let order = cfg
        .spec
        .hosts
        .iter()
        .filter(|h| !h.is_controller())
        .chain(cfg.controllers())
        .filter(|h| registered.contains(&h.name));
    let mut restarted = vec![];
    for h in order {
        let started = Instant::now();
        let outcome = rewire_node(ctx, &h.name).await.inspect_err(|e| {
            ctx.report_failure("apiserver-lb", &h.name, e);
        })?;
        if matches!(outcome, Outcome::Done(_)) {
            restarted.push(h.name.clone());
        }
        ctx.report("apiserver-lb", &h.name, &outcome, started.elapsed());
    }
    if ctx.plan.is_none() {
        let _ = std::fs::remove_file(lb_marker(ctx));
    }
    Ok(if restarted.is_empty() {
        Outcome::Skipped("every node's balancer is up to date".into())
    } else {
        Outcome::Done(format!(
            "balancer updated on {} (kubelets restarted one at a time)",
            restarted.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: u64, name: &str, url: &str, learner: bool) -> Member {
        Member {
            id,
            name: name.into(),
            peer_urls: vec![url.into()],
            learner,
        }
    }

    fn ctx(dir: &std::path::Path) -> Context {
        let file = dir.join("cluster.yaml");
        std::fs::write(
            &file,
            "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: t\nspec:\n  hosts:\n\
             \x20   - name: host1\n      address: 10.250.0.11\n      role: controller\n\
             \x20   - name: host2\n      address: 10.250.0.12\n      role: controller\n",
        )
        .unwrap();
        Context::new(
            crate::config::load(&file).unwrap(),
            crate::bootstrap::Options::default(),
        )
        .unwrap()
    }

    #[test]
    fn a_learner_catches_up_within_a_tenth_and_at_most_100_entries() {
        assert!(!caught_up(0, 97), "nothing applied yet");
        assert!(!caught_up(80, 97));
        assert!(caught_up(88, 97));
        assert!(caught_up(97, 97));
        assert!(!caught_up(9_800, 10_000));
        assert!(caught_up(9_900, 10_000));
    }

    #[test]
    fn unstarted_members_are_named_by_their_peer_url() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let list = [
            m(1, "host1", "https://10.250.0.11:2380", false),
            m(0xab, "", "https://10.250.0.12:2380", true),
            m(0xcd, "", "https://10.250.0.99:2380", true),
        ];
        assert_eq!(
            initial_cluster(&ctx, &list),
            "host1=https://10.250.0.11:2380,host2=https://10.250.0.12:2380,cd=https://10.250.0.99:2380"
        );
        let h2 = ctx.host("host2");
        assert_eq!(member_of(&list, h2).map(|m| m.id), Some(0xab));
    }

    #[test]
    fn a_joined_member_keeps_its_flags_and_unjoined_controllers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        // Nothing recorded: both are founders of a new cluster.
        assert_eq!(
            store_start::for_host(&ctx, "host2").initial_cluster,
            "host1=https://10.250.0.11:2380,host2=https://10.250.0.12:2380"
        );
        // host1 started alone (recorded); host2 came later and must join, not found a new cluster.
        let alone = StoreStart {
            initial_cluster: "host1=https://10.250.0.11:2380".into(),
            state: store_start::NEW.into(),
        };
        store_start::save(&ctx, "host1", &alone).unwrap();
        assert_eq!(store_start::unrecorded_controllers(&ctx), ["host2"]);
        let e = store_start::ensure_recorded(&ctx, "host2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kiln join --control-plane"), "{e}");
        store_start::ensure_recorded(&ctx, "host1").unwrap();
        let c = push::control_plane_context(&ctx, "host1");
        assert_eq!(
            c.get("initial_cluster").and_then(|v| v.as_str()),
            Some("host1=https://10.250.0.11:2380")
        );
        let joined = StoreStart {
            initial_cluster: "host1=https://10.250.0.11:2380,host2=https://10.250.0.12:2380".into(),
            state: store_start::EXISTING.into(),
        };
        store_start::save(&ctx, "host2", &joined).unwrap();
        let c = push::control_plane_context(&ctx, "host2");
        assert_eq!(
            c.get("initial_cluster_state").and_then(|v| v.as_str()),
            Some("existing")
        );
        assert!(store_start::unrecorded_controllers(&ctx).is_empty());
    }
}
