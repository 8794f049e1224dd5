//! The lab's OCI registry (Debian's `docker-registry`), listening only inside the lab namespace, holding
//! kiln's test images under `kiln/<name>:<tag>`.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::exec::{cmd, describe, run};
use super::images::BuiltImage;
use super::layout::{write_file, REGISTRY_ADDR};
use super::{LabError, LabLayout};

const START_TIMEOUT: Duration = Duration::from_secs(15);

fn pid_file(l: &LabLayout) -> std::path::PathBuf {
    l.dir.join("registry.pid")
}

pub fn running_pid(l: &LabLayout) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pid_file(l))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cfg = l.dir.join("registry.yml");
    String::from_utf8_lossy(&cmdline)
        .contains(&*cfg.to_string_lossy())
        .then_some(pid)
}

pub fn running(l: &LabLayout) -> bool {
    running_pid(l).is_some()
}

pub fn ensure_running(l: &LabLayout, images: &[BuiltImage]) -> Result<(), LabError> {
    if !running(l) {
        start(l)?;
    }
    for img in images {
        if pushed(l, img) {
            continue;
        }
        let src = format!("oci-archive:{}", img.archive.display());
        let dst = format!("docker://{}", img.reference(REGISTRY_ADDR));
        run(&mut cmd(
            "ip",
            &[
                "netns",
                "exec",
                &l.netns,
                "skopeo",
                "copy",
                "-q",
                "--dest-tls-verify=false",
                &src,
                &dst,
            ],
        ))?;
    }
    Ok(())
}

fn pushed(l: &LabLayout, img: &BuiltImage) -> bool {
    l.registry_dir()
        .join("docker/registry/v2/repositories/kiln")
        .join(img.name)
        .join("_manifests/tags")
        .join(img.tag)
        .exists()
}

fn start(l: &LabLayout) -> Result<(), LabError> {
    let storage = l.registry_dir();
    std::fs::create_dir_all(&storage).map_err(LabError::io("creating", &storage))?;
    let cfg = l.dir.join("registry.yml");
    let yaml = format!(
        "version: 0.1\nlog: {{ level: warn, accesslog: {{ disabled: true }} }}\nstorage:\n  filesystem: {{ rootdirectory: {} }}\n  \
         delete: {{ enabled: true }}\nhttp:\n  addr: {REGISTRY_ADDR}\n",
        storage.display()
    );
    write_file(&cfg, yaml.as_bytes(), 0o644)?;
    let log = std::fs::File::create(l.dir.join("registry.log"))
        .map_err(LabError::io("creating", l.dir.join("registry.log")))?;
    let mut c = Command::new("ip");
    // `ip netns exec` execs in place, so the child's PID is the registry's own.
    c.args(["netns", "exec", &l.netns, "docker-registry", "serve"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(
            log.try_clone()
                .map_err(LabError::io("creating", "registry.log"))?,
        )
        .stderr(log);
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = c.spawn().map_err(|e| LabError::Command {
        cmd: describe(&c),
        status: "could not start".into(),
        stderr: e.to_string(),
    })?;
    let pid = child.id();
    std::mem::forget(child);
    write_file(&pid_file(l), pid.to_string().as_bytes(), 0o600)?;
    let start = Instant::now();
    while start.elapsed() < START_TIMEOUT {
        if super::net::connect_in_netns(&l.netns, REGISTRY_ADDR) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(LabError::Timeout {
        what: format!(
            "the lab registry on {REGISTRY_ADDR} (see {})",
            l.dir.join("registry.log").display()
        ),
        seconds: START_TIMEOUT.as_secs(),
    })
}

/// Stop the registry we started (by its recorded PID); it shuts down gracefully in about a second.
pub fn stop(l: &LabLayout) -> Result<(), LabError> {
    let Some(pid) = running_pid(l) else {
        return Ok(());
    };
    let p = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGTERM);
    let start = Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        if start.elapsed() > Duration::from_secs(5) {
            let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
        }
        if start.elapsed() > Duration::from_secs(10) {
            break;
        }
        // Reap it if it is our child (only when `up` and `down` run in one process, as in tests).
        let _ = nix::sys::wait::waitpid(p, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(pid_file(l));
    Ok(())
}
