//! kube-rs's own cluster tests (tests/kube-rs-e2e) on the conformance lab's cluster, after the Python
//! suite: each test executable that `tests/kube-rs-e2e/build` made (CI builds them before the test
//! command: a cold build takes minutes) runs with `--ignored` in the lab network with KUBECONFIG → the lab's
//! admin.conf, then `kiln-kube-rs-e2e` prints the summary, gates on tests/kube-rs-e2e/passing.txt and
//! writes the docs section.
//!
//! The tests run `busybox:stable` from Docker Hub: the cluster already pulls docker.io through the lab
//! registry (`python_e2e::mirror_docker_io`), which serves kiln's busybox under that name too.

use std::path::{Path, PathBuf};

use kiln_tests::{bin, ok, run, Cluster};

const REGISTRY: &str = "10.250.0.1:5000";
const DOCKER_HUB_NAMES: &[(&str, &str)] = &[("kiln/busybox:1", "library/busybox:stable")];
/// Bound on one executable: its tests take seconds (pods of busybox); one that hangs on a wait must not
/// hold CI. libtest has no per-test timeout, so the whole executable is stopped and its unfinished tests
/// count as not run.
const EXE_TIMEOUT_SECS: &str = "300";

/// `$KUBE_RS_TARGET/tests.tsv` (tests/kube-rs-e2e/build): `crate<TAB>source dir<TAB>executable`.
fn executables() -> Vec<(String, String, String)> {
    let target =
        std::env::var("KUBE_RS_TARGET").unwrap_or_else(|_| "/var/cache/kube-rs-target".into());
    let list = Path::new(&target).join("tests.tsv");
    let text = std::fs::read_to_string(&list).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: build kube-rs's tests first with tests/kube-rs-e2e/build (.ci/run does)",
            list.display()
        )
    });
    let exes: Vec<_> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some((f.next()?.into(), f.next()?.into(), f.next()?.into()))
        })
        .collect();
    assert!(
        !exes.is_empty(),
        "{} lists no test executable",
        list.display()
    );
    exes
}

/// Run every executable and the gate; asserts the gate passed.
pub fn run_suite(c: &Cluster, out: &Path) {
    for (src, dst) in DOCKER_HUB_NAMES {
        ok(&mut c.lab.in_lab(&[
            "skopeo",
            "copy",
            "-q",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            &format!("docker://{REGISTRY}/{src}"),
            &format!("docker://{REGISTRY}/{dst}"),
        ]));
    }
    let dir = out.join("kube-rs-e2e");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (krate, src, exe) in executables() {
        let mut cmd = c.lab.in_lab(&[
            "timeout",
            EXE_TIMEOUT_SECS,
            "env",
            &format!("KUBECONFIG={}", c.admin),
            &exe,
            "--ignored",
        ]);
        // As `cargo test` runs it: from the package's directory.
        cmd.current_dir(&src);
        let o = run(&mut cmd);
        // libtest exits 101 when a test fails: the gate decides. The output is the record either way.
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let file = dir.join(format!("{krate}.txt"));
        std::fs::write(&file, &text).unwrap();
        println!("kube-rs {krate}: {} ({})", o.status, file.display());
        files.push(file);
    }
    let passing = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kube-rs-e2e/passing.txt");
    let docs = out.join("conformance.md");
    let mut g = std::process::Command::new(bin("kiln-kube-rs-e2e"));
    for f in &files {
        g.arg("--output").arg(f);
    }
    g.arg("--passing").arg(&passing).arg("--report").arg(&docs);
    let g = run(&mut g);
    let stdout = String::from_utf8_lossy(&g.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&g.stderr));
    assert!(
        g.status.success(),
        "kiln-kube-rs-e2e failed ({}): a test of tests/kube-rs-e2e/passing.txt no longer passes\n{stdout}",
        g.status
    );
    assert!(stdout.contains(" passed, "), "{stdout}");
}
