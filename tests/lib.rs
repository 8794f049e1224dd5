//! Shared helpers for kiln's end-to-end tests: find the built binaries, drive `kiln lab` like a user does,
//! and tear labs down even when a test fails.

pub mod builds;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A workspace binary built next to this test (`cargo build --workspace --bins` puts them there).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/<test>-<hash> -> target/debug/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --all-targets` before the tests (the README's test command does)",
        p.display()
    );
    p
}

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "lab tests build real hosts (namespaces, mounts, cgroups) and need root; CI runs them as root"
    );
}

/// Run a command and return its output; panics with the command and stderr when it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Run and require success, returning stdout.
pub fn ok(cmd: &mut Command) -> String {
    let o = run(cmd);
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout(&o)
}

/// A lab made for one test, removed on drop (also when the test panics).
pub struct TestLab {
    pub name: String,
    pub hosts: u32,
    pub dir: PathBuf,
}

impl TestLab {
    pub fn up(name: &str, hosts: u32, registry: bool) -> TestLab {
        Self::up_with_images(name, hosts, registry, &[])
    }

    /// A lab whose registry also holds the named extra images (`kiln lab up --image NAME`).
    pub fn up_with_images(name: &str, hosts: u32, registry: bool, images: &[&str]) -> TestLab {
        Self::up_with_init(name, hosts, registry, images, "plain")
    }

    /// A lab whose hosts boot `init` as PID 1 (`kiln lab up --init plain|systemd`).
    pub fn up_with_init(
        name: &str,
        hosts: u32,
        registry: bool,
        images: &[&str],
        init: &str,
    ) -> TestLab {
        require_root();
        wait_for_heavy_lab();
        let lab = TestLab {
            name: name.to_string(),
            hosts,
            dir: PathBuf::from("/tmp/kiln-lab").join(name),
        };
        // A previous aborted run may have left it: `down` converges from any state.
        let _ = run(&mut lab.kiln(&["lab", "down"]));
        let mut args = vec!["lab", "up"];
        let hosts_s = hosts.to_string();
        args.extend(["--hosts", &hosts_s]);
        for i in images {
            args.extend(["--image", i]);
        }
        if !registry {
            args.push("--no-registry");
        }
        args.extend(["--init", init]);
        ok(&mut lab.kiln(&args));
        lab
    }

    /// A lab whose hosts are qemu VMs (`kiln lab up --vm`): each with its own Debian kernel and systemd.
    pub fn up_vm(name: &str, hosts: u32, registry: bool) -> TestLab {
        require_root();
        wait_for_heavy_lab();
        let lab = TestLab {
            name: name.to_string(),
            hosts,
            dir: PathBuf::from("/tmp/kiln-lab").join(name),
        };
        let _ = run(&mut lab.kiln(&["lab", "down"]));
        let hosts_s = hosts.to_string();
        let mut args = vec!["lab", "up", "--vm", "--hosts", &hosts_s];
        if !registry {
            args.push("--no-registry");
        }
        let out = ok(&mut lab.kiln(&args));
        eprintln!("{out}");
        lab
    }

    /// `kiln <args> --name <lab>`
    pub fn kiln(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin("kiln"));
        c.args(args).env("KILN_LAB", &self.name);
        c
    }

    pub fn netns(&self) -> String {
        format!("kiln-lab-{}", self.name)
    }

    /// A command run inside the lab network.
    pub fn in_lab(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns()]).args(argv);
        c
    }

    /// `ssh host <cmd>` from inside the lab network, strict host-key checking, 5 s connect timeout.
    pub fn ssh(&self, host: &str, cmd: &str) -> Command {
        let cfg = self.dir.join("ssh_config");
        let cfg = cfg.to_string_lossy();
        self.in_lab(&["ssh", "-F", &cfg, "-o", "ConnectTimeout=5", host, cmd])
    }

    pub fn ssh_ok(&self, host: &str, cmd: &str) -> String {
        ok(&mut self.ssh(host, cmd))
    }

    pub fn down(&self) {
        ok(&mut self.kiln(&["lab", "down"]));
    }
}

/// test.sh runs the conformance lab test beside the rest of the suite and names, in `KILN_TESTS_AFTER`, the
/// file that appears when it ends: these labs start only then (two test executables at a time), so no other
/// cluster shares the machine's two cores with it and the unit and in-process tests (the wait is bounded: a hung conformance run
/// must not hang the suite too).
fn wait_for_heavy_lab() {
    let Some(marker) = std::env::var_os("KILN_TESTS_AFTER") else {
        return;
    };
    let marker = PathBuf::from(marker);
    if !marker.exists() {
        eprintln!(
            "waiting for the conformance lab test to end ({})",
            marker.display()
        );
    }
    let start = Instant::now();
    while !marker.exists() && start.elapsed() < Duration::from_secs(45 * 60) {
        std::thread::sleep(Duration::from_secs(2));
    }
}

impl Drop for TestLab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.save_logs();
        }
        let _ = run(&mut self.kiln(&["lab", "down"]));
    }
}

/// Per host, on a failed test: every container that restarted (a static pod's `N.log` with N > 0) and
/// the tail of its previous run's log, which is what says why a component went away.
const RESTART_DIGEST: &str = r#"cd /var/log/pods 2>/dev/null || exit 0
for f in */*/[1-9]*.log; do
  [ -e "$f" ] || continue
  d=${f%/*}; n=${f##*/}; n=${n%.log}; prev=$d/$((n - 1)).log
  echo "== $f restarted ($(stat -c %y "$f")); the end of $prev:"
  tail -n 25 "$prev" 2>/dev/null | cut -c1-400
done
echo "== kubelet:"; grep -E 'WARN|ERROR' /var/log/kiln/kubelet.log 2>/dev/null | tail -n 25 | cut -c1-400"#;

impl TestLab {
    /// A failed test's lab goes away with its logs: its hosts' pod and kiln logs are kept in
    /// /tmp/kiln-lab-logs/<lab>/<host>.tar.gz and a restart digest is printed (CI keeps only stdout).
    fn save_logs(&self) {
        let keep = PathBuf::from("/tmp/kiln-lab-logs").join(&self.name);
        if std::fs::create_dir_all(&keep).is_err() {
            return;
        }
        for i in 1..=self.hosts {
            let host = format!("host{i}");
            let digest = run(&mut self.ssh(&host, RESTART_DIGEST));
            eprintln!(
                "---- {host} ({}): restarts and kubelet warnings\n{}",
                self.name,
                stdout(&digest)
            );
            let tar = run(&mut self.ssh(&host, "tar czf - -C /var/log pods kiln 2>/dev/null"));
            let file = keep.join(format!("{host}.tar.gz"));
            if std::fs::write(&file, &tar.stdout).is_ok() {
                eprintln!("---- {host}: logs kept in {}", file.display());
            }
        }
    }
}

/// A kiln cluster on a test lab, driven as a user drives it: kiln and kubectl run inside the lab network.
pub struct Cluster {
    pub lab: TestLab,
    pub kiln: String,
    pub file: String,
    pub admin: String,
}

impl Cluster {
    /// The lab's cluster.yaml and admin kubeconfig, with `extra` appended to the file's `spec` first
    /// (indented two spaces, e.g. "  controllerManager:\n    nodeMonitorGracePeriod: 8s\n").
    pub fn on(lab: TestLab, extra: &str) -> Cluster {
        let file = lab.dir.join("cluster.yaml");
        let mut yaml = std::fs::read_to_string(&file).unwrap();
        yaml.push_str(extra);
        std::fs::write(&file, yaml).unwrap();
        Cluster {
            kiln: bin("kiln").to_string_lossy().into_owned(),
            file: file.to_string_lossy().into_owned(),
            admin: lab
                .dir
                .join(format!("{}.kiln/admin.conf", lab.name))
                .to_string_lossy()
                .into_owned(),
            lab,
        }
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        let mut v = vec![
            "kubectl",
            "--kubeconfig",
            &self.admin,
            "--request-timeout=15s",
        ];
        v.extend_from_slice(args);
        ok(&mut self.lab.in_lab(&v))
    }

    pub fn try_kubectl(&self, args: &[&str]) -> Option<String> {
        let mut v = vec![
            "kubectl",
            "--kubeconfig",
            &self.admin,
            "--request-timeout=15s",
        ];
        v.extend_from_slice(args);
        let o = run(&mut self.lab.in_lab(&v));
        o.status.success().then(|| stdout(&o))
    }

    pub fn kiln(&self, args: &[&str]) -> String {
        let mut v = vec![self.kiln.as_str()];
        v.extend_from_slice(args);
        v.extend_from_slice(&["-f", &self.file]);
        ok(&mut self.lab.in_lab(&v))
    }

    /// Poll `f` until it returns Some, at most `secs` seconds; panics naming `what` and the last value.
    pub fn wait<T>(&self, what: &str, secs: u64, mut f: impl FnMut() -> Result<T, String>) -> T {
        let start = Instant::now();
        loop {
            let last = match f() {
                Ok(v) => return v,
                Err(e) => e,
            };
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "timed out waiting for {what}: {last}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn endpoints(&self, svc: &str) -> Vec<String> {
        self.try_kubectl(&[
            "get",
            "endpoints",
            svc,
            "-o",
            "jsonpath={.subsets[*].addresses[*].ip}",
        ])
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
    }

    pub fn http(&self, host: &str, url: &str) -> Option<String> {
        let o = run(&mut self
            .lab
            .ssh(host, &format!("timeout 3 busybox wget -qO- {url}")));
        o.status.success().then(|| stdout(&o))
    }
}
