//! The one shell script that collects a host's facts in a single round trip, and its parser. They live
//! together so the section names cannot drift apart. Every probe tolerates a missing tool (the check
//! that needs it reports the absence instead).

use std::collections::BTreeMap;

use crate::facts::{parse_listening_ports, parse_sockets, Facts, TCP_LISTEN, UDP_UNCONNECTED};

/// Programs kiln looks for on a host's PATH (`FileExisting-*`, and containerd for `CRI`).
pub const EXECUTABLES: &[&str] = &["ip", "mount", "nsenter", "nft", "containerd", "runc"];

const MARK: &str = "@@kiln-fact:";

/// POSIX sh; prints `@@kiln-fact:NAME` before each fact. Run as root (through sudo where configured).
pub const GATHER_SCRIPT: &str = r#"f() { echo "@@kiln-fact:$1"; }
f uid; id -u
f hostname; hostname
f resolves; timeout 3 getent ahosts "$(hostname)" >/dev/null 2>&1 && echo yes
f swaps; cat /proc/swaps
f fstab; cat /etc/fstab 2>/dev/null
f sysctl_conf; cat /etc/sysctl.d/99-kiln.conf 2>/dev/null
f modules_conf; cat /etc/modules-load.d/kiln.conf 2>/dev/null
f ip_forward; cat /proc/sys/net/ipv4/ip_forward 2>/dev/null
f bridge; cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null
f modules; for m in br_netfilter overlay; do { [ -d /sys/module/$m ] || modprobe -n -q $m 2>/dev/null; } && echo $m; done
f nproc; nproc
f meminfo; grep MemTotal /proc/meminfo
f osrelease; cat /proc/sys/kernel/osrelease
f filesystems; cat /proc/filesystems
f cgroup2; [ -e /sys/fs/cgroup/cgroup.controllers ] && { echo present; cat /sys/fs/cgroup/cgroup.controllers; }
f cgroups; cat /proc/cgroups 2>/dev/null
f machine_id; cat /etc/machine-id 2>/dev/null
f addresses; ip -o addr show 2>/dev/null | awk '{print $4}' | cut -d/ -f1
f executables; for p in ip mount nsenter nft containerd runc; do command -v $p >/dev/null 2>&1 && echo $p; done
f cri; [ -S /run/containerd/containerd.sock ] && echo yes
f containerd_version; command -v containerd >/dev/null 2>&1 && containerd --version 2>/dev/null
f tcp; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null
f udp; cat /proc/net/udp /proc/net/udp6 2>/dev/null
f manifests; for m in /etc/kiln/manifests/*.yaml; do [ -e "$m" ] || continue; if head -3 "$m" | grep -q 'Rendered by .kiln'; then echo "kiln ${m##*/}"; else echo "other ${m##*/}"; fi; done
f running; for p in /proc/[0-9]*; do readlink $p/exe 2>/dev/null; done | sed -n 's|^/usr/local/bin/\(kiln-[a-z-]*\)\( (deleted)\)\{0,1\}$|\1|p' | sort -u
f dirs; for d in /var/lib/kiln/store; do [ -n "$(ls -A $d 2>/dev/null)" ] && echo $d; done
f firewalld; command -v firewall-cmd >/dev/null 2>&1 && timeout 5 firewall-cmd --state 2>/dev/null
f firewalld_ports; command -v firewall-cmd >/dev/null 2>&1 && timeout 5 firewall-cmd --list-ports 2>/dev/null
f ufw; command -v ufw >/dev/null 2>&1 && { echo present; timeout 5 ufw status verbose 2>/dev/null; }
f nft; command -v nft >/dev/null 2>&1 && timeout 5 nft list ruleset 2>/dev/null
f iptables; command -v iptables >/dev/null 2>&1 && timeout 5 iptables -S INPUT 2>/dev/null
true
"#;

/// The facts in the script's output. `node_address` is not the host's to say: the caller fills it in from
/// cluster.yaml.
pub fn parse_gathered(out: &str) -> Facts {
    let mut sections: BTreeMap<&str, String> = BTreeMap::new();
    let mut current: Option<&str> = None;
    for line in out.lines() {
        if let Some(name) = line.strip_prefix(MARK) {
            current = Some(name.trim());
            sections.entry(name.trim()).or_default();
        } else if let Some(name) = current {
            let s = sections.entry(name).or_default();
            s.push_str(line);
            s.push('\n');
        }
    }
    let text = |name: &str| sections.get(name).cloned().unwrap_or_default();
    let trimmed = |name: &str| text(name).trim().to_string();
    let opt = |name: &str| Some(trimmed(name)).filter(|s| !s.is_empty());
    let words = |name: &str| text(name).split_whitespace().map(str::to_string).collect();
    let cgroup2 = text("cgroup2");
    let ufw = text("ufw");
    let mut kiln_components = std::collections::BTreeSet::new();
    let mut foreign_manifests = std::collections::BTreeSet::new();
    // kiln's own: what it rendered a static pod for, and its binaries running from /usr/local/bin (the
    // kubelet has no manifest but holds 10250; a binary replaced by a newer push shows as "(deleted)").
    kiln_components.extend(text("running").lines().map(str::to_string));
    for l in text("manifests").lines() {
        match l.split_once(' ') {
            Some(("kiln", f)) => {
                kiln_components.insert(f.trim_end_matches(".yaml").to_string());
            }
            Some((_, f)) => {
                foreign_manifests.insert(f.to_string());
            }
            None => {}
        }
    }
    Facts {
        hostname: trimmed("hostname"),
        hostname_resolves: trimmed("resolves") == "yes",
        is_root: trimmed("uid") == "0",
        swaps: text("swaps"),
        fstab: text("fstab"),
        sysctl_conf: text("sysctl_conf"),
        modules_conf: text("modules_conf"),
        ip_forward: opt("ip_forward"),
        bridge_nf_call_iptables: opt("bridge"),
        loadable_modules: words("modules"),
        num_cpu: trimmed("nproc").parse().unwrap_or(0),
        mem_total_kib: text("meminfo")
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        kernel_release: trimmed("osrelease"),
        proc_filesystems: text("filesystems"),
        cgroup2_controllers: cgroup2
            .strip_prefix("present\n")
            .map(|s| s.trim().to_string()),
        proc_cgroups: text("cgroups"),
        machine_id: trimmed("machine_id"),
        addresses: words("addresses"),
        node_address: String::new(),
        executables: words("executables"),
        cri_socket: trimmed("cri") == "yes",
        // "containerd github.com/containerd/containerd 1.6.20~ds1 <revision>": the third word.
        containerd_version: text("containerd_version")
            .split_whitespace()
            .nth(2)
            .map(str::to_string),
        // Two files concatenated: the parser skips one header line, and skips the other as not LISTEN.
        listening: parse_listening_ports(&text("tcp")),
        tcp_listeners: parse_sockets(&text("tcp"), TCP_LISTEN),
        udp_bound: parse_sockets(&text("udp"), UDP_UNCONNECTED),
        kiln_components,
        foreign_manifests,
        non_empty_dirs: text("dirs").lines().map(str::to_string).collect(),
        firewalld_running: trimmed("firewalld") == "running",
        firewalld_ports: trimmed("firewalld_ports"),
        ufw_status: ufw.strip_prefix("present\n").map(str::to_string),
        nft_ruleset: text("nft"),
        iptables_input: text("iptables"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_names_every_executable_it_looks_for() {
        let line = GATHER_SCRIPT
            .lines()
            .find(|l| l.starts_with("f executables"))
            .unwrap();
        for e in EXECUTABLES {
            assert!(line.contains(&format!(" {e}")), "{e}");
        }
    }

    #[test]
    fn sections_become_facts() {
        let out = "@@kiln-fact:uid\n0\n@@kiln-fact:hostname\nhost1\n@@kiln-fact:resolves\nyes\n\
                   @@kiln-fact:swaps\nFilename Type Size Used Priority\n@@kiln-fact:ip_forward\n0\n\
                   @@kiln-fact:bridge\n@@kiln-fact:modules\nbr_netfilter\noverlay\n@@kiln-fact:nproc\n4\n\
                   @@kiln-fact:meminfo\nMemTotal:       16384000 kB\n@@kiln-fact:osrelease\n6.1.0-18-amd64\n\
                   @@kiln-fact:cgroup2\npresent\ncpuset cpu io memory pids\n\
                   @@kiln-fact:addresses\n127.0.0.1\n10.250.0.11\n::1\n\
                   @@kiln-fact:executables\nip\nnft\n@@kiln-fact:cri\n\
                   @@kiln-fact:containerd_version\ncontainerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n\
                   @@kiln-fact:tcp\n  sl local rem st\n 0: 0100007F:0959 00000000:0000 0A 0\n  sl local rem st\n\
                   @@kiln-fact:manifests\nkiln kiln-store.yaml\nother kiln-apiserver.yaml\n\
                   @@kiln-fact:running\nkiln-kubelet\n\
                   @@kiln-fact:firewalld\nnot running\n@@kiln-fact:ufw\n@@kiln-fact:nft\ntable ip kiln {\n}\n";
        let f = parse_gathered(out);
        assert!(f.is_root && f.hostname_resolves);
        assert_eq!(f.hostname, "host1");
        assert_eq!(f.ip_forward.as_deref(), Some("0"));
        assert_eq!(f.bridge_nf_call_iptables, None);
        assert!(f.loadable_modules.contains("overlay"));
        assert_eq!((f.num_cpu, f.mem_total_kib), (4, 16384000));
        assert_eq!(f.kernel_release, "6.1.0-18-amd64");
        assert_eq!(
            f.cgroup2_controllers.as_deref(),
            Some("cpuset cpu io memory pids")
        );
        assert_eq!(f.addresses.len(), 3);
        assert!(f.executables.contains("nft") && !f.executables.contains("mount"));
        assert!(!f.cri_socket);
        assert_eq!(f.containerd_version.as_deref(), Some("1.6.20~ds1"));
        assert_eq!(f.listening, [2393].into());
        assert!(f.kiln_components.contains("kiln-store"));
        assert!(f.kiln_components.contains("kiln-kubelet"));
        assert!(f.foreign_manifests.contains("kiln-apiserver.yaml"));
        assert!(!f.firewalld_running);
        assert_eq!(f.ufw_status, None);
        assert!(f.nft_ruleset.starts_with("table ip kiln"));
    }
}
