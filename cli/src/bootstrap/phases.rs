//! The phases of `init`, each a function over the context and (for host phases) one host. Each looks at
//! the current state first and skips what is already done.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::transport::{shell_quote, Payload};

use super::render::render;
use super::{BootstrapError, Context};

/// Every phase name a playbook may use.
pub const PHASES: &[&str] = &[
    "preflight",
    "certs",
    "kubeconfigs",
    "push",
    "control-plane",
    "proxy",
    "kubelet-start",
    "wait-control-plane",
    "wait-node-ready",
    "wait-static-pods",
    "upload-config",
    "mark-control-plane",
    "stop-static-pods",
    "stop-kubelet",
    "cleanup-network",
    "remove-files",
    "verify-clean",
];

/// Component binaries pushed to controllers, and to every other node.
pub const CONTROL_PLANE_BINARIES: &[&str] =
    &["kiln-store", "kiln-apiserver", "kiln-kubelet", "kiln-proxy"];
pub const NODE_BINARIES: &[&str] = &["kiln-kubelet", "kiln-proxy"];
pub const REMOTE_BIN: &str = "/usr/local/bin";
pub const KILN_ETC: &str = "/etc/kiln";
pub const MANIFESTS: &str = "/etc/kiln/manifests";
pub const SUPERVISOR: &str = "/etc/kiln/kubelet-supervisor.sh";
pub const SUPERVISOR_PID: &str = "/run/kiln/kubelet-supervisor.pid";
pub const UNIT: &str = "/etc/systemd/system/kiln-kubelet.service";

#[derive(Debug, Clone)]
pub enum Outcome {
    Done(String),
    Skipped(String),
}

impl Outcome {
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Done(_) => "done",
            Outcome::Skipped(_) => "skipped",
        }
    }
    pub fn detail(&self) -> &str {
        match self {
            Outcome::Done(s) | Outcome::Skipped(s) => s,
        }
    }
}

pub async fn run_phase(
    ctx: &Context,
    name: &str,
    host: Option<&str>,
) -> Result<Outcome, BootstrapError> {
    let need_host = |h: Option<&str>| {
        h.map(str::to_string).ok_or_else(|| {
            BootstrapError::phase(name, "local", "this phase runs on hosts, not locally")
        })
    };
    match name {
        "preflight" => preflight(ctx, &need_host(host)?).await,
        "certs" => certs(ctx),
        "kubeconfigs" => kubeconfigs(ctx),
        "push" => push(ctx, &need_host(host)?).await,
        "control-plane" => control_plane(ctx, &need_host(host)?).await,
        "proxy" => proxy(ctx, &need_host(host)?).await,
        "kubelet-start" => kubelet_start(ctx, &need_host(host)?).await,
        "wait-control-plane" => wait_control_plane(ctx).await,
        "wait-node-ready" => wait_node_ready(ctx, &need_host(host)?).await,
        "wait-static-pods" => wait_static_pods(ctx, &need_host(host)?).await,
        "upload-config" => upload_config(ctx).await,
        "mark-control-plane" => mark_control_plane(ctx, &need_host(host)?).await,
        other => super::reset::run_phase(ctx, other, &need_host(host)?).await,
    }
}

const SEP: &str = "---kiln---";

async fn preflight(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let t = ctx.transport(host).await?;
    let script = format!(
        "id -u; echo {SEP}; cat /proc/swaps; echo {SEP}; cat /proc/sys/net/ipv4/ip_forward 2>/dev/null; echo {SEP}; \
         cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null; echo {SEP}; nproc; echo {SEP}; \
         grep MemTotal /proc/meminfo; echo {SEP}; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; echo {SEP}; \
         ls {MANIFESTS} 2>/dev/null; echo {SEP}; for d in /var/lib/kiln/store; do [ -n \"$(ls -A $d 2>/dev/null)\" ] && echo $d; done; \
         echo {SEP}; hostname"
    );
    let out = t.run(&script).await?;
    let parts: Vec<&str> = out.split(&format!("{SEP}\n")).collect();
    let part = |i: usize| parts.get(i).map(|s| s.trim()).unwrap_or("");
    let mut tcp = String::new();
    for l in part(6).lines() {
        // two files concatenated: keep a header line for each parse
        tcp.push_str(l);
        tcp.push('\n');
    }
    let facts = kiln_preflight::Facts {
        hostname: part(9).to_string(),
        is_root: part(0) == "0",
        swaps: part(1).to_string(),
        ip_forward: Some(part(2).to_string()).filter(|s| !s.is_empty()),
        bridge_nf_call_iptables: Some(part(3).to_string()).filter(|s| !s.is_empty()),
        num_cpu: part(4).parse().unwrap_or(0),
        mem_total_kib: part(5)
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        listening: kiln_preflight::parse_listening_ports(&format!("header\n{tcp}")),
        kiln_components: part(7)
            .lines()
            .map(|l| l.trim_end_matches(".yaml").to_string())
            .collect(),
        non_empty_dirs: part(8).lines().map(str::to_string).collect(),
    };
    let role = if ctx.host(host).is_controller() {
        kiln_preflight::Role::Controller
    } else {
        kiln_preflight::Role::Worker
    };
    let findings = kiln_preflight::run_checks(&facts, role, &ctx.opts.ignore_preflight_errors);
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == kiln_preflight::Severity::Error)
        .map(|f| format!("  [ERROR {}]: {}", f.check, f.message))
        .collect();
    for w in findings
        .iter()
        .filter(|f| f.severity == kiln_preflight::Severity::Warning)
    {
        tracing::warn!(host, check = w.check, "{}", w.message);
    }
    if !errors.is_empty() {
        return Err(BootstrapError::Preflight {
            host: host.to_string(),
            findings: errors.join("\n"),
        });
    }
    let warnings = findings.len();
    Ok(Outcome::Done(if warnings == 0 {
        "all checks passed".to_string()
    } else {
        format!("passed with {warnings} warning(s)")
    }))
}

fn service_ip(ctx: &Context) -> IpAddr {
    let cidr = &ctx.cluster.config.spec.networking.service_cidr;
    match cidr.addr {
        IpAddr::V4(a) => IpAddr::V4(std::net::Ipv4Addr::from(u32::from(a) + 1)),
        IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(a) + 1)),
    }
}

fn pki_err(e: impl std::fmt::Display) -> BootstrapError {
    BootstrapError::Pki(e.to_string())
}

fn validity(ctx: &Context) -> kiln_pki::Validity {
    let p = &ctx.cluster.config.spec.pki;
    kiln_pki::Validity::from_days(Some(p.ca_validity_days), Some(p.cert_validity_days))
}

/// The CA and every certificate of each controller, in the local state directory (0700).
fn certs(ctx: &Context) -> Result<Outcome, BootstrapError> {
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

fn kubeconfig_dir(ctx: &Context, node: &str) -> PathBuf {
    ctx.state_dir.join("kubeconfigs").join(node)
}

/// admin.conf for the operator, and a kubelet.conf (client cert CN=system:node:<host>) for every host, issued
/// by the cluster CA that only the operator's state directory holds.
fn kubeconfigs(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let first = ctx.first_controller().name.clone();
    let ca_spec = kiln_pki::spec("ca").expect("ca is in the tree");
    let ca = kiln_pki::load_ca(&ctx.pki_dir(&first), ca_spec).map_err(pki_err)?;
    let server = format!("https://{}", ctx.cluster.config.control_plane_endpoint());
    let name = &ctx.cluster.config.metadata.name;
    let v = validity(ctx);
    let mut made = vec![];
    for kind in [
        kiln_pki::KubeconfigKind::Admin,
        kiln_pki::KubeconfigKind::Proxy,
    ] {
        if kiln_pki::ensure_kubeconfig(&ctx.state_dir, &ca, &kind, name, &server, &v)
            .map_err(pki_err)?
        {
            made.push(kind.file_name().to_string());
        }
    }
    for h in &ctx.cluster.config.spec.hosts {
        let dir = kubeconfig_dir(ctx, &h.name);
        std::fs::create_dir_all(&dir).map_err(|source| BootstrapError::Io {
            what: "creating",
            path: dir.clone(),
            source,
        })?;
        let kind = kiln_pki::KubeconfigKind::Kubelet {
            node_name: h.name.clone(),
        };
        if kiln_pki::ensure_kubeconfig(&dir, &ca, &kind, name, &server, &v).map_err(pki_err)? {
            made.push(format!("{}/kubelet.conf", h.name));
        }
    }
    Ok(if made.is_empty() {
        Outcome::Skipped("all kubeconfigs exist".into())
    } else {
        Outcome::Done(format!("created {}", made.join(", ")))
    })
}

fn sha256_file(path: &Path) -> Result<String, BootstrapError> {
    let mut f = std::fs::File::open(path).map_err(|source| BootstrapError::Io {
        what: "reading",
        path: path.to_path_buf(),
        source,
    })?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|source| BootstrapError::Io {
        what: "reading",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(hex::encode(h.finalize()))
}

/// A file to install on a host.
pub struct Install {
    pub local: PathBuf,
    pub remote: String,
    pub mode: u32,
}

/// Upload the files whose content differs on the host (one round trip to compare, then parallel uploads).
pub async fn install_files(
    ctx: &Context,
    host: &str,
    files: &[Install],
) -> Result<Vec<String>, BootstrapError> {
    let t = ctx.transport(host).await?;
    let list: Vec<String> = files.iter().map(|f| shell_quote(&f.remote)).collect();
    let out = t
        .exec(
            &format!("sha256sum {} 2>/dev/null; true", list.join(" ")),
            None,
        )
        .await?;
    let remote: BTreeMap<String, String> = out
        .stdout_str()
        .lines()
        .filter_map(|l| {
            let (sum, path) = l.split_once("  ")?;
            Some((path.to_string(), sum.to_string()))
        })
        .collect();
    let mut changed = vec![];
    let mut uploads = vec![];
    for f in files {
        if remote.get(&f.remote) == Some(&sha256_file(&f.local)?) {
            continue;
        }
        changed.push(f.remote.clone());
        let t = t.clone();
        uploads.push(async move { t.upload(Payload::File(&f.local), &f.remote, f.mode).await });
    }
    for r in futures::future::join_all(uploads).await {
        r?;
    }
    Ok(changed)
}

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
async fn push(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let controller = ctx.host(host).is_controller();
    // Workers get only the kubelet, the cluster CA certificate and their own kubelet.conf.
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
    } else {
        files.push(Install {
            local: ctx.pki_dir(&first).join("ca.crt"),
            remote: format!("{KILN_ETC}/pki/ca.crt"),
            mode: 0o644,
        });
    }
    files.push(Install {
        local: kubeconfig_dir(ctx, host).join("kubelet.conf"),
        remote: format!("{KILN_ETC}/kubelet.conf"),
        mode: 0o600,
    });
    files.push(Install {
        local: ctx.state_dir.join("proxy.conf"),
        remote: format!("{KILN_ETC}/proxy.conf"),
        mode: 0o600,
    });
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

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Static pod manifests for the store and the API server.
async fn control_plane(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let h = ctx.host(host);
    let ip = h.node_address();
    let cfg = &ctx.cluster.config;
    let initial_cluster = cfg
        .controllers()
        .map(|c| format!("{}=https://{}:2380", c.name, c.node_address()))
        .collect::<Vec<_>>()
        .join(",");
    let mut c = tera::Context::new();
    c.insert("version", version());
    c.insert("node_name", &h.name);
    c.insert("node_ip", &ip);
    c.insert("initial_cluster", &initial_cluster);
    c.insert("initial_cluster_state", "new");
    c.insert(
        "quota_backend_bytes",
        &cfg.spec.store.quota_backend_bytes.unwrap_or(0),
    );
    c.insert(
        "service_cidr",
        &cfg.spec.networking.service_cidr.to_string(),
    );
    let staging = ctx.state_dir.join("rendered").join(host);
    std::fs::create_dir_all(&staging).map_err(|source| BootstrapError::Io {
        what: "creating",
        path: staging.clone(),
        source,
    })?;
    let mut files = vec![];
    for m in ["kiln-store.yaml", "kiln-apiserver.yaml"] {
        let local = staging.join(m);
        kiln_pki::files::write_atomic(&local, render(m, &c)?.as_bytes(), 0o600).map_err(pki_err)?;
        files.push(Install {
            local,
            remote: format!("{MANIFESTS}/{m}"),
            mode: 0o600,
        });
    }
    let changed = install_files(ctx, host, &files).await?;
    Ok(if changed.is_empty() {
        Outcome::Skipped("manifests up to date".into())
    } else {
        Outcome::Done(format!("wrote {}", changed.join(", ")))
    })
}

/// The kiln-proxy static pod, on every node.
async fn proxy(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let h = ctx.host(host);
    let mut c = tera::Context::new();
    c.insert("version", version());
    c.insert("node_name", &h.name);
    c.insert("node_ip", &h.node_address());
    c.insert(
        "pod_cidr",
        &ctx.cluster.config.spec.networking.pod_cidr.to_string(),
    );
    install_manifest(ctx, host, "kiln-proxy.yaml", &c).await
}

/// Render one manifest and install it into /etc/kiln/manifests if it changed.
async fn install_manifest(
    ctx: &Context,
    host: &str,
    template: &str,
    c: &tera::Context,
) -> Result<Outcome, BootstrapError> {
    let staging = ctx.state_dir.join("rendered").join(host);
    std::fs::create_dir_all(&staging).map_err(|source| BootstrapError::Io {
        what: "creating",
        path: staging.clone(),
        source,
    })?;
    let local = staging.join(template);
    kiln_pki::files::write_atomic(&local, render(template, c)?.as_bytes(), 0o600)
        .map_err(pki_err)?;
    let remote = format!("{MANIFESTS}/{template}");
    let changed = install_files(
        ctx,
        host,
        &[Install {
            local,
            remote: remote.clone(),
            mode: 0o600,
        }],
    )
    .await?;
    Ok(if changed.is_empty() {
        Outcome::Skipped(format!("{remote} up to date"))
    } else {
        Outcome::Done(format!("wrote {remote}"))
    })
}

fn kubelet_command(ctx: &Context, host: &str) -> String {
    let h = ctx.host(host);
    format!(
        "{REMOTE_BIN}/kiln-kubelet --kubeconfig={KILN_ETC}/kubelet.conf --pod-manifest-path={MANIFESTS} \
         --root-dir=/var/lib/kiln/kubelet --hostname-override={} --node-ip={}",
        h.name,
        h.node_address()
    )
}

/// Start the kubelet: a systemd unit where systemd runs, else kiln's supervisor script (lab hosts).
async fn kubelet_start(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let t = ctx.transport(host).await?;
    let mut c = tera::Context::new();
    c.insert("kubelet_command", &kubelet_command(ctx, host));
    let staging = ctx.state_dir.join("rendered").join(host);
    let systemd = t.exec("test -d /run/systemd/system", None).await?.success();
    t.run("mkdir -p /run/kiln /var/log/kiln /var/lib/kiln/kubelet && sysctl -qw net.ipv4.ip_forward=1").await?;
    if systemd {
        let local = staging.join("kiln-kubelet.service");
        kiln_pki::files::write_atomic(
            &local,
            render("kiln-kubelet.service", &c)?.as_bytes(),
            0o644,
        )
        .map_err(pki_err)?;
        let changed = install_files(
            ctx,
            host,
            &[Install {
                local,
                remote: UNIT.into(),
                mode: 0o644,
            }],
        )
        .await?;
        let verb = if changed.is_empty() {
            "start"
        } else {
            "restart"
        };
        t.run(&format!("systemctl daemon-reload && systemctl enable kiln-kubelet && systemctl {verb} kiln-kubelet")).await?;
        return Ok(Outcome::Done(format!("systemd unit kiln-kubelet ({verb})")));
    }
    let local = staging.join("kubelet-supervisor.sh");
    kiln_pki::files::write_atomic(
        &local,
        render("kubelet-supervisor.sh", &c)?.as_bytes(),
        0o644,
    )
    .map_err(pki_err)?;
    let changed = install_files(
        ctx,
        host,
        &[Install {
            local,
            remote: SUPERVISOR.into(),
            mode: 0o755,
        }],
    )
    .await?;
    let running = t
        .exec(
            &format!("kill -0 \"$(cat {SUPERVISOR_PID} 2>/dev/null)\" 2>/dev/null"),
            None,
        )
        .await?
        .success();
    if running && changed.is_empty() {
        return Ok(Outcome::Skipped("supervisor already running".into()));
    }
    if running {
        super::reset::stop_supervisor(&*t).await?;
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

async fn admin_client(ctx: &Context) -> Result<kube::Client, BootstrapError> {
    let path = ctx.admin_conf();
    let kc = kube::config::Kubeconfig::read_from(&path)
        .map_err(|e| BootstrapError::phase("wait", "local", format!("{}: {e}", path.display())))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| BootstrapError::phase("wait", "local", format!("{}: {e}", path.display())))?;
    kube::Client::try_from(cfg).map_err(|e| BootstrapError::phase("wait", "local", e.to_string()))
}

async fn poll<T, F, Fut>(ctx: &Context, what: &str, mut f: F) -> Result<T, BootstrapError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => {
                if e != last {
                    tracing::debug!(what, error = %e, "not yet");
                    last = e;
                }
            }
        }
        if start.elapsed() > ctx.opts.wait_timeout {
            return Err(BootstrapError::Timeout {
                what: if last.is_empty() {
                    what.to_string()
                } else {
                    format!("{what} (last error: {last})")
                },
                seconds: ctx.opts.wait_timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_control_plane(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let client = admin_client(ctx).await?;
    let start = Instant::now();
    poll(ctx, "the API server to be ready (/readyz)", || {
        let client = client.clone();
        async move {
            let req = http::Request::get("/readyz")
                .body(vec![])
                .map_err(|e| e.to_string())?;
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => Ok(Some(())),
                Ok(body) => Err(body),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    Ok(Outcome::Done(format!(
        "API server ready after {:.1}s",
        start.elapsed().as_secs_f64()
    )))
}

async fn wait_node_ready(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::Node;
    let client = admin_client(ctx).await?;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    poll(ctx, &format!("node {host} to be Ready"), || {
        let nodes = nodes.clone();
        let host = host.to_string();
        async move {
            let node = nodes.get_opt(&host).await.map_err(|e| e.to_string())?;
            let ready = node
                .and_then(|n| n.status)
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Ok(ready.then_some(()))
        }
    })
    .await?;
    Ok(Outcome::Done("Ready".into()))
}

/// The control plane's mirror pods (one per static manifest on the host) are Running and Ready.
async fn wait_static_pods(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::Pod;
    let t = ctx.transport(host).await?;
    let manifests: Vec<String> = t
        .run(&format!("ls {MANIFESTS} 2>/dev/null; true"))
        .await?
        .lines()
        .filter_map(|l| l.strip_suffix(".yaml").map(|n| format!("{n}-{host}")))
        .collect();
    let client = admin_client(ctx).await?;
    let pods: kube::Api<Pod> = kube::Api::all(client);
    let want = manifests.clone();
    poll(
        ctx,
        &format!("static pods {} to be Ready", want.join(", ")),
        || {
            let pods = pods.clone();
            let want = want.clone();
            let host = host.to_string();
            async move {
                let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={host}"));
                let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
                let ready = |p: &Pod| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                };
                let missing: Vec<&String> = want
                    .iter()
                    .filter(|w| {
                        !list
                            .items
                            .iter()
                            .any(|p| p.metadata.name.as_deref() == Some(w.as_str()) && ready(p))
                    })
                    .collect();
                if missing.is_empty() {
                    Ok(Some(()))
                } else {
                    Err(format!("not Ready yet: {missing:?}"))
                }
            }
        },
    )
    .await?;
    Ok(Outcome::Done(format!("{} Ready", manifests.join(", "))))
}

/// The cluster's configuration in kube-system/kiln-config (like kubeadm-config), for later joins and
/// upgrades to read from the cluster itself. cluster.yaml holds paths, never secrets.
async fn upload_config(ctx: &Context) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let text = std::fs::read_to_string(&ctx.cluster.path).map_err(|source| BootstrapError::Io {
        what: "reading",
        path: ctx.cluster.path.clone(),
        source,
    })?;
    let client = admin_client(ctx).await?;
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client, "kube-system");
    let fail = |e: kube::Error| BootstrapError::phase("upload-config", "local", e.to_string());
    let existing = cms.get_opt("kiln-config").await.map_err(fail)?;
    let data = std::collections::BTreeMap::from([("cluster.yaml".to_string(), text)]);
    match existing {
        Some(cm) if cm.data.as_ref() == Some(&data) => Ok(Outcome::Skipped(
            "kube-system/kiln-config up to date".into(),
        )),
        Some(mut cm) => {
            cm.data = Some(data);
            cms.replace("kiln-config", &Default::default(), &cm)
                .await
                .map_err(fail)?;
            Ok(Outcome::Done("kube-system/kiln-config updated".into()))
        }
        None => {
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("kiln-config".into()),
                    namespace: Some("kube-system".into()),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            cms.create(&Default::default(), &cm).await.map_err(fail)?;
            Ok(Outcome::Done("kube-system/kiln-config created".into()))
        }
    }
}

pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Label every controller's node, and taint those that are not also workers, like kubeadm.
async fn mark_control_plane(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    use k8s_openapi::api::core::v1::{Node, Taint};
    let client = admin_client(ctx).await?;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let fail = |e: kube::Error| BootstrapError::phase("mark-control-plane", host, e.to_string());
    let mut node = nodes.get(host).await.map_err(fail)?;
    let want_taint = !ctx.host(host).is_worker();
    let labels = node.metadata.labels.get_or_insert_with(Default::default);
    let mut changed = labels
        .insert(CONTROL_PLANE_LABEL.into(), String::new())
        .is_none();
    let spec = node.spec.get_or_insert_with(Default::default);
    let taints = spec.taints.get_or_insert_with(Vec::new);
    let has_taint = taints
        .iter()
        .any(|t| t.key == CONTROL_PLANE_LABEL && t.effect == "NoSchedule");
    if want_taint && !has_taint {
        taints.push(Taint {
            key: CONTROL_PLANE_LABEL.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        changed = true;
    } else if !want_taint && has_taint {
        taints.retain(|t| t.key != CONTROL_PLANE_LABEL);
        changed = true;
    }
    if !changed {
        return Ok(Outcome::Skipped("already marked".into()));
    }
    // Replace with the resourceVersion we read: a concurrent kubelet status write makes this a 409,
    // and a re-run of init converges.
    nodes
        .replace(host, &Default::default(), &node)
        .await
        .map_err(fail)?;
    Ok(Outcome::Done(if want_taint {
        format!("labelled {CONTROL_PLANE_LABEL} and tainted NoSchedule")
    } else {
        format!("labelled {CONTROL_PLANE_LABEL} (also a worker: no taint)")
    }))
}
