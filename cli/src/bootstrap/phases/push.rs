//! Phases push, control-plane, proxy, kubelet-start: files onto hosts, only where they changed (through
//! `bootstrap::host_files`).

use std::path::{Path, PathBuf};

use super::kubelet_config::KUBELET_CONFIG;
use super::pki::{kubeconfig_dir, pki_err};
use super::*;
use crate::bootstrap::host_files::{install_files, staged, Install};
use crate::bootstrap::render::render;
use crate::transport::Payload;

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Binaries, PKI and kubeconfigs onto a controller.
pub(super) async fn push(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let controller = ctx.host(host).is_controller();
    // Workers get only the node binaries, the cluster CA certificate and the node kubeconfigs; their kubelets
    // obtain their own certificates (TLS bootstrap, see kubelet-start).
    let binaries: &[&str] = if controller {
        CONTROL_PLANE_BINARIES
    } else {
        NODE_BINARIES
    };
    let mut files = vec![];
    for b in binaries {
        let local = ctx.bin_dir.join(b);
        if !local.exists() {
            return Err(BootstrapError::phase(
                "push",
                host,
                format!(
                    "{} not found (build it, or pass --bin-dir)",
                    local.display()
                ),
            ));
        }
        files.push(Install {
            local,
            remote: format!("{REMOTE_BIN}/{b}"),
            mode: 0o755,
        });
    }
    let first = ctx.first_controller().name.clone();
    if controller {
        let pki = ctx.pki_dir(host);
        let mut pki_files = vec![];
        walk(&pki, &mut pki_files);
        for p in pki_files {
            let rel = p
                .strip_prefix(&pki)
                .expect("under pki")
                .to_string_lossy()
                .into_owned();
            if rel == super::apiserver_config::ENCRYPTION_CONFIG {
                // A controller bundle's copy: the cluster's own (below) is the one installed.
                continue;
            }
            let mode = if rel.ends_with(".key") { 0o600 } else { 0o644 };
            files.push(Install {
                local: p,
                remote: format!("{KILN_ETC}/pki/{rel}"),
                mode,
            });
        }
        files.push(Install {
            local: ctx.admin_conf(),
            remote: format!("{KILN_ETC}/admin.conf"),
            mode: 0o600,
        });
        // Audit policy and encryption configuration, before the manifest that names them.
        files.extend(super::apiserver_config::installs(ctx, host)?);
    } else {
        files.push(Install {
            local: ctx.pki_dir(&first).join("ca.crt"),
            remote: format!("{KILN_ETC}/pki/ca.crt"),
            mode: 0o644,
        });
    }
    if controller {
        files.push(Install {
            local: kubeconfig_dir(ctx, host).join("kubelet.conf"),
            remote: format!("{KILN_ETC}/kubelet.conf"),
            mode: 0o600,
        });
        for conf in ["scheduler.conf", "controller-manager.conf"] {
            files.push(Install {
                local: kubeconfig_dir(ctx, host).join(conf),
                remote: format!("{KILN_ETC}/{conf}"),
                mode: 0o600,
            });
        }
    }
    files.extend(node_kubeconfigs(ctx));
    let changed = install_files(ctx, host, &files).await?;
    Ok(if changed.is_empty() {
        Outcome::Skipped(format!("{} files up to date", files.len()))
    } else {
        Outcome::Done(format!(
            "{} of {} files installed",
            changed.len(),
            files.len()
        ))
    })
}

/// The node components' kubeconfigs (kiln-proxy, kiln-dns), from the state directory to /etc/kiln.
pub(super) fn node_kubeconfigs(ctx: &Context) -> impl Iterator<Item = Install> + '_ {
    super::NODE_KUBECONFIGS.iter().map(|k| Install {
        local: ctx.state_dir.join(k.file_name()),
        remote: format!("{KILN_ETC}/{}", k.file_name()),
        mode: 0o600,
    })
}

pub(super) fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The store's cluster token (part of every member's ID, like etcd's --initial-cluster-token): kept in the
/// state directory, because a restore starts a new cluster with a new token and every later render of the
/// store manifest must carry that one.
pub fn store_token(ctx: &Context) -> String {
    std::fs::read_to_string(ctx.state_dir.join("store-token"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("kiln-{}", ctx.cluster.config.metadata.name))
}

pub fn set_store_token(ctx: &Context, token: &str) -> Result<(), BootstrapError> {
    // A new token is a new cluster (restore) whose members all start as founders.
    super::store_start::forget_all(ctx);
    kiln_pki::files::write_atomic(
        &ctx.state_dir.join("store-token"),
        format!("{token}\n").as_bytes(),
        0o600,
    )
    .map_err(pki_err)
}

/// One control-plane manifest for `host`, rendered.
pub fn render_control_plane(
    ctx: &Context,
    host: &str,
    manifest: &str,
) -> Result<String, BootstrapError> {
    render(manifest, &control_plane_context(ctx, host))
}

/// The kiln-store manifest: phase store-start (a phase of its own, so a cluster on an external etcd
/// skips it by the phase table, see `table::StoreUse`).
pub const STORE_MANIFEST: &str = "kiln-store.yaml";

/// Phase store-start: the store's static pod manifest, with the flags this member first started with.
pub(super) async fn store_start(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    super::store_start::ensure_recorded(ctx, host)?;
    let c = control_plane_context(ctx, host);
    install_manifest(ctx, host, STORE_MANIFEST, &c).await
}

/// Static pod manifests for the API server, scheduler and controller-manager (the store's is
/// store-start's).
pub(super) async fn control_plane(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let c = control_plane_context(ctx, host);
    let files = CONTROL_PLANE_MANIFESTS
        .iter()
        .filter(|m| **m != STORE_MANIFEST)
        .map(|m| staged(ctx, host, m, &c, format!("{MANIFESTS}/{m}"), 0o600))
        .collect::<Result<Vec<_>, _>>()?;
    let changed = install_files(ctx, host, &files).await?;
    Ok(if changed.is_empty() {
        Outcome::Skipped("manifests up to date".into())
    } else {
        Outcome::Done(format!("wrote {}", changed.join(", ")))
    })
}

pub(crate) fn control_plane_context(ctx: &Context, host: &str) -> tera::Context {
    let h = ctx.host(host);
    let ip = h.node_address();
    let cfg = &ctx.cluster.config;
    // How this member first started (founder, or joined later): see store_start.
    let start = super::store_start::for_host(ctx, host);
    let mut c = tera::Context::new();
    c.insert("version", version());
    c.insert("node_name", &h.name);
    c.insert("node_ip", &ip);
    c.insert("initial_cluster", &start.initial_cluster);
    c.insert("initial_cluster_state", &start.state);
    c.insert(
        "quota_backend_bytes",
        &cfg.spec.store.quota_backend_bytes.unwrap_or(0),
    );
    c.insert("keep_awake", &cfg.spec.store.keep_awake.unwrap_or(true));
    c.insert(
        "service_cidr",
        &cfg.spec.networking.service_cidr.to_string(),
    );
    let net = &cfg.spec.networking;
    let cm = &cfg.spec.controller_manager;
    c.insert("pod_cidr", &net.pod_cidr.to_string());
    c.insert("node_cidr_mask_size", &net.node_cidr_mask_size);
    c.insert("node_monitor_grace_period", &cm.node_monitor_grace_period);
    c.insert("pod_eviction_timeout", &cm.pod_eviction_timeout);
    c.insert("cluster_token", &store_token(ctx));
    super::apiserver_config::insert_context(ctx, host, &mut c);
    // --etcd-servers and its TLS files: the host's kiln-store member, or spec.store.external.
    super::external_etcd::insert_apiserver_context(ctx, &mut c);
    // A hash of the certificates each pod reads: renewed certificates change the manifest, so the
    // kubelet restarts the pod (`kiln certs renew`).
    crate::bootstrap::pki_hash::insert_pod_hashes(&mut c, &ctx.state_dir, host);
    // And of the binaries they run: a new binary restarts its pod (see binary_hash).
    super::binary_hash::insert_binary_hashes(ctx, &mut c);
    c
}

/// The kiln-proxy static pod, on every node.
pub(super) async fn proxy(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    install_manifest(ctx, host, "kiln-proxy.yaml", &proxy_context(ctx, host)).await
}

pub(crate) fn proxy_context(ctx: &Context, host: &str) -> tera::Context {
    let h = ctx.host(host);
    let mut c = tera::Context::new();
    c.insert("version", version());
    c.insert("node_name", &h.name);
    c.insert("node_ip", &h.node_address());
    c.insert(
        "pod_cidr",
        &ctx.cluster.config.spec.networking.pod_cidr.to_string(),
    );
    crate::bootstrap::pki_hash::insert_pod_hashes(&mut c, &ctx.state_dir, host);
    super::binary_hash::insert_binary_hashes(ctx, &mut c);
    c
}

/// Render one manifest and install it into /etc/kiln/manifests if it changed.
pub(super) async fn install_manifest(
    ctx: &Context,
    host: &str,
    template: &str,
    c: &tera::Context,
) -> Result<Outcome, BootstrapError> {
    let remote = format!("{MANIFESTS}/{template}");
    let file = staged(ctx, host, template, c, remote.clone(), 0o600)?;
    let changed = install_files(ctx, host, &[file]).await?;
    Ok(if changed.is_empty() {
        Outcome::Skipped(format!("{remote} up to date"))
    } else {
        Outcome::Done(format!("wrote {remote}"))
    })
}

/// The node's pod CIDR: the i-th (1-based, in cluster.yaml order) subnet of podCIDR with
/// nodeCIDRMaskSize, so host1 of the lab gets 10.244.1.0/24. Stable across re-runs and reorderings of
/// phases; a host keeps its CIDR as long as its position in the file does.
pub fn node_pod_cidr(ctx: &Context, host: &str) -> Result<String, BootstrapError> {
    let net = &ctx.cluster.config.spec.networking;
    let index = ctx
        .cluster
        .config
        .spec
        .hosts
        .iter()
        .position(|h| h.name == host)
        .expect("selected hosts come from the config") as u32
        + 1;
    let (std::net::IpAddr::V4(base), mask) = (net.pod_cidr.addr, net.node_cidr_mask_size) else {
        return Err(BootstrapError::phase(
            "kubelet-start",
            host,
            "only IPv4 pod CIDRs are supported",
        ));
    };
    let bits = u32::from(mask).saturating_sub(u32::from(net.pod_cidr.prefix));
    if bits >= 32 || index >= (1u32 << bits) {
        return Err(BootstrapError::phase(
            "kubelet-start",
            host,
            format!(
                "podCIDR {} has no room for node #{index} with nodeCIDRMaskSize {mask}",
                net.pod_cidr
            ),
        ));
    }
    let addr = std::net::Ipv4Addr::from(u32::from(base) + (index << (32 - u32::from(mask))));
    Ok(format!("{addr}/{mask}"))
}

/// Where the node-local API server load balancer listens (in the kubelet) with several controllers.
pub const NODE_LB: &str = "127.0.0.1:6444";

/// The controllers whose API servers nodes use: those of the running control plane (recorded store
/// members, see store_start) and those this run joins. A controller only listed in cluster.yaml does not
/// count yet, so a worker join does not reconfigure every node for API servers that do not exist.
/// Nothing recorded (a first init): every controller of the file.
pub fn api_controllers(ctx: &Context) -> Vec<&crate::config::Host> {
    let all: Vec<&crate::config::Host> = ctx.cluster.config.controllers().collect();
    let running: Vec<&crate::config::Host> = all
        .iter()
        .copied()
        .filter(|c| {
            super::store_start::load(ctx, &c.name).is_some()
                || ctx.opts.joining_controllers.contains(&c.name)
        })
        .collect();
    if running.is_empty() {
        all
    } else {
        running
    }
}

/// Several control planes: node components go through the node-local load balancer.
pub fn highly_available(ctx: &Context) -> bool {
    api_controllers(ctx).len() > 1
}

/// The API server URL of node components' kubeconfigs (kubelet, kiln-proxy).
pub fn node_api_server(ctx: &Context) -> String {
    if highly_available(ctx) {
        format!("https://{NODE_LB}")
    } else {
        format!("https://{}", ctx.cluster.config.control_plane_endpoint())
    }
}

pub(crate) fn kubelet_command(ctx: &Context, host: &str) -> Result<String, BootstrapError> {
    let h = ctx.host(host);
    let mut extra = if h.is_controller() {
        String::new()
    } else {
        format!(" --bootstrap-kubeconfig={BOOTSTRAP_KUBECONFIG}")
    };
    if highly_available(ctx) {
        let backends: Vec<String> = api_controllers(ctx)
            .iter()
            .map(|c| format!("{}:6443", c.node_address()))
            .collect();
        extra.push_str(&format!(
            " --apiserver-lb-listen={NODE_LB} --apiserver-lb-backend={}",
            backends.join(",")
        ));
    }
    // The settings every node shares are in the KubeletConfiguration file (kubelet_config), as
    // kubeadm's config.yaml; the command line keeps what is the node's own.
    Ok(format!(
        "{REMOTE_BIN}/kiln-kubelet --config={KUBELET_CONFIG} \
         --kubeconfig={KILN_ETC}/kubelet.conf{extra} \
         --root-dir=/var/lib/kiln/kubelet --hostname-override={} --node-ip={} \
         --pod-cidr={} --pod-infra-container-image={} {}",
        h.name,
        h.node_address(),
        node_pod_cidr(ctx, host)?,
        ctx.cluster.config.spec.images.pause,
        ctx.cluster.config.spec.storage.local_path.kubelet_flag(),
    ))
}

/// systemd-resolved's list of the real upstream resolvers (its /etc/resolv.conf names only its
/// loopback stub, 127.0.0.53, which a pod's network namespace cannot reach).
pub const SYSTEMD_RESOLVED_CONF: &str = "/run/systemd/resolve/resolv.conf";

/// The kubelet's `--resolv-conf` where systemd-resolved runs, as kubeadm sets it: `dnsPolicy: Default`
/// pods (and the host's search path of ClusterFirst ones) then get the real resolvers. kiln-dns itself
/// runs on the host network and keeps the host's /etc/resolv.conf.
pub fn resolv_conf_flag(systemd_resolved: bool) -> String {
    if systemd_resolved {
        format!(" --resolv-conf={SYSTEMD_RESOLVED_CONF}")
    } else {
        String::new()
    }
}

/// A joining worker without credentials gets `bootstrap-kubelet.conf`: the cluster CA (the API server
/// is verified from the first connection) and this run's bootstrap token. Returns whether it was written.
async fn write_bootstrap_kubeconfig(ctx: &Context, host: &str) -> Result<bool, BootstrapError> {
    let t = ctx.transport(host).await?;
    let has_credentials = t
        .probe(&format!("test -s {KILN_ETC}/kubelet.conf"), None)
        .await?
        .success();
    if has_credentials {
        return Ok(false);
    }
    let token = ctx.bootstrap_token().await?;
    let first = ctx.first_controller().name.clone();
    let ca_path = ctx.pki_dir(&first).join("ca.crt");
    let ca_pem = kiln_pki::files::read_string(&ca_path).map_err(pki_err)?;
    let server = node_api_server(ctx);
    let kc = kiln_pki::Kubeconfig::new(
        &ctx.cluster.config.metadata.name,
        &server,
        &ca_pem,
        "tls-bootstrap-token-user",
        kiln_pki::kubeconfig::User {
            token: Some(token.to_string()),
            ..Default::default()
        },
    );
    let yaml = kc.to_yaml().map_err(pki_err)?;
    t.upload(Payload::Bytes(yaml.as_bytes()), BOOTSTRAP_KUBECONFIG, 0o600)
        .await?;
    Ok(true)
}

/// What runs the kubelet on a host: systemd's unit, or kiln's supervisor script where no systemd runs.
pub(crate) struct KubeletLauncher {
    pub systemd: bool,
    /// The template context both are rendered from.
    pub context: tera::Context,
}

impl KubeletLauncher {
    /// The unit or the supervisor script, rendered: the file that carries the kubelet's command and
    /// its binary's sha256.
    pub fn file(&self, ctx: &Context, host: &str) -> Result<Install, BootstrapError> {
        if self.systemd {
            staged(
                ctx,
                host,
                "kiln-kubelet.service",
                &self.context,
                UNIT,
                0o644,
            )
        } else {
            staged(
                ctx,
                host,
                "kubelet-supervisor.sh",
                &self.context,
                SUPERVISOR,
                0o755,
            )
        }
    }
}

/// How `host` runs its kubelet and with which command (it asks the host whether systemd and
/// systemd-resolved run there).
pub(crate) async fn kubelet_launcher(
    ctx: &Context,
    host: &str,
) -> Result<KubeletLauncher, BootstrapError> {
    let t = ctx.transport(host).await?;
    let mut c = tera::Context::new();
    let resolved = t
        .probe(&format!("test -f {SYSTEMD_RESOLVED_CONF}"), None)
        .await?
        .success();
    let command = kubelet_command(ctx, host)? + &resolv_conf_flag(resolved);
    c.insert("kubelet_command", &command);
    // A new kubelet binary changes the unit or script, so it is restarted (see binary_hash).
    super::binary_hash::insert_binary_hashes(ctx, &mut c);
    // So does a changed KubeletConfiguration file.
    c.insert(
        "kubelet_config_sha256",
        &super::kubelet_config::config_sha256(ctx),
    );
    let systemd = t
        .probe("test -d /run/systemd/system", None)
        .await?
        .success();
    Ok(KubeletLauncher {
        systemd,
        context: c,
    })
}

/// Start the kubelet: a systemd unit where systemd runs, else kiln's supervisor script (lab hosts).
pub(super) async fn kubelet_start(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let t = ctx.transport(host).await?;
    let launcher = kubelet_launcher(ctx, host).await?;
    let (systemd, c) = (launcher.systemd, &launcher.context);
    let bootstrapping =
        !ctx.host(host).is_controller() && write_bootstrap_kubeconfig(ctx, host).await?;
    t.run("mkdir -p /run/kiln /var/log/kiln /var/lib/kiln/kubelet && sysctl -qw net.ipv4.ip_forward=1").await?;
    // Before the unit or script that restarts the kubelet: it reads the file at start.
    install_files(ctx, host, &[super::kubelet_config::stage(ctx, host)?]).await?;
    if systemd {
        let unit = launcher.file(ctx, host)?;
        let changed = install_files(ctx, host, &[unit]).await?;
        let verb = if changed.is_empty() {
            "start"
        } else {
            "restart"
        };
        t.run(&format!("systemctl daemon-reload && systemctl enable kiln-kubelet && systemctl {verb} kiln-kubelet")).await?;
        let how = if bootstrapping { ", TLS bootstrap" } else { "" };
        return Ok(Outcome::Done(format!(
            "systemd unit kiln-kubelet ({verb}{how})"
        )));
    }
    let mut files = vec![launcher.file(ctx, host)?];
    // Start again at boot (what systemd's unit does elsewhere): /etc/kiln/boot.sh from /etc/rc.local,
    // unless the host has an rc.local of its own, which kiln does not overwrite.
    files.push(staged(ctx, host, "boot.sh", c, BOOT_SCRIPT, 0o755)?);
    let foreign_rc = t
        .probe(
            "[ -e /etc/rc.local ] && ! grep -q '^# managed by kiln' /etc/rc.local",
            None,
        )
        .await?
        .success();
    if foreign_rc {
        tracing::warn!(
            host,
            "/etc/rc.local is not kiln's: add /etc/kiln/boot.sh to it to restart kiln at boot"
        );
    } else {
        files.push(staged(ctx, host, "rc.local", c, "/etc/rc.local", 0o755)?);
    }
    // Only the supervisor script itself decides whether the running supervisor must restart.
    let changed: Vec<String> = install_files(ctx, host, &files)
        .await?
        .into_iter()
        .filter(|f| f == SUPERVISOR)
        .collect();
    let running = t
        .probe(
            &format!("kill -0 \"$(cat {SUPERVISOR_PID} 2>/dev/null)\" 2>/dev/null"),
            None,
        )
        .await?
        .success();
    if running && changed.is_empty() {
        // A running kubelet re-reads bootstrap-kubelet.conf on its next attempt.
        return Ok(if bootstrapping {
            Outcome::Done("bootstrap token written; supervisor already running".into())
        } else {
            Outcome::Skipped("supervisor already running".into())
        });
    }
    if running {
        crate::bootstrap::reset::stop_supervisor(&*t).await?;
    }
    // setsid + closed stdio: the supervisor outlives this SSH session.
    t.run(&format!(
        "setsid /bin/sh {SUPERVISOR} </dev/null >/dev/null 2>&1 &"
    ))
    .await?;
    Ok(Outcome::Done(
        "kubelet supervisor started (no systemd on this host)".into(),
    ))
}
