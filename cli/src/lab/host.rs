//! One lab host: its cgroups, the namespaces held by its PID 1, its network, sshd and host key.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::exec::{describe, run};
use super::layout::{host_ip, host_name, write_file, LAB_GATEWAY};
use super::systemd::{self, InitMode};
use super::{net, LabError, LabLayout};

const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The lab's SSH client key (root logs in to every host with it).
pub fn ensure_ssh_key(l: &LabLayout) -> Result<(), LabError> {
    let key = l.ssh_key();
    if key.exists() {
        return Ok(());
    }
    super::exec::ssh_keygen(&key.to_string_lossy(), &format!("kiln-lab-{}", l.name))
}

/// The PID 1 of host `n`, if it is running (checked against its command line, or once it became systemd
/// its environment, so a reused PID is not taken for the host).
pub fn running_pid(l: &LabLayout, n: u32) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(l.host_dir(n).join("pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let want = format!("--dir\0{}\0", l.host_dir(n).display());
    let cmdline = String::from_utf8_lossy(&cmdline);
    if cmdline.contains("init-host") && cmdline.contains(&want) {
        return Some(pid);
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let tag = format!("\0{}={}\0", systemd::HOST_DIR_ENV, l.host_dir(n).display());
    let environ = format!("\0{}", String::from_utf8_lossy(&environ));
    environ.contains(&tag).then_some(pid)
}

/// Bring host `n` up, or leave it alone if it is already running. Idempotent, so a half-made lab heals.
pub fn ensure_up(l: &LabLayout, n: u32, count: u32, init: InitMode) -> Result<(), LabError> {
    let (pid, booted) = match running_pid(l, n) {
        Some(pid) => (pid, false),
        None => (boot(l, n, count, init)?, true),
    };
    // Everything below converges: re-running it on a running host is harmless.
    if !Path::new(&format!("/proc/{pid}/root/etc/ssh/ssh_host_ed25519_key")).exists()
        || !l.host_dir(n).join("ssh_host_ed25519_key.pub").exists()
    {
        make_host_key(l, n, pid)?;
    }
    let root_ssh = PathBuf::from(format!("/proc/{pid}/root/root/.ssh"));
    std::fs::create_dir_all(&root_ssh).map_err(LabError::io("creating", &root_ssh))?;
    super::layout::set_mode(&root_ssh, 0o700)?;
    let pubkey = std::fs::read(l.ssh_key().with_extension("pub"))
        .map_err(LabError::io("reading", l.ssh_key().with_extension("pub")))?;
    write_file(&root_ssh.join("authorized_keys"), &pubkey, 0o600)?;
    if !has_link(pid, "eth0") {
        net::attach_host(l, n, pid)?;
    }
    exec_checked(l, n, pid, &["sh", "-c", &net::host_net_script(n)])?;
    match init {
        InitMode::Plain => {
            start_sshd(l, n, pid)?;
            if booted {
                run_rc_local(l, n, pid)?;
            }
        }
        InitMode::Systemd => release_systemd_boot(n, pid)?,
    }
    Ok(())
}

/// The network and host key are in place: let the host's PID 1 become systemd, then wait until its
/// ssh.service listens (sshd writes its pid file only after it listens).
fn release_systemd_boot(n: u32, pid: i32) -> Result<(), LabError> {
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    write_file(
        &root.join(systemd::SSHD_DROPIN),
        systemd::sshd_dropin(&host_ip(n)).as_bytes(),
        0o644,
    )?;
    write_file(&root.join(systemd::GO_MARKER), b"go\n", 0o644)?;
    wait_for_within(
        &format!("{} to boot systemd and start sshd", host_name(n)),
        systemd::BOOT_TIMEOUT,
        || {
            let p = std::fs::read_to_string(root.join("run/sshd.pid")).ok()?;
            let p = p.trim().parse::<i32>().ok()?;
            in_same_pidns(pid, p).then_some(())
        },
    )
}

/// Ask a systemd host to halt (SIGRTMIN+3, what `machinectl poweroff` sends) and wait for its PID 1 to
/// exit. Best effort: whatever is still running afterwards is killed by [`destroy`].
pub fn shutdown(l: &LabLayout, n: u32) {
    let Some(pid) = running_pid(l, n) else {
        return;
    };
    // SAFETY: kill(2) with a pid we just checked is the host's PID 1 and a valid signal number.
    unsafe {
        libc::kill(pid, libc::SIGRTMIN() + 3);
    }
    let gone = wait_for_within(
        &format!("{} to shut down", host_name(n)),
        systemd::SHUTDOWN_TIMEOUT,
        || (!alive(pid)).then_some(()),
    );
    if let Err(e) = gone {
        tracing::warn!(host = %host_name(n), error = %e, "clean shutdown timed out; killing the host");
    }
}

/// Like a Debian VM's rc-local.service: once the network and sshd are up after a boot, run an
/// executable /etc/rc.local in the background. Hosts without systemd start their services from it.
fn run_rc_local(l: &LabLayout, n: u32, pid: i32) -> Result<(), LabError> {
    exec_checked(
        l,
        n,
        pid,
        &[
            "sh",
            "-c",
            "[ -x /etc/rc.local ] || exit 0; setsid /etc/rc.local </dev/null >/var/log/rc.local.log 2>&1 &",
        ],
    )?;
    Ok(())
}

fn has_link(pid: i32, name: &str) -> bool {
    Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "ip", "link", "show", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Create the host's cgroups and namespaces; returns its PID 1 once its filesystem is ready.
fn boot(l: &LabLayout, n: u32, count: u32, init: InitMode) -> Result<i32, LabError> {
    let dir = l.host_dir(n);
    std::fs::create_dir_all(&dir).map_err(LabError::io("creating host directory", &dir))?;
    for f in ["pid", "unshare.pid"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let cgroups = super::cgroups::create(l, n)?;
    write_file(
        &dir.join("cgroups"),
        cgroups
            .iter()
            .map(|p| p.to_string_lossy() + "\n")
            .collect::<String>()
            .as_bytes(),
        0o600,
    )?;
    write_file(&dir.join("hosts"), etc_hosts(count).as_bytes(), 0o644)?;
    let exe = std::env::current_exe().map_err(LabError::io("finding own executable", "kiln"))?;
    let log = std::fs::File::create(dir.join("init.log"))
        .map_err(LabError::io("creating", dir.join("init.log")))?;
    let log2 = log
        .try_clone()
        .map_err(LabError::io("creating", dir.join("init.log")))?;
    let mut c = Command::new("unshare");
    c.args([
        "--net",
        "--mount",
        "--uts",
        "--ipc",
        "--pid",
        "--cgroup",
        "--fork",
        "--propagation",
        "private",
        "--mount-proc",
    ])
    .arg(&exe)
    .args(["lab", "init-host", "--dir"])
    .arg(&dir)
    .args(["--hostname", &host_name(n), "--init", init.as_str()])
    .stdin(Stdio::null())
    .stdout(log)
    .stderr(log2);
    let procs = cgroup_procs_files(&cgroups);
    // SAFETY: between fork and exec we only call async-signal-safe functions (setsid, open, write, close).
    unsafe {
        c.pre_exec(move || {
            libc::setsid();
            join_cgroups(&procs);
            Ok(())
        });
    }
    let child = c.spawn().map_err(|e| LabError::Command {
        cmd: describe(&c),
        status: "could not start".into(),
        stderr: e.to_string(),
    })?;
    let upid = child.id() as i32;
    // The child is reaped by init once we exit; we never wait for it, it lives as long as the host.
    std::mem::forget(child);
    write_file(&dir.join("unshare.pid"), upid.to_string().as_bytes(), 0o600)?;
    let pid1 = wait_for(&format!("{} PID 1", host_name(n)), || {
        std::fs::read_to_string(format!("/proc/{upid}/task/{upid}/children"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<i32>().ok())
    })?;
    let ready = wait_for(&format!("{} filesystem", host_name(n)), || {
        if Path::new(&format!("/proc/{pid1}/root/run/lab-ready")).exists() {
            Some(true)
        } else if !Path::new(&format!("/proc/{pid1}")).exists() {
            Some(false) // init failed: no point waiting
        } else {
            None
        }
    })
    .map_err(|e| with_init_log(e, &dir))?;
    if !ready {
        let log = std::fs::read_to_string(dir.join("init.log")).unwrap_or_default();
        return Err(LabError::Command {
            cmd: format!("kiln lab init-host for {}", host_name(n)),
            status: "exited".into(),
            stderr: log.trim().to_string(),
        });
    }
    write_file(&dir.join("pid"), pid1.to_string().as_bytes(), 0o600)?;
    Ok(pid1)
}

fn with_init_log(e: LabError, dir: &Path) -> LabError {
    let log = std::fs::read_to_string(dir.join("init.log")).unwrap_or_default();
    match e {
        LabError::Timeout { what, seconds } => LabError::Timeout {
            what: format!("{what} (init.log: {})", log.trim()),
            seconds,
        },
        other => other,
    }
}

fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> Result<T, LabError> {
    wait_for_within(what, READY_TIMEOUT, f)
}

fn wait_for_within<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, LabError> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(LabError::Timeout {
                what: what.to_string(),
                seconds: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn etc_hosts(count: u32) -> String {
    let mut s = format!("127.0.0.1 localhost\n{LAB_GATEWAY} controller registry\n");
    for m in 1..=count {
        s.push_str(&format!("{} {}\n", host_ip(m), host_name(m)));
    }
    s
}

/// A fresh ed25519 host key per host (never the machine's own keys, which the /etc overlay would show).
fn make_host_key(l: &LabLayout, n: u32, pid: i32) -> Result<(), LabError> {
    let ssh = format!("/proc/{pid}/root/etc/ssh");
    if let Ok(rd) = std::fs::read_dir(&ssh) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("ssh_host_") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let key = format!("{ssh}/ssh_host_ed25519_key");
    super::exec::ssh_host_keygen(&key, &host_name(n))?;
    let pubkey = std::fs::read(format!("{key}.pub")).map_err(LabError::io("reading", &key))?;
    write_file(
        &l.host_dir(n).join("ssh_host_ed25519_key.pub"),
        &pubkey,
        0o644,
    )
}

fn start_sshd(l: &LabLayout, n: u32, pid: i32) -> Result<(), LabError> {
    // sshd writes its pid file only after it listens; a live one means it is already serving.
    if let Ok(p) = std::fs::read_to_string(format!("/proc/{pid}/root/run/sshd.pid")) {
        if let Ok(p) = p.trim().parse::<i32>() {
            if in_same_pidns(pid, p) {
                return Ok(());
            }
        }
    }
    let ip = host_ip(n);
    exec_checked(
        l,
        n,
        pid,
        &[
            "/usr/sbin/sshd",
            "-o",
            &format!("ListenAddress={ip}"),
            "-o",
            "PermitRootLogin=prohibit-password",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "KbdInteractiveAuthentication=no",
            "-o",
            "UseDNS=no",
            "-o",
            "HostKey=/etc/ssh/ssh_host_ed25519_key",
            "-o",
            "PidFile=/run/sshd.pid",
            "-E",
            "/var/log/sshd.log",
        ],
    )?;
    Ok(())
}

/// Is `inner` (a pid as seen inside the host) alive? The host's /proc is mounted at /proc/PID1/root/proc.
fn in_same_pidns(pid1: i32, inner: i32) -> bool {
    Path::new(&format!("/proc/{pid1}/root/proc/{inner}/comm")).exists()
}

/// Write `known_hosts` for the lab from the host keys we generated: strict checking works from the start.
pub fn write_known_hosts(l: &LabLayout, count: u32) -> Result<(), LabError> {
    let mut out = String::new();
    for n in 1..=count {
        let p = l.host_dir(n).join("ssh_host_ed25519_key.pub");
        let key = std::fs::read_to_string(&p).map_err(LabError::io("reading host key", &p))?;
        let mut parts = key.split_whitespace();
        let (Some(alg), Some(b64)) = (parts.next(), parts.next()) else {
            return Err(LabError::BadState {
                path: p,
                reason: "not an OpenSSH public key".into(),
            });
        };
        for name in [host_ip(n), host_name(n)] {
            out.push_str(&format!("{name} {alg} {b64}\n"));
        }
    }
    write_file(&l.known_hosts(), out.as_bytes(), 0o600)
}

fn cgroup_procs_files(cgroups: &[PathBuf]) -> Vec<CString> {
    cgroups
        .iter()
        .map(|d| {
            CString::new(d.join("cgroup.procs").as_os_str().as_encoded_bytes())
                .expect("cgroup path has no NUL")
        })
        .collect()
}

/// Move the calling process into the host's cgroups ("0" means "me"). Async-signal-safe: runs after fork.
fn join_cgroups(procs: &[CString]) {
    for p in procs {
        // SAFETY: plain syscalls on a valid NUL-terminated path and a static buffer.
        unsafe {
            let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
    }
}

fn host_command(l: &LabLayout, n: u32, pid: i32, argv: &[&str]) -> Command {
    let mut c = Command::new("nsenter");
    c.args([
        "-t",
        &pid.to_string(),
        "-n",
        "-m",
        "-u",
        "-i",
        "-p",
        "-C",
        "--",
    ])
    .args(argv);
    // nsenter does not move a process into cgroups (NOTES pitfall 2): join the host's first, so everything
    // started on the host (sshd, and through it containerd and the kubelet) is accounted to the host.
    let cgroups: Vec<PathBuf> = std::fs::read_to_string(l.host_dir(n).join("cgroups"))
        .unwrap_or_default()
        .lines()
        .map(PathBuf::from)
        .collect();
    let procs = cgroup_procs_files(&cgroups);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            join_cgroups(&procs);
            Ok(())
        });
    }
    c
}

fn exec_checked(l: &LabLayout, n: u32, pid: i32, argv: &[&str]) -> Result<Output, LabError> {
    run(&mut host_command(l, n, pid, argv)).map_err(|e| match e {
        LabError::Command {
            cmd,
            status,
            stderr,
        } => LabError::Command {
            cmd: format!("on {}: {cmd}", host_name(n)),
            status,
            stderr,
        },
        other => other,
    })
}

pub fn exec_output(l: &LabLayout, n: u32, pid: i32, argv: &[&str]) -> Result<Output, LabError> {
    let mut c = host_command(l, n, pid, argv);
    c.stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command {
            cmd: describe(&c),
            status: "could not start".into(),
            stderr: e.to_string(),
        })
}

pub fn exec_interactive(l: &LabLayout, n: u32, pid: i32, argv: &[String]) -> Result<i32, LabError> {
    let args: Vec<&str> = if argv.is_empty() {
        vec!["/bin/bash", "-l"]
    } else {
        argv.iter().map(String::as_str).collect()
    };
    let mut c = host_command(l, n, pid, &args);
    let status = c.status().map_err(|e| LabError::Command {
        cmd: describe(&c),
        status: "could not start".into(),
        stderr: e.to_string(),
    })?;
    Ok(status.code().unwrap_or(128 + 9))
}

/// Kill host `n` (every process in its PID namespace dies with PID 1; its mounts and netns go with them),
/// then remove its cgroups, and unless `keep_disk`, its files.
pub fn destroy(l: &LabLayout, n: u32, keep_disk: bool) -> Result<(), LabError> {
    let dir = l.host_dir(n);
    if let Some(pid) = running_pid(l, n) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        wait_gone(pid)?;
    }
    // unshare exits once its child (PID 1) is gone; it is ours, so wait for it too.
    if let Some(upid) = std::fs::read_to_string(dir.join("unshare.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    {
        let is_unshare = std::fs::read_to_string(format!("/proc/{upid}/comm"))
            .is_ok_and(|c| c.trim() == "unshare");
        if is_unshare {
            wait_gone(upid)?;
        }
    }
    let cgroups: Vec<PathBuf> = std::fs::read_to_string(dir.join("cgroups"))
        .unwrap_or_default()
        .lines()
        .map(PathBuf::from)
        .collect();
    super::cgroups::remove(&cgroups)?;
    for f in ["pid", "unshare.pid"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    if !keep_disk {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LabError::io("removing host directory", &dir)(e)),
        }
    }
    Ok(())
}

fn wait_gone(pid: i32) -> Result<(), LabError> {
    wait_for(&format!("process {pid} to exit"), || {
        (!alive(pid)).then_some(())
    })
}

/// A zombie still has /proc/PID but its state is Z; it is gone for our purposes.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|st| st != "Z"),
    }
}
