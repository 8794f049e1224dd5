//! `kiln lab up --vm`: lab hosts that are qemu VMs with their own Debian kernel and systemd, on the same
//! lab bridge, addresses, ssh_config and cluster.yaml as namespace hosts.
//!
//! Each VM boots a copy-on-write overlay of one cached Debian 12 image ([`image`]) plus a seed disk with
//! its identity ([`seed`]); its NIC is a tap device on the lab bridge, created inside the lab network
//! namespace, and qemu itself runs in that namespace, so no lab traffic or interface reaches the machine's
//! own network. The accelerator is chosen by booting: KVM when a guest actually runs on it, otherwise
//! software emulation (TCG).

mod error;
pub mod image;
pub mod qemu;
pub mod seed;

pub use error::VmError;
pub use qemu::Accel;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::exec::{cmd, describe, run};
use super::layout::{host_ip, host_name, write_file, LabLayout};
use super::LabError;
use qemu::{VmFiles, VmSpec};

/// How long a VM may take from qemu's start to a working SSH login: a cold boot of a full Debian under
/// software emulation takes 35-140 s on two busy cores (one VM to three at once).
pub const SSH_TIMEOUT: Duration = Duration::from_secs(360);
/// KVM boots a guest's kernel to systemd in a few seconds; far longer means KVM does not really run it.
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// A clean power-off (ACPI button → systemd stops every unit) before the VM is killed.
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(90);
/// The swap disk of every VM.
const SWAP_BYTES: u64 = 512 << 20;
/// Console lines quoted when a VM does not come up.
const CONSOLE_LINES: usize = 25;

fn tap(n: u32) -> String {
    // The namespace hosts' veth name: partition and heal take this link down and up.
    format!("h{n}")
}

fn files(l: &LabLayout, n: u32) -> VmFiles {
    VmFiles::new(&l.host_dir(n))
}

/// The running qemu of host `n` (its pid file, checked against its command line so a reused pid is never
/// taken for the VM).
pub fn running_pid(l: &LabLayout, n: u32) -> Option<i32> {
    let f = files(l, n);
    let pid: i32 = std::fs::read_to_string(f.pid()).ok()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline);
    let disk = f.disk().display().to_string();
    (cmdline.starts_with(qemu::QEMU) && cmdline.contains(&disk) && alive(pid)).then_some(pid)
}

/// The accelerator a running VM was started with (from its command line).
fn running_accel(l: &LabLayout, n: u32) -> Option<Accel> {
    let pid = running_pid(l, n)?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let i = args.iter().position(|a| *a == b"-accel")?;
    match args.get(i + 1)? {
        a if a.starts_with(b"kvm") => Some(Accel::Kvm),
        _ => Some(Accel::Tcg),
    }
}

/// Make the lab's VMs (or repair them): image, overlays, seeds, taps; boot each VM that is not running
/// and wait until every one accepts the lab's SSH key with strict host-key checking. `accel` is the lab's
/// accelerator when it was chosen before (a repair); otherwise it is chosen here by booting host1.
pub fn up(l: &LabLayout, count: u32, accel: Option<Accel>) -> Result<Accel, LabError> {
    let img = image::ensure()?;
    for n in 1..=count {
        prepare(l, n, count, &img)?;
        ensure_tap(l, n)?;
    }
    // Written before the first boot: the VMs' host keys are ours, so strict checking holds from the start.
    super::host::write_known_hosts(l, count)?;
    let accel = match (accel, running_accel(l, 1)) {
        (Some(a), _) => a,
        // A repair after `up` was interrupted: host1 already runs with the accelerator chosen then.
        (None, Some(a)) => a,
        (None, None) => choose_accel(l, &img)?,
    };
    for n in 1..=count {
        if running_pid(l, n).is_none() {
            boot(l, n, accel, &img)?;
        }
    }
    let results: Vec<Result<(), LabError>> = std::thread::scope(|s| {
        let hs: Vec<_> = (1..=count)
            .map(|n| s.spawn(move || wait_ssh(l, n, accel)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or(Err(LabError::Panicked)))
            .collect()
    });
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(accel)
}

/// Boot host1 with KVM if /dev/kvm opens; keep it when its kernel reaches systemd, otherwise kill it and
/// use software emulation. Host1 stays booted with whatever was chosen.
fn choose_accel(l: &LabLayout, img: &image::Image) -> Result<Accel, LabError> {
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    if let Err(e) = kvm {
        tracing::info!(error = %e, "no usable /dev/kvm: VMs run under software emulation (TCG)");
        boot(l, 1, Accel::Tcg, img)?;
        return Ok(Accel::Tcg);
    }
    match boot(l, 1, Accel::Kvm, img) {
        Err(e) => {
            tracing::info!(error = %e, "qemu refused KVM: VMs run under software emulation (TCG)");
        }
        Ok(()) => {
            let f = files(l, 1);
            let started = Instant::now();
            loop {
                let console = std::fs::read_to_string(f.console()).unwrap_or_default();
                // systemd's banner: the Debian kernel booted, ran the initramfs and mounted the overlay.
                if console.contains("Welcome to") {
                    tracing::info!(
                        seconds = started.elapsed().as_secs_f64(),
                        "KVM runs the guest: VMs use KVM"
                    );
                    return Ok(Accel::Kvm);
                }
                if running_pid(l, 1).is_none() || started.elapsed() > KVM_PROBE_TIMEOUT {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            tracing::info!(
                console = %qemu::console_tail(&f, 5),
                "a guest under KVM did not reach systemd in {}s: VMs run under software emulation (TCG)",
                KVM_PROBE_TIMEOUT.as_secs()
            );
            kill(l, 1)?;
        }
    }
    boot(l, 1, Accel::Tcg, img)?;
    Ok(Accel::Tcg)
}

/// The VM's own files: overlay (kept across stop/start), swap disk, host key, seed.
fn prepare(l: &LabLayout, n: u32, count: u32, img: &image::Image) -> Result<(), LabError> {
    let f = files(l, n);
    std::fs::create_dir_all(&f.dir).map_err(LabError::io("creating host directory", &f.dir))?;
    if !f.disk().exists() {
        run(&mut cmd(
            "qemu-img",
            &[
                "create",
                "-q",
                "-f",
                "qcow2",
                "-F",
                "qcow2",
                "-b",
                &img.base().display().to_string(),
                &f.disk().display().to_string(),
            ],
        ))?;
    }
    if !f.swap().exists() {
        let file = std::fs::File::create(f.swap()).map_err(LabError::io("creating", f.swap()))?;
        file.set_len(SWAP_BYTES)
            .map_err(LabError::io("sizing", f.swap()))?;
        run(&mut cmd(
            "mkswap",
            &["-q", "-L", "swap", &f.swap().display().to_string()],
        ))?;
    }
    let key = f.dir.join("ssh_host_ed25519_key");
    if !key.exists() || !key.with_extension("pub").exists() {
        let _ = std::fs::remove_file(&key);
        let _ = std::fs::remove_file(key.with_extension("pub"));
        super::exec::ssh_host_keygen(&key.display().to_string(), &host_name(n))?;
    }
    let read = |p: &Path| std::fs::read(p).map_err(LabError::io("reading", p));
    let s = seed::Seed {
        n,
        count,
        machine_id: seed::machine_id(&l.name, n),
        host_key: read(&key)?,
        host_key_pub: read(&key.with_extension("pub"))?,
        authorized_key: read(&l.ssh_key().with_extension("pub"))?,
    };
    write_file(&f.seed(), &s.tar(), 0o600)
}

fn ensure_tap(l: &LabLayout, n: u32) -> Result<(), LabError> {
    let ns = l.netns.as_str();
    let t = tap(n);
    if run(&mut cmd("ip", &["-n", ns, "link", "show", &t])).is_err() {
        run(&mut cmd(
            "ip",
            &["-n", ns, "tuntap", "add", "dev", &t, "mode", "tap"],
        ))?;
    }
    run(&mut cmd(
        "ip",
        &["-n", ns, "link", "set", &t, "master", "br0", "up"],
    ))?;
    Ok(())
}

fn spec(l: &LabLayout, n: u32, accel: Accel, img: &image::Image) -> VmSpec {
    VmSpec {
        lab: l.name.clone(),
        n,
        accel,
        kernel: img.kernel(),
        initrd: img.initrd(),
        machine_id: seed::machine_id(&l.name, n),
        files: files(l, n),
        tap: tap(n),
    }
}

/// Start qemu for host `n` inside the lab network namespace (where its tap is). Returns once qemu has
/// daemonized, i.e. the VM runs.
fn boot(l: &LabLayout, n: u32, accel: Accel, img: &image::Image) -> Result<(), LabError> {
    let sp = spec(l, n, accel, img);
    let f = &sp.files;
    for p in [f.pid(), f.monitor(), f.console()] {
        let _ = std::fs::remove_file(p);
    }
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &l.netns, qemu::QEMU])
        .args(qemu::args(&sp))
        .stdin(Stdio::null());
    tracing::info!(host = %host_name(n), accel = accel.as_str(), "booting VM");
    let out = c.output().map_err(|e| LabError::Command {
        cmd: describe(&c),
        status: "could not start".into(),
        stderr: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(VmError::QemuFailed {
            host: host_name(n),
            accel: accel.as_str(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into());
    }
    Ok(())
}

/// Wait until root logs in over SSH with the lab's key and strict host-key checking; a VM that dies or
/// never gets there is reported with the end of its serial console.
fn wait_ssh(l: &LabLayout, n: u32, accel: Accel) -> Result<(), LabError> {
    let started = Instant::now();
    let addr = format!("{}:22", host_ip(n));
    loop {
        if super::net::connect_in_netns(&l.netns, &addr) && ssh_true(l, n) {
            tracing::info!(host = %host_name(n), accel = accel.as_str(), seconds = started.elapsed().as_secs_f64(), "VM reachable over SSH");
            return Ok(());
        }
        let dead = running_pid(l, n).is_none();
        if dead || started.elapsed() > SSH_TIMEOUT {
            return Err(VmError::NoSsh {
                host: host_name(n),
                accel: accel.as_str(),
                why: if dead {
                    "its qemu exited".to_string()
                } else {
                    format!("SSH did not answer within {}s", SSH_TIMEOUT.as_secs())
                },
                console: qemu::console_tail(&files(l, n), CONSOLE_LINES),
                console_file: files(l, n).console(),
            }
            .into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn ssh_command(l: &LabLayout, n: u32, remote: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &l.netns, "ssh", "-F"])
        .arg(l.ssh_config())
        .args(["-o", "ConnectTimeout=10", &host_name(n), "--", remote]);
    c
}

fn ssh_true(l: &LabLayout, n: u32) -> bool {
    ssh_command(l, n, "true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A command line for the remote shell: each argument single-quoted, so it arrives as given.
pub fn shell_quote(argv: &[&str]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                a.to_string()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `kiln lab exec` on a VM: the command over SSH (a VM's console is not a shell).
pub fn exec_output(l: &LabLayout, n: u32, argv: &[&str]) -> Result<Output, LabError> {
    let mut c = ssh_command(l, n, &shell_quote(argv));
    c.stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command {
            cmd: describe(&c),
            status: "could not start".into(),
            stderr: e.to_string(),
        })
}

pub fn exec_interactive(l: &LabLayout, n: u32, argv: &[String]) -> Result<i32, LabError> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &l.netns, "ssh", "-F"])
        .arg(l.ssh_config());
    if argv.is_empty() {
        c.arg("-t");
    }
    c.arg(host_name(n));
    if !argv.is_empty() {
        let v: Vec<&str> = argv.iter().map(String::as_str).collect();
        c.args(["--", &shell_quote(&v)]);
    }
    let status = c.status().map_err(|e| LabError::Command {
        cmd: describe(&c),
        status: "could not start".into(),
        stderr: e.to_string(),
    })?;
    Ok(status.code().unwrap_or(128 + 9))
}

/// `kiln lab stop` on a VM: press its power button (ACPI; systemd stops every unit in order) and wait for
/// qemu to exit; kill it if the guest does not power off in time. The disk stays.
pub fn stop(l: &LabLayout, n: u32) -> Result<(), LabError> {
    let Some(pid) = running_pid(l, n) else {
        return Ok(());
    };
    if let Err(e) = monitor(l, n, "system_powerdown") {
        tracing::warn!(host = %host_name(n), error = %e, "cannot reach the VM's monitor");
    }
    if !wait_exit(pid, POWEROFF_TIMEOUT) {
        tracing::warn!(host = %host_name(n), "VM did not power off in time; killing it");
    }
    kill(l, n)
}

/// `kiln lab start` on a VM: boot it again from its overlay and wait for SSH.
pub fn start(l: &LabLayout, n: u32, count: u32, accel: Accel) -> Result<(), LabError> {
    let img = image::ensure()?;
    prepare(l, n, count, &img)?;
    ensure_tap(l, n)?;
    if running_pid(l, n).is_none() {
        boot(l, n, accel, &img)?;
    }
    wait_ssh(l, n, accel)
}

/// Kill host `n`'s qemu by its pid: SIGTERM first (qemu then closes its disks cleanly), SIGKILL if that
/// does not end it.
pub fn kill(l: &LabLayout, n: u32) -> Result<(), LabError> {
    if let Some(pid) = running_pid(l, n) {
        let p = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGTERM);
        if !wait_exit(pid, Duration::from_secs(15)) {
            let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
            if !wait_exit(pid, Duration::from_secs(15)) {
                return Err(LabError::Timeout {
                    what: format!("qemu of {} (pid {pid}) to exit", host_name(n)),
                    seconds: 30,
                });
            }
        }
    }
    let f = files(l, n);
    for p in [f.pid(), f.monitor()] {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// `kiln lab down` for host `n`: kill its VM, remove its tap and (unless `keep_disk`) its files.
pub fn destroy(l: &LabLayout, n: u32, keep_disk: bool) -> Result<(), LabError> {
    kill(l, n)?;
    if super::net::netns_exists(&l.netns) {
        let _ = run(&mut cmd("ip", &["-n", &l.netns, "link", "del", &tap(n)]));
    }
    if !keep_disk {
        let dir = l.host_dir(n);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LabError::io("removing host directory", &dir)(e)),
        }
    }
    Ok(())
}

/// One human monitor command (HMP) on the VM's monitor socket.
fn monitor(l: &LabLayout, n: u32, command: &str) -> Result<(), LabError> {
    use std::io::Write;
    let path = files(l, n).monitor();
    let mut s = std::os::unix::net::UnixStream::connect(&path)
        .map_err(LabError::io("connecting to the VM monitor", &path))?;
    s.write_all(format!("{command}\n").as_bytes())
        .map_err(LabError::io("writing to the VM monitor", &path))?;
    // Give qemu a moment to read the line before the connection closes.
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}

fn wait_exit(pid: i32, timeout: Duration) -> bool {
    let started = Instant::now();
    while alive(pid) {
        if started.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// A zombie counts as gone.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|st| st != "Z")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_commands_keep_their_arguments() {
        assert_eq!(shell_quote(&["ls", "-l", "/etc/kiln"]), "ls -l /etc/kiln");
        assert_eq!(
            shell_quote(&["sh", "-c", "echo 'hi' && true"]),
            r#"sh -c 'echo '\''hi'\'' && true'"#
        );
        assert_eq!(shell_quote(&[""]), "''");
    }
}
