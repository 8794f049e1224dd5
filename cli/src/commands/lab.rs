//! `kiln lab …`

use clap::{Args, Subcommand};

use crate::lab::{InitMode, Lab, UpOptions};

#[derive(Debug, Args)]
pub struct NameArg {
    /// Which lab (several can exist side by side).
    #[arg(long, short = 'n', default_value = "kiln", env = "KILN_LAB")]
    pub name: String,
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Create the lab (or repair a half-made one): network, hosts, sshd, registry, cluster.yaml.
    Up {
        #[command(flatten)]
        name: NameArg,
        /// Number of hosts: host1 is the controller, the rest are workers.
        #[arg(long, default_value_t = 3)]
        hosts: u32,
        /// Do not start the lab registry (faster; no images can be pulled).
        #[arg(long)]
        no_registry: bool,
        /// Also push this image to the lab registry (repeatable): `dnsutils` (busybox + the real dig),
        /// `kubectl` (busybox + the real kubectl), `agnhost` (busybox + kiln's agnhost, the e2e test
        /// image; built with the workspace).
        #[arg(long = "image", value_parser = crate::lab::images::EXTRA_NAMES.to_vec())]
        images: Vec<String>,
        /// What runs as each host's PID 1: `plain` (kiln's minimal init; sshd started by the lab) or
        /// `systemd` (a real boot: sshd, containerd and kiln's units run as systemd units).
        #[arg(long, value_enum, default_value_t = InitMode::Plain)]
        init: InitMode,
        /// Make each host a qemu VM with its own Debian 12 kernel and systemd, booted from an image kiln
        /// builds with debootstrap (cached under /var/cache/kiln-lab/vm). KVM when it runs the guest,
        /// otherwise software emulation.
        #[arg(long)]
        vm: bool,
    },
    /// Remove everything of the lab: processes, mounts, links, cgroups, files.
    Down {
        #[command(flatten)]
        name: NameArg,
    },
    /// List labs, or show one lab's hosts.
    Status {
        /// Only this lab.
        #[arg(long, short = 'n')]
        name: Option<String>,
        #[arg(long, value_parser = ["text", "json"], default_value = "text")]
        output: String,
    },
    /// Run a command inside the lab network, where the hosts (and nothing else) are reachable.
    Run {
        #[command(flatten)]
        name: NameArg,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Open a shell inside the lab network.
    Shell {
        #[command(flatten)]
        name: NameArg,
    },
    /// Run a command on a host's console (no SSH involved); a login shell without a command.
    Exec {
        #[command(flatten)]
        name: NameArg,
        host: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// SSH to a host from inside the lab network, with the lab's key and known_hosts.
    Ssh {
        #[command(flatten)]
        name: NameArg,
        host: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Power a host off: every process on it dies at once (a systemd host shuts down cleanly first); its
    /// disk is kept.
    Stop {
        #[command(flatten)]
        name: NameArg,
        host: String,
    },
    /// Boot a stopped host again: same disk, fresh /run and /tmp, sshd up; containerd not started (plain),
    /// or every enabled unit started by systemd (systemd).
    Start {
        #[command(flatten)]
        name: NameArg,
        host: String,
    },
    /// Cut a host off the lab network (both directions); it keeps running.
    Partition {
        #[command(flatten)]
        name: NameArg,
        host: String,
    },
    /// Reconnect a partitioned host.
    Heal {
        #[command(flatten)]
        name: NameArg,
        host: String,
    },
    /// PID 1 of a lab host (internal: started by `kiln lab up` inside the host's namespaces).
    #[command(hide = true)]
    InitHost {
        #[arg(long)]
        dir: std::path::PathBuf,
        #[arg(long)]
        hostname: String,
        #[arg(long, value_enum, default_value_t = InitMode::Plain)]
        init: InitMode,
    },
}

pub fn run(cmd: LabCommand) -> anyhow::Result<i32> {
    match cmd {
        LabCommand::Up {
            name,
            hosts,
            no_registry,
            images,
            init,
            vm,
        } => {
            let r = Lab::up(&UpOptions {
                name: name.name,
                hosts,
                registry: !no_registry,
                extra_images: images,
                init,
                vm,
            })?;
            println!(
                "lab {} is up in {:.1}s (network namespace {})",
                r.name, r.seconds, r.netns
            );
            if let Some(a) = r.accel {
                println!("hosts are qemu VMs, accelerator {}", a.as_str());
            }
            for (h, ip) in &r.hosts {
                println!("  {h}  {ip}");
            }
            println!("cluster.yaml: {}", r.cluster_yaml.display());
            println!("ssh config:   {}", r.ssh_config.display());
            println!(
                "next: kiln lab ssh --name {n} host1   |   kiln lab shell --name {n}   |   kiln lab down --name {n}",
                n = r.name
            );
            Ok(0)
        }
        LabCommand::Down { name } => {
            Lab::new(&name.name)?.down()?;
            println!("lab {} removed", name.name);
            Ok(0)
        }
        LabCommand::Status { name, output } => status(name, &output),
        LabCommand::Run { name, command } => Ok(Lab::new(&name.name)?.run(&command)?),
        LabCommand::Shell { name } => Ok(Lab::new(&name.name)?.run(&[])?),
        LabCommand::Exec {
            name,
            host,
            command,
        } => Ok(Lab::new(&name.name)?.exec(&host, &command)?),
        LabCommand::Ssh {
            name,
            host,
            command,
        } => {
            let lab = Lab::new(&name.name)?;
            let mut argv = vec![
                "ssh".to_string(),
                "-F".into(),
                lab.layout().ssh_config().display().to_string(),
                host,
            ];
            argv.extend(command);
            Ok(lab.run(&argv)?)
        }
        LabCommand::Stop { name, host } => {
            Lab::new(&name.name)?.stop_host(&host)?;
            Ok(0)
        }
        LabCommand::Start { name, host } => {
            Lab::new(&name.name)?.start_host(&host)?;
            Ok(0)
        }
        LabCommand::Partition { name, host } => {
            Lab::new(&name.name)?.partition(&host)?;
            Ok(0)
        }
        LabCommand::Heal { name, host } => {
            Lab::new(&name.name)?.heal(&host)?;
            Ok(0)
        }
        LabCommand::InitHost {
            dir,
            hostname,
            init,
        } => {
            crate::lab::init::run(&dir, &hostname, init)?;
            Ok(0)
        }
    }
}

fn status(name: Option<String>, output: &str) -> anyhow::Result<i32> {
    let names = match name {
        Some(n) => vec![n],
        None => Lab::list()?,
    };
    let mut all = Vec::new();
    for n in names {
        all.push(Lab::new(&n)?.status()?);
    }
    if output == "json" {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(0);
    }
    if all.is_empty() {
        println!("no labs");
    }
    for s in all {
        let state = if s.complete {
            "up"
        } else {
            "half-made (re-run `kiln lab up` or `down`)"
        };
        let kind = match (s.vm, s.accel) {
            (true, Some(a)) => format!("qemu VMs ({})", a.as_str()),
            (true, None) => "qemu VMs".to_string(),
            (false, _) => format!("init {}", s.init.as_str()),
        };
        println!(
            "lab {}: {state}, registry {}, {kind}",
            s.name,
            if s.registry { "running" } else { "off" },
        );
        for h in s.hosts {
            let st = match (h.pid, h.partitioned) {
                (None, _) => "stopped".to_string(),
                (Some(p), false) => format!("running (pid {p})"),
                (Some(p), true) => format!("running (pid {p}), partitioned"),
            };
            println!("  {:8} {:14} {st}", h.name, h.address);
        }
    }
    Ok(0)
}
