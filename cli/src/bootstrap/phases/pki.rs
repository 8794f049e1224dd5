//! Phases certs and kubeconfigs: the cluster PKI and kubeconfigs, in the local state directory.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::Outcome;
use crate::bootstrap::{BootstrapError, Context};

fn service_ip(ctx: &Context) -> IpAddr {
    ctx.cluster.config.spec.networking.kubernetes_service_ip()
}

pub(super) fn pki_err(e: impl std::fmt::Display) -> BootstrapError {
    BootstrapError::Pki(e.to_string())
}

pub(super) fn validity(ctx: &Context) -> kiln_pki::Validity {
    let p = &ctx.cluster.config.spec.pki;
    kiln_pki::Validity::from_days(Some(p.ca_validity_days), Some(p.cert_validity_days))
}

/// The CA and every certificate of each controller, in the local state directory (0700).
/// A dry run's certs/kubeconfigs: which of `files` (relative to the state directory) would be made.
fn plan_missing(ctx: &Context, files: Vec<PathBuf>) -> Outcome {
    let missing: Vec<String> = files
        .iter()
        .filter(|p| !ctx.state_dir.join(p).exists())
        .map(|p| p.display().to_string())
        .collect();
    if let Some(plan) = &ctx.plan {
        for m in &missing {
            plan.add(
                "local",
                format!("create {}", ctx.state_dir.join(m).display()),
            );
        }
    }
    if missing.is_empty() {
        Outcome::Skipped("all exist".into())
    } else {
        Outcome::Done(format!("would create {} file(s)", missing.len()))
    }
}

pub(super) fn certs(ctx: &Context) -> Result<Outcome, BootstrapError> {
    if ctx.plan.is_some() {
        let mut files = vec![];
        for h in ctx.cluster.config.controllers() {
            for spec in kiln_pki::CERT_TREE {
                files.push(PathBuf::from("pki").join(&h.name).join(spec.cert_file()));
            }
        }
        return Ok(plan_missing(ctx, files));
    }
    let first = ctx.first_controller().name.clone();
    let mut created = vec![];
    for h in ctx.cluster.config.controllers() {
        let dir = ctx.pki_dir(&h.name);
        std::fs::create_dir_all(&dir).map_err(|source| BootstrapError::Io {
            what: "creating",
            path: dir.clone(),
            source,
        })?;
        set_private(&ctx.state_dir)?;
        if h.name != first {
            // One cluster CA: every controller's tree is issued from the first controller's.
            copy_cas(&ctx.pki_dir(&first), &dir)?;
        }
        let mut params = kiln_pki::TreeParams::new(&h.name);
        params.host_addresses = vec![h.address.clone(), h.node_address()];
        params.control_plane_endpoint = Some(ctx.cluster.config.control_plane_endpoint());
        params.service_ip = service_ip(ctx);
        params.validity = validity(ctx);
        let r = kiln_pki::ensure_tree(&dir, &params).map_err(pki_err)?;
        created.extend(r.created.iter().map(|c| format!("{}/{c}", h.name)));
    }
    // The Secrets' encryption key lives with the PKI (spec.apiServer.encryption).
    created.extend(super::apiserver_config::ensure_encryption(ctx)?);
    Ok(if created.is_empty() {
        Outcome::Skipped("all certificates exist".into())
    } else {
        Outcome::Done(format!("created {}", created.join(", ")))
    })
}

/// The state directory holds the CA key: only its owner may enter it.
fn set_private(dir: &Path) -> Result<(), BootstrapError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|source| {
        BootstrapError::Io {
            what: "securing",
            path: dir.to_path_buf(),
            source,
        }
    })
}

fn copy_cas(from: &Path, to: &Path) -> Result<(), BootstrapError> {
    for f in [
        "ca.crt",
        "ca.key",
        "store/ca.crt",
        "store/ca.key",
        "front-proxy-ca.crt",
        "front-proxy-ca.key",
        "sa.key",
        "sa.pub",
    ] {
        let (src, dst) = (from.join(f), to.join(f));
        if dst.exists() || !src.exists() {
            continue;
        }
        let data = std::fs::read(&src).map_err(|source| BootstrapError::Io {
            what: "reading",
            path: src.clone(),
            source,
        })?;
        let mode = if f.ends_with(".key") { 0o600 } else { 0o644 };
        if let Some(p) = dst.parent() {
            std::fs::create_dir_all(p).map_err(|source| BootstrapError::Io {
                what: "creating",
                path: p.to_path_buf(),
                source,
            })?;
        }
        kiln_pki::files::write_atomic(&dst, &data, mode).map_err(pki_err)?;
    }
    Ok(())
}

pub(super) fn kubeconfig_dir(ctx: &Context, node: &str) -> PathBuf {
    ctx.state_dir.join("kubeconfigs").join(node)
}

/// admin.conf for the operator, and a kubelet.conf (client cert CN=system:node:<host>) for every controller, issued
/// by the cluster CA that only the operator's state directory holds.
pub(super) fn kubeconfigs(ctx: &Context) -> Result<Outcome, BootstrapError> {
    if ctx.plan.is_some() {
        let mut files = vec![PathBuf::from("admin.conf")];
        files.extend(
            super::NODE_KUBECONFIGS
                .iter()
                .map(|k| PathBuf::from(k.file_name())),
        );
        for h in ctx.cluster.config.controllers() {
            for f in ["kubelet.conf", "scheduler.conf", "controller-manager.conf"] {
                files.push(PathBuf::from("kubeconfigs").join(&h.name).join(f));
            }
        }
        return Ok(plan_missing(ctx, files));
    }
    let first = ctx.first_controller().name.clone();
    let ca_spec = kiln_pki::spec("ca").expect("ca is in the tree");
    let ca = kiln_pki::load_ca(&ctx.pki_dir(&first), ca_spec).map_err(pki_err)?;
    let server = format!("https://{}", ctx.cluster.config.control_plane_endpoint());
    let name = &ctx.cluster.config.metadata.name;
    let v = validity(ctx);
    let mut made = vec![];
    // Node components (kubelets, kiln-proxy) reach the API through the node-local load balancer when
    // there are several control planes; the operator through controlPlaneEndpoint.
    let node_server = super::push::node_api_server(ctx);
    let kinds = std::iter::once((&kiln_pki::KubeconfigKind::Admin, &server))
        .chain(super::NODE_KUBECONFIGS.iter().map(|k| (k, &node_server)));
    for (kind, server) in kinds {
        if kiln_pki::ensure_kubeconfig(&ctx.state_dir, &ca, kind, name, server, &v)
            .map_err(pki_err)?
        {
            made.push(kind.file_name().to_string());
        }
    }
    for kind in super::NODE_KUBECONFIGS {
        let file = kind.file_name();
        if point_at(&ctx.state_dir.join(file), &node_server)? {
            made.push(format!("{file} (server {node_server})"));
        }
    }
    for h in &ctx.cluster.config.spec.hosts {
        let dir = kubeconfig_dir(ctx, &h.name);
        std::fs::create_dir_all(&dir).map_err(|source| BootstrapError::Io {
            what: "creating",
            path: dir.clone(),
            source,
        })?;
        // Workers get no kubelet.conf from here: their kubelets make a key and ask the cluster for a
        // certificate (TLS bootstrap). Control-plane kubelets need one before the API server exists.
        if h.is_controller() {
            let kind = kiln_pki::KubeconfigKind::Kubelet {
                node_name: h.name.clone(),
            };
            if kiln_pki::ensure_kubeconfig(&dir, &ca, &kind, name, &node_server, &v)
                .map_err(pki_err)?
            {
                made.push(format!("{}/kubelet.conf", h.name));
            } else if point_at(&dir.join("kubelet.conf"), &node_server)? {
                // A second controller was added: node components now go through the balancer.
                made.push(format!("{}/kubelet.conf (server {node_server})", h.name));
            }
            // The scheduler and controller-manager talk to their own host's API server (as kubeadm's
            // do), so losing another controller never takes them down with it.
            let local = format!("https://{}:6443", h.node_address());
            for kind in [
                kiln_pki::KubeconfigKind::Scheduler,
                kiln_pki::KubeconfigKind::ControllerManager,
            ] {
                if kiln_pki::ensure_kubeconfig(&dir, &ca, &kind, name, &local, &v)
                    .map_err(pki_err)?
                {
                    made.push(format!("{}/{}", h.name, kind.file_name()));
                }
            }
        }
    }
    Ok(if made.is_empty() {
        Outcome::Skipped("all kubeconfigs exist".into())
    } else {
        Outcome::Done(format!("created {}", made.join(", ")))
    })
}

/// Make the kubeconfig at `path` name `server` (the credentials stay); true when it changed.
fn point_at(path: &Path, server: &str) -> Result<bool, BootstrapError> {
    let mut kc = kiln_pki::read_kubeconfig(path).map_err(pki_err)?;
    if kc.clusters.iter().all(|c| c.cluster.server == server) {
        return Ok(false);
    }
    for c in &mut kc.clusters {
        c.cluster.server = server.to_string();
    }
    let yaml = kc.to_yaml().map_err(pki_err)?;
    kiln_pki::files::write_atomic(path, yaml.as_bytes(), 0o600).map_err(pki_err)?;
    Ok(true)
}
