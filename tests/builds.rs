//! Builds A and B for the upgrade lab tests (`tests/upgrade.rs`, `tests/ha.rs`), and the check that a
//! cluster runs one of them everywhere.
//!
//! Rebuilding kiln inside a test takes far too long, so A is the binaries this checkout built and B
//! the same binaries with their build stamp rewritten in place — every occurrence of the stamp's build
//! (`kiln_common::version::BUILD`, in `--version`, `/version` and the Node's kubeletVersion) replaced
//! by a string of the same length (`upgB…`). That is what `KILN_BUILD_VERSION=upgB… cargo build` would
//! produce for this source: the files of A and B really differ (their sha256, which is what the
//! upgrade compares) and really report different builds, through the same code paths a release build
//! does.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{bin, ok, TestLab};

/// Every component binary kiln pushes.
pub const COMPONENTS: &[&str] = &[
    "kiln-store",
    "kiln-apiserver",
    "kiln-scheduler",
    "kiln-controller-manager",
    "kiln-kubelet",
    "kiln-proxy",
    "kiln-dns",
];

/// The build of the binaries this checkout built (`kiln-kubelet 0.1.0 (build X, Kubernetes …)`).
pub fn built() -> String {
    let v = ok(Command::new(bin("kiln-kubelet")).arg("--version"));
    v.split("(build ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .expect("a stamped --version")
        .to_string()
}

/// The component binaries with their build stamp rewritten to `upg<tag>…` (see the module), in `dir`;
/// the new build's name.
pub fn stamped(dir: &Path, tag: char) -> String {
    let from = built();
    assert!(from.len() >= 4, "build {from:?} too short to rewrite");
    let to = format!("upg{tag}{}", &from[4..]);
    std::fs::create_dir_all(dir).unwrap();
    for b in COMPONENTS {
        let mut data = std::fs::read(bin(b)).unwrap();
        let mut n = 0;
        let mut i = 0;
        while let Some(at) = data[i..]
            .windows(from.len())
            .position(|w| w == from.as_bytes())
        {
            data[i + at..i + at + from.len()].copy_from_slice(to.as_bytes());
            i += at + from.len();
            n += 1;
        }
        assert!(n >= 1, "{b}: the stamp {from:?} not found");
        let out = dir.join(b);
        std::fs::write(&out, &data).unwrap();
        ok(Command::new("chmod").args(["755", out.to_str().unwrap()]));
        let v = ok(Command::new(&out).arg("--version"));
        assert!(v.contains(&format!("(build {to},")), "{b}: {v}");
    }
    to
}

/// Every component of `hosts` on `build`: each Node's kubelet and proxy versions, the API server's
/// /version (through `admin`), and every kiln process on each host an installed binary (none a
/// replaced one) that says `build`.
pub fn every_component_reports(lab: &TestLab, admin: &str, hosts: &[&str], build: &str) {
    let kubectl = |args: &[&str]| {
        let mut v = vec!["kubectl", "--kubeconfig", admin, "--request-timeout=15s"];
        v.extend_from_slice(args);
        ok(&mut lab.in_lab(&v))
    };
    let kubelets = kubectl(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={range .items[*]}{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.kubeProxyVersion}{\"\\n\"}{end}",
    ]);
    assert_eq!(kubelets.lines().count(), hosts.len(), "{kubelets}");
    for v in kubelets.split_whitespace() {
        assert!(v.ends_with(&format!("+{build}")), "{kubelets}");
    }
    let version = kubectl(&["get", "--raw", "/version"]);
    assert!(version.contains(&format!("+{build}\"")), "{version}");
    for h in hosts {
        // Every running kiln process, by its executable: the installed binary, stamped `build`.
        let ps = lab.ssh_ok(
            h,
            "for p in /proc/[0-9]*; do e=$(readlink $p/exe 2>/dev/null) || continue; \
             case \"$e\" in /usr/local/bin/kiln-*) echo \"$e\";; esac; done | sort -u",
        );
        assert!(!ps.contains("(deleted)"), "{h}: {ps}");
        for exe in ps.lines() {
            let v = lab.ssh_ok(h, &format!("{exe} --version"));
            assert!(v.contains(&format!("(build {build},")), "{h} {exe}: {v}");
        }
        assert!(
            ps.contains("kiln-kubelet") && ps.contains("kiln-proxy"),
            "{h}: {ps}"
        );
    }
}

/// `kiln upgrade apply -f file <args>` inside the lab network, its lines stamped with the time they
/// were printed (and echoed to stderr); its exit status.
pub fn upgrade_timed(lab: &TestLab, file: &str, args: &[&str]) -> (bool, Vec<(f64, String)>) {
    let kiln = bin("kiln").to_string_lossy().into_owned();
    let mut v = vec![kiln.as_str(), "upgrade", "apply", "-f", file];
    v.extend_from_slice(args);
    let mut child = lab.in_lab(&v).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = vec![];
    for l in BufReader::new(child.stdout.take().unwrap()).lines() {
        let l = l.unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        eprintln!("{l}");
        lines.push((now, l));
    }
    (child.wait().unwrap().success(), lines)
}

/// When the first line starting with `prefix` was printed.
pub fn when(lines: &[(f64, String)], prefix: &str) -> f64 {
    lines
        .iter()
        .find(|(_, l)| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?}"))
        .0
}
