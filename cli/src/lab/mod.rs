//! `kiln lab`: a kind-like local cluster of real "hosts" on one Linux machine.
//!
//! A lab is an isolated network namespace (bridge `br0`, no uplink, forwarding off) plus N hosts. Each host is
//! a set of fresh net/mount/uts/ipc/pid/cgroup namespaces whose PID 1 is `kiln lab init-host` (see
//! [`init`]), with private copy-on-write /etc /var /usr, private data dirs, its own sshd and host key. The
//! facts and pitfalls behind every step are in shared/lab/NOTES.md; docs/architecture.md summarises them.

mod cgroups;
mod cluster_yaml;
mod error;
mod exec;
mod host;
pub mod images;
pub mod init;
mod layout;
mod net;
mod registry;
mod requirements;
mod state;
pub mod systemd;
pub mod vm;

pub use error::LabError;
pub use layout::{host_ip, LabLayout, LAB_GATEWAY, REGISTRY_ADDR};
pub use state::{HostStatus, LabStatus};
pub use systemd::InitMode;

use std::path::PathBuf;
use std::time::Instant;

/// What `kiln lab up` was asked for.
#[derive(Debug, Clone)]
pub struct UpOptions {
    pub name: String,
    pub hosts: u32,
    /// Skip the OCI registry and images (faster; for tests that do not pull images).
    pub registry: bool,
    /// Images besides pause and busybox to push (`images::EXTRA`: dnsutils, kubectl). They are large
    /// (tens of MB, the machine's dig and kubectl), so a lab has them only when asked.
    pub extra_images: Vec<String>,
    /// What runs as each host's PID 1: kiln's own minimal init, or systemd.
    pub init: InitMode,
    /// Hosts are qemu VMs with their own kernel (they always boot systemd; `init` is ignored).
    pub vm: bool,
}

/// What `kiln lab up` made, for the caller to print.
#[derive(Debug, Clone)]
pub struct UpReport {
    pub name: String,
    pub netns: String,
    pub cluster_yaml: PathBuf,
    pub ssh_config: PathBuf,
    pub hosts: Vec<(String, String)>,
    pub seconds: f64,
    /// VM labs: how qemu runs the guests.
    pub accel: Option<vm::Accel>,
}

/// A lab by name: every operation on one lab goes through this.
pub struct Lab {
    layout: LabLayout,
}

impl Lab {
    pub fn new(name: &str) -> Result<Lab, LabError> {
        Ok(Lab {
            layout: LabLayout::new(name)?,
        })
    }

    pub fn layout(&self) -> &LabLayout {
        &self.layout
    }

    /// Create the lab, or repair a half-made one. A complete, running lab of that name is an error.
    pub fn up(opts: &UpOptions) -> Result<UpReport, LabError> {
        if opts.vm {
            requirements::check_vm(opts.registry)?;
        } else {
            requirements::check(opts.registry)?;
        }
        let started = Instant::now();
        let lab = Lab::new(&opts.name)?;
        let l = &lab.layout;
        if opts.hosts == 0 || opts.hosts > layout::MAX_HOSTS {
            return Err(LabError::BadHostCount {
                count: opts.hosts,
                max: layout::MAX_HOSTS,
            });
        }
        if let Some(st) = state::load(l)? {
            if st.complete && lab.all_running(&st) && st.hosts == opts.hosts {
                return Err(LabError::NameInUse {
                    name: opts.name.clone(),
                });
            }
            tracing::info!(lab = %opts.name, "repairing a half-made lab");
        }
        let mut st = state::LabState {
            name: opts.name.clone(),
            hosts: opts.hosts,
            registry: opts.registry,
            complete: false,
            // A VM boots systemd, whatever was asked for namespace hosts.
            init: if opts.vm {
                InitMode::Systemd
            } else {
                opts.init
            },
            vm: opts.vm,
            accel: state::load(l)?.and_then(|s| s.accel),
        };
        state::save(l, &st)?;
        l.create_dirs()?;
        crate::lab::host::ensure_ssh_key(l)?;
        net::ensure_lab_netns(l)?;
        if opts.registry {
            let imgs = images::ensure_images(&opts.extra_images)?;
            registry::ensure_running(l, &imgs)?;
        }
        if opts.vm {
            // The VMs' readiness check logs in with ssh_config and known_hosts, so both come first.
            cluster_yaml::write_all(l, opts.hosts, opts.registry)?;
            st.accel = Some(vm::up(l, opts.hosts, st.accel)?);
            st.complete = true;
            state::save(l, &st)?;
            return Ok(lab.report(opts, started));
        }
        // Hosts come up in parallel: each is independent and most of the time is waiting on the kernel.
        let results: Vec<Result<(), LabError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (1..=opts.hosts)
                .map(|n| {
                    let l = l.clone();
                    s.spawn(move || host::ensure_up(&l, n, opts.hosts, opts.init))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(LabError::Panicked)))
                .collect()
        });
        for r in results {
            r?;
        }
        host::write_known_hosts(l, opts.hosts)?;
        cluster_yaml::write_all(l, opts.hosts, opts.registry)?;
        st.complete = true;
        state::save(l, &st)?;
        Ok(lab.report(opts, started))
    }

    fn report(&self, opts: &UpOptions, started: Instant) -> UpReport {
        let l = &self.layout;
        UpReport {
            name: opts.name.clone(),
            netns: l.netns.clone(),
            cluster_yaml: l.cluster_yaml(),
            ssh_config: l.ssh_config(),
            hosts: (1..=opts.hosts)
                .map(|n| (layout::host_name(n), host_ip(n)))
                .collect(),
            seconds: started.elapsed().as_secs_f64(),
            accel: state::load(l).ok().flatten().and_then(|s| s.accel),
        }
    }

    fn all_running(&self, st: &state::LabState) -> bool {
        net::netns_exists(&self.layout.netns)
            && (1..=st.hosts).all(|n| self.host_pid(st, n).is_some())
            && (!st.registry || registry::running(&self.layout))
    }

    /// The pid that is host `n`: its PID 1 (namespace hosts) or its qemu (VMs).
    fn host_pid(&self, st: &state::LabState, n: u32) -> Option<i32> {
        if st.vm {
            vm::running_pid(&self.layout, n)
        } else {
            host::running_pid(&self.layout, n)
        }
    }

    fn is_vm(&self) -> bool {
        state::load(&self.layout)
            .ok()
            .flatten()
            .is_some_and(|s| s.vm)
    }

    /// Remove everything of the lab: hosts (processes, mounts, cgroups), registry, netns, files.
    /// Works on half-made labs too, and is a no-op for a lab that does not exist.
    pub fn down(&self) -> Result<(), LabError> {
        requirements::check_root()?;
        let l = &self.layout;
        let hosts = l.existing_hosts();
        let is_vm = self.is_vm();
        let results: Vec<Result<(), LabError>> = std::thread::scope(|s| {
            let handles: Vec<_> = hosts
                .iter()
                .map(|&n| {
                    s.spawn(move || {
                        if is_vm {
                            vm::destroy(l, n, false)
                        } else {
                            host::destroy(l, n, false)
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(LabError::Panicked)))
                .collect()
        });
        for r in results {
            r?;
        }
        registry::stop(l)?;
        net::delete_lab_netns(l)?;
        l.remove_all()?;
        Ok(())
    }

    /// A plain host loses power: every process dies at once. A systemd host shuts down cleanly first
    /// (units stopped in order), and is killed only if that takes too long. Its disk stays.
    pub fn stop_host(&self, host: &str) -> Result<(), LabError> {
        let n = self.host_number(host)?;
        let st = state::load(&self.layout)?.ok_or_else(|| self.no_such_lab())?;
        if st.vm {
            return vm::stop(&self.layout, n);
        }
        if st.init == InitMode::Systemd {
            host::shutdown(&self.layout, n);
        }
        host::destroy(&self.layout, n, true)
    }

    /// Boot a stopped host again: same disk, fresh /run and /tmp, sshd started; containerd not (plain) or
    /// whatever units are enabled (systemd).
    pub fn start_host(&self, host: &str) -> Result<(), LabError> {
        let n = self.host_number(host)?;
        let st = state::load(&self.layout)?.ok_or_else(|| self.no_such_lab())?;
        if st.vm {
            let accel = st.accel.unwrap_or(vm::Accel::Tcg);
            return vm::start(&self.layout, n, st.hosts, accel);
        }
        host::ensure_up(&self.layout, n, st.hosts, st.init)
    }

    pub fn partition(&self, host: &str) -> Result<(), LabError> {
        let n = self.host_number(host)?;
        net::set_partitioned(&self.layout, n, true)
    }

    pub fn heal(&self, host: &str) -> Result<(), LabError> {
        let n = self.host_number(host)?;
        net::set_partitioned(&self.layout, n, false)?;
        // Neighbour entries that failed while cut off would delay the first packets: forget them.
        if let Some(pid) = host::running_pid(&self.layout, n) {
            let _ = host::exec_output(&self.layout, n, pid, &["ip", "neigh", "flush", "all"]);
        }
        Ok(())
    }

    /// Run a command inside the lab network (where the hosts are reachable), inheriting stdio.
    pub fn run(&self, argv: &[String]) -> Result<i32, LabError> {
        self.require_exists()?;
        exec::run_in_netns_interactive(&self.layout.netns, argv, &self.layout)
    }

    /// Run a command on a host's console (all its namespaces and cgroups), inheriting stdio.
    pub fn exec(&self, host: &str, argv: &[String]) -> Result<i32, LabError> {
        let n = self.host_number(host)?;
        if self.is_vm() {
            self.require_vm_running(n)?;
            return vm::exec_interactive(&self.layout, n, argv);
        }
        let pid = host::running_pid(&self.layout, n).ok_or_else(|| LabError::HostDown {
            lab: self.layout.name.clone(),
            host: layout::host_name(n),
        })?;
        host::exec_interactive(&self.layout, n, pid, argv)
    }

    /// Run a command on a host's console and capture its output (for tests and the CLI's own use).
    pub fn exec_output(&self, host: &str, argv: &[&str]) -> Result<std::process::Output, LabError> {
        let n = self.host_number(host)?;
        if self.is_vm() {
            self.require_vm_running(n)?;
            return vm::exec_output(&self.layout, n, argv);
        }
        let pid = host::running_pid(&self.layout, n).ok_or_else(|| LabError::HostDown {
            lab: self.layout.name.clone(),
            host: layout::host_name(n),
        })?;
        host::exec_output(&self.layout, n, pid, argv)
    }

    pub fn status(&self) -> Result<LabStatus, LabError> {
        let st = state::load(&self.layout)?.ok_or_else(|| self.no_such_lab())?;
        let hosts = (1..=st.hosts)
            .map(|n| HostStatus {
                name: layout::host_name(n),
                address: host_ip(n),
                pid: self.host_pid(&st, n),
                partitioned: net::is_partitioned(&self.layout, n),
            })
            .collect();
        Ok(LabStatus {
            name: st.name,
            netns: self.layout.netns.clone(),
            complete: st.complete,
            registry: st.registry && registry::running(&self.layout),
            cluster_yaml: self.layout.cluster_yaml(),
            hosts,
            init: st.init,
            vm: st.vm,
            accel: st.accel,
        })
    }

    /// Every lab on this machine, by name.
    pub fn list() -> Result<Vec<String>, LabError> {
        layout::list_labs()
    }

    fn require_vm_running(&self, n: u32) -> Result<(), LabError> {
        match vm::running_pid(&self.layout, n) {
            Some(_) => Ok(()),
            None => Err(LabError::HostDown {
                lab: self.layout.name.clone(),
                host: layout::host_name(n),
            }),
        }
    }

    fn require_exists(&self) -> Result<(), LabError> {
        if net::netns_exists(&self.layout.netns) {
            Ok(())
        } else {
            Err(self.no_such_lab())
        }
    }

    fn no_such_lab(&self) -> LabError {
        LabError::NoSuchLab {
            name: self.layout.name.clone(),
        }
    }

    fn host_number(&self, host: &str) -> Result<u32, LabError> {
        let n = layout::parse_host(host).ok_or_else(|| LabError::NoSuchHost {
            lab: self.layout.name.clone(),
            host: host.to_string(),
        })?;
        let count = state::load(&self.layout)?
            .ok_or_else(|| self.no_such_lab())?
            .hosts;
        if n == 0 || n > count {
            return Err(LabError::NoSuchHost {
                lab: self.layout.name.clone(),
                host: host.to_string(),
            });
        }
        Ok(n)
    }
}
