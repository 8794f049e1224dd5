//! `kiln certs renew`: re-sign leaves with the CA that issued them (CA files untouched), atomically in
//! the operator's state directory; push them to the hosts that use them (only files that differ, through
//! the bootstrapper's install path); re-render the static pod manifests, whose `kiln.dev/pki-hash`
//! annotation now differs where a pod's certificates did, so the kubelet restarts exactly those pods; and
//! wait for each restarted pod's mirror pod to carry the new hash and be Ready. Hosts go one at a time, so
//! an HA control plane keeps its store quorum and an API server throughout.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::catalog::{Kind, Renewable};
use super::CertsError;
use crate::bootstrap::host_files::{install_files, staged, Install};
use crate::bootstrap::phases::push::{control_plane_context, proxy_context};
use crate::bootstrap::phases::{CONTROL_PLANE_MANIFESTS, KILN_ETC, MANIFESTS};
use crate::bootstrap::pki_hash::{pod_hash, PKI_HASH_ANNOTATION};
use crate::bootstrap::Context;
use crate::config::Host;

/// One certificate file (or kubeconfig) to renew: where it is locally, and which CA's tree signs it.
struct Job {
    /// `host/name` as check-expiration prints it.
    label: String,
    local: PathBuf,
    /// The pki directory whose CA signs it.
    ca_dir: PathBuf,
    ca: &'static kiln_pki::CertSpec,
    leaf: Option<&'static kiln_pki::CertSpec>,
}

fn validity(ctx: &Context) -> kiln_pki::Validity {
    let p = &ctx.cluster.config.spec.pki;
    kiln_pki::Validity::from_days(Some(p.ca_validity_days), Some(p.cert_validity_days))
}

fn cluster_ca() -> &'static kiln_pki::CertSpec {
    kiln_pki::spec("ca").expect("ca is in the tree")
}

/// Controllers with a PKI tree in the state directory; one listed in cluster.yaml but not joined yet has
/// none and gets its certificates when it joins.
fn issued_controllers(ctx: &Context) -> Vec<&Host> {
    ctx.cluster
        .config
        .controllers()
        .filter(|h| ctx.pki_dir(&h.name).exists())
        .collect()
}

fn jobs(ctx: &Context, targets: &[Renewable]) -> Vec<Job> {
    let first = ctx.first_controller().name.clone();
    let controllers = issued_controllers(ctx);
    let mut out = vec![];
    for t in targets {
        match t.kind {
            Kind::Leaf(spec) => {
                let ca = kiln_pki::spec(spec.ca.expect("leaves have an issuer"))
                    .expect("issuers are in the tree");
                for h in &controllers {
                    let dir = ctx.pki_dir(&h.name);
                    out.push(Job {
                        label: format!("{}/{}", h.name, t.name),
                        local: dir.join(spec.cert_file()),
                        ca_dir: dir,
                        ca,
                        leaf: Some(spec),
                    });
                }
            }
            Kind::ControllerKubeconfig(file) => {
                for h in &controllers {
                    out.push(Job {
                        label: format!("{}/{file}", h.name),
                        local: ctx.state_dir.join("kubeconfigs").join(&h.name).join(file),
                        ca_dir: ctx.pki_dir(&h.name),
                        ca: cluster_ca(),
                        leaf: None,
                    });
                }
            }
            Kind::ClusterKubeconfig { file, .. } => out.push(Job {
                label: format!("all/{file}"),
                local: ctx.state_dir.join(file),
                ca_dir: ctx.pki_dir(&first),
                ca: cluster_ca(),
                leaf: None,
            }),
        }
    }
    out
}

/// The files on `host` that hold what `targets` renews.
fn installs(ctx: &Context, host: &Host, targets: &[Renewable]) -> Vec<Install> {
    let mut out = vec![];
    for t in targets {
        match t.kind {
            Kind::Leaf(spec) if host.is_controller() => {
                let dir = ctx.pki_dir(&host.name);
                for (file, mode) in [(spec.cert_file(), 0o644), (spec.key_file(), 0o600)] {
                    out.push(Install {
                        local: dir.join(&file),
                        remote: format!("{KILN_ETC}/pki/{file}"),
                        mode,
                    });
                }
            }
            Kind::ControllerKubeconfig(file) if host.is_controller() => out.push(Install {
                local: ctx
                    .state_dir
                    .join("kubeconfigs")
                    .join(&host.name)
                    .join(file),
                remote: format!("{KILN_ETC}/{file}"),
                mode: 0o600,
            }),
            Kind::ClusterKubeconfig { file, all_hosts } if all_hosts || host.is_controller() => out
                .push(Install {
                    local: ctx.state_dir.join(file),
                    remote: format!("{KILN_ETC}/{file}"),
                    mode: 0o600,
                }),
            _ => {}
        }
    }
    out
}

/// Renew `targets`; with `ctx.opts.dry_run` only say what would be renewed and pushed where.
pub async fn renew(ctx: &Context, targets: &[Renewable]) -> Result<(), CertsError> {
    let issued = issued_controllers(ctx);
    if issued.is_empty() {
        return Err(CertsError::Missing {
            path: ctx.pki_dir(&ctx.first_controller().name),
        });
    }
    let jobs = jobs(ctx, targets);
    // Everything must be there before anything is rewritten: no half-renewed state directory.
    for j in &jobs {
        for p in [&j.local, &j.ca_dir.join(j.ca.cert_file())] {
            if !p.exists() {
                return Err(CertsError::Missing { path: p.clone() });
            }
        }
    }
    let hosts: Vec<&Host> = issued
        .into_iter()
        .chain(
            ctx.cluster
                .config
                .spec
                .hosts
                .iter()
                .filter(|h| !h.is_controller()),
        )
        .collect();
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    if ctx.opts.dry_run {
        for j in &jobs {
            println!(
                "would renew {} ({}) with the CA {}",
                j.label,
                j.local.display(),
                j.ca_dir.join(j.ca.cert_file()).display()
            );
        }
        for h in &hosts {
            let files: Vec<String> = installs(ctx, h, targets)
                .into_iter()
                .map(|i| i.remote)
                .collect();
            if !files.is_empty() {
                println!(
                    "would install on {}: {} (and restart the static pods that read them)",
                    h.name,
                    files.join(", ")
                );
            }
        }
        return Ok(());
    }
    let v = validity(ctx);
    for j in &jobs {
        let ca = kiln_pki::load_ca(&j.ca_dir, j.ca).map_err(|e| CertsError::Ca {
            path: j.ca_dir.join(j.ca.cert_file()),
            message: e.to_string(),
        })?;
        let renew_err = |source| CertsError::Renew {
            what: j.label.clone(),
            source,
        };
        let pair = match j.leaf {
            Some(spec) => kiln_pki::renew_cert(&j.ca_dir, spec, &ca, &v).map_err(renew_err)?,
            None => kiln_pki::renew_kubeconfig(&j.local, &ca, &v).map_err(renew_err)?,
        };
        let info = kiln_pki::parse_cert_pem(&pair.cert_pem, &j.label)
            .map_err(|e| CertsError::read(&j.local, e))?;
        println!(
            "renewed {:<40} valid until {}",
            j.label,
            info.not_after.format(&fmt).unwrap_or_default()
        );
    }
    for h in hosts {
        let files = installs(ctx, h, targets);
        if files.is_empty() {
            continue;
        }
        push_and_restart(ctx, h, &files).await?;
    }
    Ok(())
}

/// Install the renewed files on one host, re-render its static pod manifests and wait for the pods whose
/// manifests changed.
async fn push_and_restart(ctx: &Context, host: &Host, files: &[Install]) -> Result<(), CertsError> {
    let name = host.name.as_str();
    let t = ctx.transport(name).await?;
    let present = t.run(&format!("ls {MANIFESTS} 2>/dev/null; true")).await?;
    let present: Vec<&str> = present.lines().map(str::trim).collect();
    if present.is_empty() {
        println!("[{name:>8}] not part of the cluster yet (no {MANIFESTS}): nothing pushed");
        return Ok(());
    }
    let installed = install_files(ctx, name, files).await?;
    // The same renders as `kiln init`'s control-plane and proxy phases, so a later init converges.
    let cp = host
        .is_controller()
        .then(|| control_plane_context(ctx, name));
    let px = proxy_context(ctx, name);
    let mut manifests = vec![];
    for m in CONTROL_PLANE_MANIFESTS
        .iter()
        .chain(["kiln-proxy.yaml"].iter())
    {
        if !present.contains(m) {
            continue;
        }
        let c = match (&cp, *m) {
            (_, "kiln-proxy.yaml") => &px,
            (Some(cp), _) => cp,
            (None, _) => continue,
        };
        manifests.push(staged(ctx, name, m, c, format!("{MANIFESTS}/{m}"), 0o600)?);
    }
    let rewritten = install_files(ctx, name, &manifests).await?;
    let restarted: Vec<String> = rewritten
        .iter()
        .filter_map(|r| r.rsplit('/').next())
        .map(str::to_string)
        .collect();
    println!(
        "[{name:>8}] installed {} file(s){}",
        installed.len(),
        if restarted.is_empty() {
            String::new()
        } else {
            format!("; restarting {}", restarted.join(", "))
        }
    );
    for m in &restarted {
        wait_restarted(ctx, name, m).await?;
    }
    Ok(())
}

/// The mirror pod of `manifest` on `host` carries the manifest's new pki hash and is Ready.
async fn wait_restarted(ctx: &Context, host: &str, manifest: &str) -> Result<(), CertsError> {
    let pod = format!("{}-{host}", manifest.trim_end_matches(".yaml"));
    let want = pod_hash(&ctx.state_dir, host, manifest);
    let start = Instant::now();
    loop {
        let last = match mirror_state(ctx, &pod).await {
            Ok((hash, true)) if hash == want => {
                println!(
                    "[{host:>8}] {pod} Ready with the renewed certificates after {:.1}s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            Ok((hash, ready)) => format!("hash {hash:?} (want {want:?}), ready {ready}"),
            Err(e) => e,
        };
        if start.elapsed() > ctx.opts.wait_timeout {
            return Err(CertsError::Timeout {
                what: format!("{pod} to restart with its renewed certificates (last: {last})"),
                seconds: ctx.opts.wait_timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// (pki hash annotation, Ready) of a mirror pod in kube-system; errors while the API server restarts.
async fn mirror_state(ctx: &Context, pod: &str) -> Result<(String, bool), String> {
    let client = crate::bootstrap::phases::wait::admin_client(ctx)
        .await
        .map_err(|e| e.to_string())?;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "kube-system");
    let p = pods
        .get_opt(pod)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no mirror pod {pod} yet"))?;
    let hash = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PKI_HASH_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Ok((hash, ready))
}
