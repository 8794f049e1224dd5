//! The qemu command line of a lab VM (pure, unit-tested) and the few calls that start, stop and inspect
//! one qemu process.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::lab::layout::host_name;
use crate::lab::net::host_mac;

pub const QEMU: &str = "qemu-system-x86_64";
/// Guest RAM: a controller's store, apiserver, controllers, kubelet and containerd with room to spare
/// (an idle Debian guest uses ~400 MB of it).
pub const MEMORY_MIB: u32 = 2048;
pub const CPUS: u32 = 2;

/// How qemu runs guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization through /dev/kvm: guest code at near native speed.
    Kvm,
    /// qemu's software emulation (TCG): runs anywhere, several times slower.
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// One VM's files, all in its host directory.
#[derive(Debug, Clone)]
pub struct VmFiles {
    pub dir: PathBuf,
}

impl VmFiles {
    pub fn new(dir: &Path) -> VmFiles {
        VmFiles {
            dir: dir.to_path_buf(),
        }
    }
    /// The copy-on-write overlay over the shared base image: everything this VM writes.
    pub fn disk(&self) -> PathBuf {
        self.dir.join("disk.qcow2")
    }
    pub fn seed(&self) -> PathBuf {
        self.dir.join("seed.tar")
    }
    pub fn swap(&self) -> PathBuf {
        self.dir.join("swap.raw")
    }
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }
    pub fn pid(&self) -> PathBuf {
        self.dir.join("qemu.pid")
    }
    pub fn monitor(&self) -> PathBuf {
        self.dir.join("monitor.sock")
    }
}

/// Everything a VM's command line depends on.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub lab: String,
    pub n: u32,
    pub accel: Accel,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub machine_id: String,
    pub files: VmFiles,
    /// The tap device on the lab bridge (the same name a namespace host's veth has, so partition and heal
    /// work unchanged).
    pub tap: String,
}

/// The kernel command line. systemd takes the machine-id and hostname from it before any unit runs (the
/// seed writes the same values to /etc for tools that read the files); `net.ifnames=0` keeps the NIC
/// `eth0` as on namespace hosts.
pub fn kernel_cmdline(spec: &VmSpec) -> String {
    format!(
        "root=/dev/vda rw console=ttyS0,115200 net.ifnames=0 systemd.machine_id={} systemd.hostname={} \
         systemd.show_status=1",
        spec.machine_id,
        host_name(spec.n)
    )
}

/// qemu's arguments (without the program). The VM daemonizes once it runs: its PID is in `qemu.pid`.
pub fn args(spec: &VmSpec) -> Vec<String> {
    let f = &spec.files;
    let p = |p: PathBuf| p.display().to_string();
    let (accel, cpu) = match spec.accel {
        Accel::Kvm => ("kvm", "host"),
        Accel::Tcg => ("tcg,thread=multi", "max"),
    };
    let mut a: Vec<String> = vec![
        "-name".into(),
        format!(
            "kiln-lab-{}-{},process=kiln-vm-{}",
            spec.lab,
            host_name(spec.n),
            spec.n
        ),
        "-machine".into(),
        "q35".into(),
        "-accel".into(),
        accel.into(),
        "-cpu".into(),
        cpu.into(),
        "-smp".into(),
        CPUS.to_string(),
        "-m".into(),
        MEMORY_MIB.to_string(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-kernel".into(),
        p(spec.kernel.clone()),
        "-initrd".into(),
        p(spec.initrd.clone()),
        "-append".into(),
        kernel_cmdline(spec),
    ];
    // vda: the overlay; vdb: the seed (read-only); vdc: swap — in this order, which fixes their names.
    // cache=unsafe: a guest's flushes need not reach the machine's disk; the VM's data only has to
    // survive guest reboots and qemu exits, which the machine's page cache already guarantees.
    for (file, extra) in [
        (
            format!(
                "file={},format=qcow2,cache=unsafe,discard=unmap",
                p(f.disk())
            ),
            "",
        ),
        (format!("file={},format=raw", p(f.seed())), ",readonly=on"),
        (format!("file={},format=raw,cache=unsafe", p(f.swap())), ""),
    ] {
        a.push("-drive".into());
        a.push(format!("{file},if=virtio{extra}"));
    }
    a.extend([
        "-netdev".into(),
        format!("tap,id=lab,ifname={},script=no,downscript=no", spec.tap),
        "-device".into(),
        format!("virtio-net-pci,netdev=lab,mac={}", host_mac(spec.n)),
        // The guest's entropy comes from the machine: sshd and the kubelet's TLS never wait for it.
        "-device".into(),
        "virtio-rng-pci".into(),
        "-serial".into(),
        format!("file:{}", p(f.console())),
        "-monitor".into(),
        format!("unix:{},server=on,wait=off", p(f.monitor())),
        "-pidfile".into(),
        p(f.pid()),
        "-daemonize".into(),
    ]);
    a
}

/// The last `lines` lines of a VM's serial console (what the kernel and systemd printed).
pub fn console_tail(files: &VmFiles, lines: usize) -> String {
    let raw = std::fs::read(files.console()).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    // The console carries terminal escapes and carriage returns; keep it readable in an error message.
    let clean: Vec<String> = text
        .lines()
        .map(strip_escapes)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let start = clean.len().saturating_sub(lines);
    clean[start..].join("\n")
}

fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ params final-byte
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(accel: Accel) -> VmSpec {
        VmSpec {
            lab: "t".into(),
            n: 2,
            accel,
            kernel: "/c/vmlinuz".into(),
            initrd: "/c/initrd.img".into(),
            machine_id: "0123456789abcdef0123456789abcdef".into(),
            files: VmFiles::new(Path::new("/tmp/kiln-lab/t/hosts/host2")),
            tap: "h2".into(),
        }
    }

    #[test]
    fn command_line_names_disks_network_and_accelerator() {
        let a = args(&spec(Accel::Tcg)).join(" ");
        assert!(a.contains("-accel tcg,thread=multi -cpu max"), "{a}");
        assert!(
            a.contains("file=/tmp/kiln-lab/t/hosts/host2/disk.qcow2,format=qcow2"),
            "{a}"
        );
        assert!(
            a.contains("seed.tar,format=raw,if=virtio,readonly=on"),
            "{a}"
        );
        assert!(a.contains("tap,id=lab,ifname=h2,script=no"), "{a}");
        assert!(a.contains("mac=02:6b:6c:00:00:02"), "{a}");
        assert!(a.contains("systemd.hostname=host2"), "{a}");
        assert!(
            a.contains("-pidfile /tmp/kiln-lab/t/hosts/host2/qemu.pid -daemonize"),
            "{a}"
        );
        let k = args(&spec(Accel::Kvm)).join(" ");
        assert!(k.contains("-accel kvm -cpu host"), "{k}");
        // the overlay is vda, the seed vdb, swap vdc: their order on the command line fixes the names
        let d = |s: &str| a.find(s).unwrap();
        assert!(d("disk.qcow2") < d("seed.tar") && d("seed.tar") < d("swap.raw"));
    }

    #[test]
    fn console_tail_is_the_last_readable_lines() {
        let dir = tempfile::tempdir().unwrap();
        let f = VmFiles::new(dir.path());
        std::fs::write(
            f.console(),
            "one\r\n\u{1b}[0;32m  OK  \u{1b}[0m] Started ssh.service\r\n\r\nthree\r\n",
        )
        .unwrap();
        assert_eq!(console_tail(&f, 2), "  OK  ] Started ssh.service\nthree");
        assert_eq!(console_tail(&f, 10).lines().count(), 3);
    }
}
