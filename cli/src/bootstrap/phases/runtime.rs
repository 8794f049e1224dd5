//! Phase container-runtime: containerd configured and running for kiln-kubelet's CRI workloads, and its
//! reset counterpart. kiln installs no packages: containerd, runc and the CNI plugins come from the host's
//! package manager (Debian: containerd runc containernetworking-plugins); kiln writes their configuration.

use super::Outcome;
use crate::bootstrap::host_files::{install_files, staged};
use crate::bootstrap::{BootstrapError, Context};
use crate::transport::Transport;

pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
pub const CONTAINERD_PID: &str = "/run/kiln/containerd.pid";
/// The first line of every file kiln writes outside /etc/kiln: reset removes only files that carry it.
pub const MANAGED: &str = "# managed by kiln";

pub(crate) fn containerd_context(ctx: &Context, cni_dir: &str) -> tera::Context {
    let mut c = tera::Context::new();
    c.insert("pause_image", &ctx.cluster.config.spec.images.pause);
    c.insert("cni_bin_dir", cni_dir);
    // kiln-kubelet places pods with cgroupfs paths; keep runc on the same driver everywhere.
    c.insert("systemd_cgroup", &false);
    c
}

pub(super) async fn container_runtime(
    ctx: &Context,
    host: &str,
) -> Result<Outcome, BootstrapError> {
    let t = ctx.transport(host).await?;
    let probe = t
        .run(
            "for p in containerd runc; do command -v $p >/dev/null || echo missing:$p; done; \
             for d in /usr/lib/cni /opt/cni/bin; do [ -x $d/bridge ] && [ -x $d/host-local ] && { echo cni:$d; break; }; done; \
             [ -d /run/systemd/system ] && echo systemd; true",
        )
        .await?;
    let missing: Vec<&str> = probe
        .lines()
        .filter_map(|l| l.strip_prefix("missing:"))
        .collect();
    let cni_dir = probe.lines().find_map(|l| l.strip_prefix("cni:"));
    if !missing.is_empty() || cni_dir.is_none() {
        let mut what: Vec<&str> = missing.clone();
        if cni_dir.is_none() {
            what.push("CNI plugins (bridge, host-local)");
        }
        return Err(BootstrapError::phase(
            "container-runtime",
            host,
            format!(
                "not installed: {} (Debian: apt-get install -y containerd runc containernetworking-plugins)",
                what.join(", ")
            ),
        ));
    }
    let systemd = probe.lines().any(|l| l == "systemd");
    let spec = &ctx.cluster.config.spec;
    let c = containerd_context(ctx, cni_dir.unwrap_or("/opt/cni/bin"));
    let mut files = vec![staged(
        ctx,
        host,
        "containerd.toml",
        &c,
        CONTAINERD_CONFIG,
        0o644,
    )?];
    if let Some(reg) = &spec.registry {
        let mut r = tera::Context::new();
        r.insert("registry", &reg.mirror);
        r.insert("scheme", if reg.insecure { "http" } else { "https" });
        let remote = format!("/etc/containerd/certs.d/{}/hosts.toml", reg.mirror);
        files.push(staged(ctx, host, "registry-hosts.toml", &r, remote, 0o644)?);
        files.extend(super::registry_mirrors::mirror_files(ctx, host, reg)?);
    }
    let changed = install_files(ctx, host, &files).await?;
    // Pods need forwarding, and bridged pod traffic must pass the nat hooks (NOTES: per network namespace).
    t.run(
        "sysctl -qw net.ipv4.ip_forward=1; modprobe br_netfilter 2>/dev/null; \
         [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && sysctl -qw net.bridge.bridge-nf-call-iptables=1; \
         mkdir -p /run/kiln /var/log/kiln; true",
    )
    .await?;
    let running = t
        .exec(
            "[ -S /run/containerd/containerd.sock ] && timeout 5 ctr version >/dev/null 2>&1",
            None,
        )
        .await?
        .success();
    let action = if systemd {
        let verb = if changed.is_empty() {
            "start"
        } else {
            "restart"
        };
        t.run(&format!(
            "systemctl enable containerd >/dev/null 2>&1; systemctl {verb} containerd"
        ))
        .await?;
        verb
    } else if running && changed.is_empty() {
        return Ok(Outcome::Skipped(
            "containerd running with this configuration".into(),
        ));
    } else {
        if running {
            stop_own_containerd(&*t).await?;
        }
        t.run(&format!(
            "setsid containerd --config {CONTAINERD_CONFIG} >>/var/log/kiln/containerd.log 2>&1 </dev/null & \
             echo $! > {CONTAINERD_PID}"
        ))
        .await?;
        "start"
    };
    let up = t
        .exec("for i in $(seq 100); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1", None)
        .await?;
    if !up.success() {
        return Err(BootstrapError::phase(
            "container-runtime",
            host,
            "containerd did not answer on /run/containerd/containerd.sock within 10s (see /var/log/kiln/containerd.log)",
        ));
    }
    Ok(Outcome::Done(format!(
        "containerd {action}ed ({} file(s) changed)",
        changed.len()
    )))
}

/// Stop the containerd kiln started itself (pid file); a system service is left to its manager.
pub async fn stop_own_containerd(t: &dyn Transport) -> Result<bool, BootstrapError> {
    let out = t
        .exec(
            &format!(
                "p=$(cat {CONTAINERD_PID} 2>/dev/null) || exit 3; [ \"$(readlink /proc/$p/exe)\" = \"$(command -v containerd)\" ] || \
                 {{ rm -f {CONTAINERD_PID}; exit 3; }}; kill -TERM $p; for i in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; \
                 kill -KILL $p 2>/dev/null; rm -f {CONTAINERD_PID}; true"
            ),
            None,
        )
        .await?;
    Ok(out.status == 0)
}

/// Reset: kill and delete every CRI container (namespace k8s.io), stop containerd if kiln started it, and
/// remove the pod network: CNI config and IPAM state, pod network namespaces, the cni0 bridge, and the
/// containerd files kiln wrote.
pub async fn remove_workloads(t: &dyn Transport) -> Result<Outcome, BootstrapError> {
    let mut did = vec![];
    // Through CRI first: RemovePodSandbox makes CNI release each pod's address and containerd unmount
    // its files, which deleting containers behind CRI's back would leave behind.
    let cri = t
        .run(
            "[ -S /run/containerd/containerd.sock ] && [ -x /usr/local/bin/kiln-kubelet ] || exit 0; \
             timeout 60 /usr/local/bin/kiln-kubelet --cleanup 2>&1 | tail -1",
        )
        .await?;
    if let Some(line) = cri.lines().last().filter(|l| !l.contains(" 0 pod")) {
        did.push(line.trim().to_string());
    }
    // Then anything left in CRI's namespace (containers a crashed kubelet lost track of).
    let n = t
        .run(
            "[ -S /run/containerd/containerd.sock ] && timeout 5 ctr version >/dev/null 2>&1 || { echo 0; exit 0; }; \
             ids=$(ctr -n k8s.io tasks ls -q 2>/dev/null); for i in $ids; do ctr -n k8s.io tasks kill -s SIGKILL $i >/dev/null 2>&1; done; \
             for i in $ids; do for j in $(seq 50); do ctr -n k8s.io tasks delete -f $i >/dev/null 2>&1 && break; sleep 0.1; done; done; \
             cs=$(ctr -n k8s.io containers ls -q 2>/dev/null); for c in $cs; do ctr -n k8s.io containers delete $c >/dev/null 2>&1; done; \
             echo $cs | wc -w",
        )
        .await?;
    if n.trim() != "0" {
        did.push(format!("{} container(s) removed", n.trim()));
    }
    let mounts = t
        .run(
            "awk '$2 ~ /^\\/run\\/containerd\\/io\\.containerd\\./ {print $2}' /proc/mounts | sort -r | \
             while read m; do umount -l \"$m\" && echo $m; done; true",
        )
        .await?;
    if !mounts.trim().is_empty() {
        did.push(format!(
            "{} leftover mount(s) removed",
            mounts.lines().count()
        ));
    }
    if stop_own_containerd(t).await? {
        did.push("containerd stopped".into());
    }
    let net = t
        .run(&format!(
            "for n in $(ip netns list 2>/dev/null | awk '{{print $1}}' | grep '^cni-'); do ip netns del $n && echo netns:$n; done; \
             ip link show cni0 >/dev/null 2>&1 && ip link del cni0 && echo link:cni0; \
             for f in /etc/cni/net.d/*kiln* /var/lib/cni/networks/kiln /var/lib/cni/results; do [ -e $f ] && rm -rf $f && echo file:$f; done; \
             for f in {CONTAINERD_CONFIG} /etc/containerd/certs.d/*/hosts.toml; do [ -f $f ] && head -1 $f | grep -q '^{MANAGED}' && rm -f $f && echo file:$f; done; \
             rmdir /etc/containerd/certs.d/* /etc/containerd/certs.d 2>/dev/null; true"
        ))
        .await?;
    let removed = net.lines().count();
    if removed > 0 {
        did.push(format!("{removed} network/config item(s) removed"));
    }
    Ok(if did.is_empty() {
        Outcome::Skipped("no workloads".into())
    } else {
        Outcome::Done(did.join(", "))
    })
}

/// What verify-clean looks for after the workloads are gone.
pub const WORKLOAD_RESIDUE: &str =
    "awk '$2 ~ /^\\/run\\/containerd\\/io\\.containerd\\./ {print \"mount \" $2}' /proc/mounts; \
     ip link show cni0 >/dev/null 2>&1 && echo 'link cni0'; \
     ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' | sed 's/^/netns /'; \
     ls /etc/cni/net.d 2>/dev/null | grep kiln | sed 's/^/file \\/etc\\/cni\\/net.d\\//'; \
     [ -S /run/containerd/containerd.sock ] && timeout 5 ctr version >/dev/null 2>&1 && \
     ctr -n k8s.io containers ls -q | sed 's/^/container /'; true";
