//! Restoring a bundle onto other hosts than the ones it was taken from: new addresses, new names, or
//! hosts that were never initialised (a rebuilt data centre, a DR site, a drill's scratch lab).
//!
//! The cluster keeps its identity: the bundle's cluster CA, store CA and service-account key seed the
//! state directory, so old kubeconfigs, client certificates and service-account tokens stay valid. What
//! names the old hosts (serving certificates with their SANs, kubeconfigs with their server URLs) is
//! issued again for the new ones. Then `init` bootstraps the new hosts (workers join by TLS bootstrap),
//! the store's data is replaced by the bundle's (`restore::restore_bundle`: stop, restore every member,
//! start, verify), and the API is brought in line with the new cluster.yaml: Nodes of hosts that are
//! gone are deleted with the pods bound to them, the control-plane marks and kube-system/kiln-config are
//! applied again, and every node must be Ready.
//!
//! Refused, before anything is touched: another cluster name, another service CIDR (Services keep their
//! ClusterIPs, the `kubernetes` Service its first address), another pod CIDR or node mask (Nodes keep
//! their spec.podCIDR, which Kubernetes never changes), a bundle without the CA key, and hosts or a state
//! directory that hold another cluster's CA.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::bundle::Bundle;
use super::{BundleInfo, SnapshotError};
use crate::bootstrap::{self, Context, Playbook};
use crate::config::ClusterConfig;

/// Serving certificates: they carry the hosts' names and addresses as SANs.
const SERVING_CERTS: &[(&str, kiln_pki::SanKind)] = &[
    ("apiserver", kiln_pki::SanKind::ApiServer),
    ("store-server", kiln_pki::SanKind::Store),
    ("store-peer", kiln_pki::SanKind::Store),
];

const HOST_CA: &str = "/etc/kiln/pki/ca.crt";

/// How a restore reaches the hosts of the cluster.yaml it was given.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// The bundle's own controllers, initialised: restore the store data in place.
    SameHosts,
    /// Other or fresh hosts: bootstrap them with the bundle's identity, then restore. The lines say why.
    NewHosts(Vec<String>),
}

fn incompatible(msg: impl Into<String>) -> SnapshotError {
    SnapshotError::Incompatible(msg.into())
}

/// The bundle's cluster.yaml, parsed and validated.
pub fn bundle_cluster(bundle: &Bundle) -> Result<ClusterConfig, SnapshotError> {
    let p = bundle.cluster_yaml();
    let text = std::fs::read_to_string(&p).map_err(super::io("reading", &p))?;
    crate::config::parse(&text, "the bundle's cluster.yaml").map_err(|e| SnapshotError::Bundle {
        path: bundle.info.path.clone().unwrap_or_default(),
        message: e.to_string(),
    })
}

/// What the data in the bundle fixes and a new cluster.yaml must not change.
pub fn check_compatible(old: &ClusterConfig, new: &ClusterConfig) -> Result<(), SnapshotError> {
    if old.metadata.name != new.metadata.name {
        return Err(incompatible(format!(
            "the bundle is of cluster {:?}, cluster.yaml names {:?} (kubeconfigs and the store's data carry the name)",
            old.metadata.name, new.metadata.name
        )));
    }
    let (o, n) = (&old.spec.networking, &new.spec.networking);
    if o.service_cidr != n.service_cidr {
        return Err(incompatible(format!(
            "networking.serviceCIDR {} differs from the bundle's {}: the restored Services keep their ClusterIPs \
             (and `kubernetes` its {}), which must stay inside the range",
            n.service_cidr, o.service_cidr, o.service_cidr
        )));
    }
    if o.pod_cidr != n.pod_cidr || o.node_cidr_mask_size != n.node_cidr_mask_size {
        return Err(incompatible(format!(
            "networking.podCIDR {}/nodeCIDRMaskSize {} differ from the bundle's {}/{}: restored Nodes keep their \
             spec.podCIDR, which Kubernetes never changes",
            n.pod_cidr, n.node_cidr_mask_size, o.pod_cidr, o.node_cidr_mask_size
        )));
    }
    Ok(())
}

/// The cluster CA certificate (PEM) of the bundle's state, and the PKI directory holding it with its key.
fn bundle_ca(bundle: &Bundle) -> Option<(PathBuf, String)> {
    state_ca(&bundle.state_dir())
}

/// The first per-host PKI directory of a state directory with the CA and its key, and the CA (PEM).
fn state_ca(state: &Path) -> Option<(PathBuf, String)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(state.join("pki"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join("ca.key").exists())
        .collect();
    dirs.sort();
    let dir = dirs.into_iter().next()?;
    let pem = std::fs::read_to_string(dir.join("ca.crt")).ok()?;
    Some((dir, pem))
}

fn same_pem(a: &str, b: &str) -> bool {
    a.trim() == b.trim()
}

/// Look at the hosts: fresh (no /etc/kiln/pki/ca.crt), carrying the bundle's CA, or another cluster's
/// (refused). The bundle's controllers, all initialised, mean an in-place restore.
pub async fn detect(
    ctx: &Context,
    bundle: &Bundle,
    old: &ClusterConfig,
) -> Result<Target, SnapshotError> {
    let reference = bundle_ca(bundle)
        .map(|(_, pem)| pem)
        .or_else(|| state_ca(&ctx.state_dir).map(|(_, pem)| pem));
    let hosts = &ctx.cluster.config.spec.hosts;
    let looks = hosts.iter().map(|h| async move {
        let t = ctx.transport(&h.name).await?;
        let pem = t.run(&format!("cat {HOST_CA} 2>/dev/null || true")).await?;
        Ok::<_, SnapshotError>((h.name.clone(), pem))
    });
    let mut fresh = vec![];
    for r in futures::future::join_all(looks).await {
        let (name, pem) = r?;
        if pem.trim().is_empty() {
            fresh.push(name);
        } else if let Some(ca) = &reference {
            if !same_pem(ca, &pem) {
                return Err(incompatible(format!(
                    "host {name} holds another cluster's CA ({HOST_CA}): run `kiln reset` on it first, \
                     or take it out of cluster.yaml"
                )));
            }
        }
    }
    let key = |c: &ClusterConfig| {
        let mut v: Vec<(String, String)> = c
            .controllers()
            .map(|h| (h.name.clone(), h.node_address()))
            .collect();
        v.sort();
        v
    };
    let (was, now) = (key(old), key(&ctx.cluster.config));
    if fresh.is_empty() && was == now {
        return Ok(Target::SameHosts);
    }
    let show = |v: &[(String, String)]| {
        v.iter()
            .map(|(n, a)| format!("{n} ({a})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut why = vec![];
    if was != now {
        why.push(format!(
            "controllers {} instead of the bundle's {}",
            show(&now),
            show(&was)
        ));
    }
    if !fresh.is_empty() {
        why.push(format!("fresh hosts: {}", fresh.join(", ")));
    }
    Ok(Target::NewHosts(why))
}

/// Make the state directory of `ctx` carry the bundle's identity: seeded from the bundle when it has no
/// CA (per-host directories of hosts that are not in cluster.yaml left out), kept when it holds the
/// bundle's CA, refused when it holds another. Serving certificates whose SANs miss a host's new names,
/// and kubeconfigs naming another server, are removed so that `init` issues them again. Returns what was
/// done, for the user.
pub fn seed_state(ctx: &Context, bundle: &Bundle) -> Result<Vec<String>, SnapshotError> {
    let state = &ctx.state_dir;
    let path = bundle.info.path.clone().unwrap_or_default();
    let (_, ca) = bundle_ca(bundle).ok_or_else(|| SnapshotError::Bundle {
        path: path.clone(),
        message: "its state has no cluster CA key (pki/<host>/ca.key): it cannot seed new hosts"
            .into(),
    })?;
    let mut said = vec![];
    let seeded = state_ca(state).is_none();
    match state_ca(state) {
        None => {
            copy_dir(&bundle.state_dir(), state).map_err(super::io("seeding", state))?;
            said.push(format!(
                "state directory {} seeded from the bundle: cluster CA, store CA and service-account key kept",
                state.display()
            ));
        }
        Some((_, pem)) if same_pem(&pem, &ca) => said.push(format!(
            "state directory {} already holds the bundle's CA",
            state.display()
        )),
        Some((dir, _)) => {
            return Err(incompatible(format!(
                "the state directory's CA ({}) is not the bundle's: move the directory away (or set stateDir) \
                 to restore the bundle's cluster identity",
                dir.join("ca.crt").display()
            )))
        }
    }
    // Records of how the old hosts' store members first started (`store-members/`, written by init and
    // join --control-plane) describe the old peers: the new controllers are all founders of a new store,
    // which init records again.
    let members = state.join("store-members");
    match std::fs::remove_dir_all(&members) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(super::io("removing", &members)(e))
        }
        _ => {}
    }
    let cfg = &ctx.cluster.config;
    let first = ctx.first_controller().name.clone();
    let first_pki = ctx.pki_dir(&first);
    if !first_pki.join("ca.key").exists() {
        // A scheduled bundle holds the PKI of the controller that saved it, and hosts may have new names:
        // the first controller's directory is seeded from one that has the CA (init copies it on).
        let (donor, _) =
            state_ca(state).ok_or_else(|| incompatible("no CA in the state directory"))?;
        copy_dir(&donor, &first_pki).map_err(super::io("seeding", &first_pki))?;
    }
    if seeded {
        for sub in ["pki", "kubeconfigs", "rendered"] {
            for e in std::fs::read_dir(state.join(sub))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = e.file_name().to_string_lossy().into_owned();
                if cfg.host(&name).is_none() {
                    let p = e.path();
                    std::fs::remove_dir_all(&p).map_err(super::io("removing", &p))?;
                }
            }
        }
    }
    for h in cfg.controllers() {
        let stale = stale_serving_certs(ctx, h);
        if stale.is_empty() {
            continue;
        }
        let dir = ctx.pki_dir(&h.name);
        for name in &stale {
            let spec = kiln_pki::spec(name).expect("serving certs are in the tree");
            for f in [spec.cert_file(), spec.key_file()] {
                remove(&dir.join(f))?;
            }
        }
        said.push(format!(
            "certificates re-issued for {} with its new SANs ({}{}): {}",
            h.name,
            h.address,
            if h.node_address() != h.address {
                format!(", {}", h.node_address())
            } else {
                String::new()
            },
            stale.join(", ")
        ));
    }
    let stale = stale_kubeconfigs(ctx);
    if !stale.is_empty() {
        for p in &stale {
            remove(p)?;
        }
        said.push(format!(
            "kubeconfigs re-issued for the new API endpoints ({} file(s), admin.conf names https://{}); \
             old kubeconfigs stay valid: same CA",
            stale.len(),
            cfg.control_plane_endpoint()
        ));
    }
    Ok(said)
}

fn remove(p: &Path) -> Result<(), SnapshotError> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(super::io("removing", p)(e)),
        _ => Ok(()),
    }
}

/// The serving certificates of controller `h` in the state directory whose SANs miss one that the
/// certs phase would put there now (present ones only).
fn stale_serving_certs(ctx: &Context, h: &crate::config::Host) -> Vec<&'static str> {
    let mut params = kiln_pki::TreeParams::new(&h.name);
    params.host_addresses = vec![h.address.clone(), h.node_address()];
    params.control_plane_endpoint = Some(ctx.cluster.config.control_plane_endpoint());
    params.service_ip = first_service_ip(&ctx.cluster.config);
    let dir = ctx.pki_dir(&h.name);
    SERVING_CERTS
        .iter()
        .filter(|(name, kind)| {
            let spec = kiln_pki::spec(name).expect("serving certs are in the tree");
            let path = dir.join(spec.cert_file());
            if !path.exists() {
                return false;
            }
            match kiln_pki::read_cert(&path) {
                Ok(c) => params.sans(*kind).iter().any(|s| !c.sans.contains(s)),
                Err(_) => true,
            }
        })
        .map(|(name, _)| *name)
        .collect()
}

fn first_service_ip(cfg: &ClusterConfig) -> std::net::IpAddr {
    cfg.spec.networking.kubernetes_service_ip()
}

/// Kubeconfigs in the state directory whose server is not the one the kubeconfigs phase would write now.
fn stale_kubeconfigs(ctx: &Context) -> Vec<PathBuf> {
    let cfg = &ctx.cluster.config;
    let node_server = crate::bootstrap::phases::push::node_api_server(ctx);
    let mut want = vec![(
        ctx.admin_conf(),
        format!("https://{}", cfg.control_plane_endpoint()),
    )];
    for kind in crate::bootstrap::phases::NODE_KUBECONFIGS {
        want.push((ctx.state_dir.join(kind.file_name()), node_server.clone()));
    }
    for h in cfg.controllers() {
        let dir = ctx.state_dir.join("kubeconfigs").join(&h.name);
        let local = format!("https://{}:6443", h.node_address());
        want.push((dir.join("kubelet.conf"), node_server.clone()));
        want.push((dir.join("scheduler.conf"), local.clone()));
        want.push((dir.join("controller-manager.conf"), local));
    }
    want.into_iter()
        .filter(|(p, server)| {
            p.exists()
                && match kiln_pki::read_kubeconfig(p) {
                    Ok(k) => k.server().map(|s| s != server).unwrap_or(true),
                    Err(_) => true,
                }
        })
        .map(|(p, _)| p)
        .collect()
}

pub(crate) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

/// One step of a restore onto new hosts, as it finishes: (name, started, result).
pub type StepReport<'a> = dyn FnMut(&str, Instant, &Result<(), String>) + 'a;

/// Bootstrap the hosts of `ctx` with the bundle's identity and restore the bundle onto them; the state
/// directory must be seeded (`seed_state`). Steps: init, restore (stop, restore every member, start,
/// verify), nodes (Nodes of gone hosts deleted, control-plane marks and kiln-config again, every node
/// Ready). Shared by `kiln snapshot restore` and `kiln drill`.
pub async fn rebuild(
    ctx: &Context,
    bundle: &Bundle,
    step: &mut StepReport<'_>,
) -> Result<BundleInfo, SnapshotError> {
    let t = Instant::now();
    let init = async {
        let pb = Playbook::load("init", None)?;
        bootstrap::run(ctx, &pb).await
    }
    .await
    .map_err(SnapshotError::from);
    step(
        "init",
        t,
        &init.as_ref().map(|_| ()).map_err(|e| e.to_string()),
    );
    init?;
    let t = Instant::now();
    let restored = super::restore::restore_bundle(ctx, bundle).await;
    step(
        "restore",
        t,
        &restored.as_ref().map(|_| ()).map_err(|e| e.to_string()),
    );
    let info = restored?;
    let t = Instant::now();
    let nodes = settle_nodes(ctx).await;
    step(
        "nodes",
        t,
        &nodes.as_ref().map(|_| ()).map_err(|e| e.to_string()),
    );
    nodes?;
    Ok(info)
}

/// After the data of the old hosts is back: delete the Nodes of hosts that cluster.yaml no longer has
/// (and the pods bound to them, so their controllers make them again on live nodes), then mark the
/// control plane and upload cluster.yaml again, and wait for every node.
async fn settle_nodes(ctx: &Context) -> Result<(), SnapshotError> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{DeleteParams, ListParams};
    let client = crate::bootstrap::phases::wait::admin_client(ctx).await?;
    let api_err = |e: kube::Error| SnapshotError::Store {
        endpoint: "apiserver".into(),
        message: e.to_string(),
    };
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let pods: kube::Api<Pod> = kube::Api::all(client.clone());
    for n in nodes.list(&ListParams::default()).await.map_err(api_err)? {
        let name = n.metadata.name.unwrap_or_default();
        if ctx.cluster.config.host(&name).is_some() {
            continue;
        }
        let bound = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await
            .map_err(api_err)?;
        let mut deleted = 0;
        for p in bound {
            let (ns, pod) = (
                p.metadata.namespace.unwrap_or_default(),
                p.metadata.name.unwrap_or_default(),
            );
            let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &ns);
            match api
                .delete(&pod, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(api_err(e)),
            }
        }
        match nodes.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(api_err(e)),
        }
        ctx.say(&format!(
            "node {name} is not in cluster.yaml: deleted, with the {deleted} pod(s) bound to it"
        ));
    }
    let init = Playbook::load("init", None)?;
    let pick = |name: &str| {
        init.phases
            .iter()
            .filter(|p| p.name == name && p.hosts != bootstrap::Selector::Workers)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut settle = init.clone();
    settle.name = "restore-nodes".into();
    settle.phases = ["wait-node-ready", "upload-config", "mark-control-plane"]
        .iter()
        .flat_map(|n| pick(n))
        .collect();
    bootstrap::run(ctx, &settle).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> ClusterConfig {
        crate::config::parse(
            &format!(
                "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: prod\nspec:\n  hosts:\n  \
                 - name: cp\n    address: 10.0.0.10\n    role: controller\n{extra}"
            ),
            "cluster.yaml",
        )
        .unwrap()
    }

    #[test]
    fn networks_the_data_depends_on_cannot_change() {
        let old = cfg("");
        assert!(check_compatible(&old, &cfg("")).is_ok());
        let e = check_compatible(
            &old,
            &cfg("  networking:\n    serviceCIDR: 10.100.0.0/16\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("serviceCIDR 10.100.0.0/16 differs"), "{e}");
        let e = check_compatible(&old, &cfg("  networking:\n    podCIDR: 10.32.0.0/16\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("podCIDR"), "{e}");
        let mut other = cfg("");
        other.metadata.name = "staging".into();
        let e = check_compatible(&old, &other).unwrap_err().to_string();
        assert!(e.contains("\"prod\"") && e.contains("\"staging\""), "{e}");
    }

    #[test]
    fn a_state_ca_is_found_where_its_key_is() {
        let d = tempfile::tempdir().unwrap();
        assert!(state_ca(d.path()).is_none());
        std::fs::create_dir_all(d.path().join("pki/a")).unwrap();
        std::fs::create_dir_all(d.path().join("pki/b")).unwrap();
        std::fs::write(d.path().join("pki/a/ca.crt"), "A").unwrap();
        std::fs::write(d.path().join("pki/b/ca.crt"), "B\n").unwrap();
        std::fs::write(d.path().join("pki/b/ca.key"), "k").unwrap();
        let (dir, pem) = state_ca(d.path()).unwrap();
        assert_eq!(dir, d.path().join("pki/b"));
        assert!(same_pem(&pem, "B"));
    }

    #[test]
    fn seeding_keeps_the_identity_and_drops_what_names_the_old_hosts() {
        use sha2::{Digest, Sha256};
        let d = tempfile::tempdir().unwrap();
        let old = d.path().join("old.kiln");
        let mut params = kiln_pki::TreeParams::new("host1");
        params.host_addresses = vec!["10.0.0.10".into()];
        params.control_plane_endpoint = Some("10.0.0.10:6443".into());
        kiln_pki::ensure_tree(&old.join("pki/host1"), &params).unwrap();
        std::fs::create_dir_all(old.join("store-members")).unwrap();
        std::fs::write(old.join("store-members/host1.json"), "{}").unwrap();
        std::fs::write(old.join("admin.conf"), "not a kubeconfig").unwrap();
        let cy = d.path().join("old.yaml");
        std::fs::write(&cy, "kind: Cluster\n").unwrap();
        let info = BundleInfo::new(
            "prod",
            "host1",
            1,
            0,
            &hex::encode(Sha256::digest(b"snapshot")),
        );
        let tar = d.path().join("b.tar");
        let contents = super::super::bundle::Contents {
            snapshot: b"snapshot",
            cluster_yaml: &cy,
            state: super::super::bundle::state_files(&old),
        };
        super::super::bundle::write(&info, &contents, None, &tar).unwrap();
        let b = Bundle::open(&tar, None).unwrap();

        let dir = d.path().join("new");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("cluster.yaml"),
            "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: prod\nspec:\n  hosts:\n  \
             - name: cp2\n    address: 10.0.0.20\n    role: controller\n  \
             - name: w2\n    address: 10.0.0.21\n    role: worker\n",
        )
        .unwrap();
        let cluster = crate::config::load(&dir.join("cluster.yaml")).unwrap();
        let ctx = Context::new(cluster, crate::bootstrap::Options::default()).unwrap();
        let said = seed_state(&ctx, &b).unwrap().join("\n");
        let state = &ctx.state_dir;
        assert!(said.contains("seeded from the bundle"), "{said}");
        assert!(
            said.contains("certificates re-issued for cp2 with its new SANs (10.0.0.20): apiserver, store-server, store-peer"),
            "{said}"
        );
        assert_eq!(
            std::fs::read(state.join("pki/cp2/ca.key")).unwrap(),
            std::fs::read(old.join("pki/host1/ca.key")).unwrap()
        );
        assert!(state.join("pki/cp2/store/ca.key").exists());
        assert!(state.join("pki/cp2/apiserver-kubelet-client.crt").exists());
        assert!(!state.join("pki/cp2/apiserver.crt").exists());
        assert!(!state.join("pki/host1").exists());
        assert!(!state.join("store-members").exists());
        assert!(!state.join("admin.conf").exists());

        // Again (a re-run): the state already has the bundle's CA and nothing names the old hosts.
        let again = seed_state(&ctx, &b).unwrap();
        assert_eq!(again.len(), 1, "{again:?}");
        assert!(again[0].contains("already holds the bundle's CA"));

        // Another cluster's CA in the state directory is refused.
        let mut other = kiln_pki::TreeParams::new("cp2");
        other.host_addresses = vec!["10.0.0.20".into()];
        std::fs::remove_dir_all(state.join("pki")).unwrap();
        kiln_pki::ensure_tree(&state.join("pki/cp2"), &other).unwrap();
        let e = seed_state(&ctx, &b).unwrap_err().to_string();
        assert!(e.contains("is not the bundle's"), "{e}");
    }
}
