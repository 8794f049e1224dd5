//! The official Python client's own e2e suite (tests/python-e2e) on the conformance lab's cluster, after
//! the conformance gate: pytest in the lab network with KUBECONFIG → the lab's admin.conf, JUnit, then
//! `kiln-python-e2e` for the summary, the gate on tests/python-e2e/passing.txt and the docs section.
//!
//! The suite names Docker Hub images (`busybox`, `nginx`, `python`); the lab has no internet. The cluster
//! pulls docker.io through the lab registry (cluster.yaml `spec.registry.mirrorOf: [docker.io]`, as an
//! air-gapped user would) and the runner serves kiln's busybox there as `library/busybox:latest`. nginx and
//! python are not in the lab: the tests that need them fail with their reason in the report.

use std::path::{Path, PathBuf};

use kiln_tests::{bin, ok, run, Cluster, TestLab};

const REGISTRY: &str = "10.250.0.1:5000";
/// Lab images served under the Docker Hub names the suite uses (source under the lab registry → target).
const DOCKER_HUB_NAMES: &[(&str, &str)] = &[("kiln/busybox:1", "library/busybox:latest")];
/// The longest one test may take: upstream's tests wait unbounded for a pod to leave Pending (the slowest
/// passing test takes ~10 s on a loaded lab; the two whose images the lab lacks wait this long each).
const TEST_TIMEOUT_SECS: &str = "30";

/// cluster.yaml: docker.io pulls try the lab registry first (before `kiln init` writes containerd's config).
pub fn mirror_docker_io(lab: &TestLab) {
    let file = lab.dir.join("cluster.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    let key = "    insecure: true\n";
    assert!(
        yaml.contains(key),
        "the lab's cluster.yaml has no registry: {yaml}"
    );
    let yaml = yaml.replacen(key, &format!("{key}    mirrorOf: [docker.io]\n"), 1);
    std::fs::write(&file, yaml).unwrap();
}

fn serve_docker_hub_names(lab: &TestLab) {
    for (src, dst) in DOCKER_HUB_NAMES {
        ok(&mut lab.in_lab(&[
            "skopeo",
            "copy",
            "-q",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            &format!("docker://{REGISTRY}/{src}"),
            &format!("docker://{REGISTRY}/{dst}"),
        ]));
    }
}

/// Run the suite and gate; returns kiln-python-e2e's stdout (the summary) after asserting the gate.
pub fn run_suite(c: &Cluster, out: &Path) {
    serve_docker_hub_names(&c.lab);
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../python-e2e");
    let here = here.canonicalize().expect("tests/python-e2e");
    let junit = out.join("python-e2e.xml");
    let _ = std::fs::remove_file(&junit);
    let junit_arg = format!("--junitxml={}", junit.display());
    let mut pytest = c.lab.in_lab(&[
        "env",
        &format!("KUBECONFIG={}", c.admin),
        &format!("PYTHONPATH={}", here.display()),
        // Leave no __pycache__ in the checkout.
        "PYTHONDONTWRITEBYTECODE=1",
        "python3",
        "-m",
        "pytest",
        "-p",
        "kiln_e2e_plugin",
        "-p",
        "no:cacheprovider",
        "--rootdir=.",
        "--timeout",
        TEST_TIMEOUT_SECS,
        "-q",
        "-rfEs",
        &junit_arg,
        "kubernetes/e2e_test",
    ]);
    // upstream's test_utils reads its YAML relative to the client repo's root: the vendored tree is one.
    pytest.current_dir(here.join("upstream"));
    let o = run(&mut pytest);
    // pytest exits 1 when a test fails; the gate below decides. Anything else (no tests, a usage error,
    // a missing client) is the runner's own failure.
    let code = o.status.code();
    assert!(
        matches!(code, Some(0) | Some(1)),
        "pytest failed to run ({:?}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let docs = out.join("conformance.md");
    let g = run(std::process::Command::new(bin("kiln-python-e2e")).args([
        "--junit",
        junit.to_str().unwrap(),
        "--passing",
        here.join("passing.txt").to_str().unwrap(),
        "--report",
        docs.to_str().unwrap(),
    ]));
    let stdout = String::from_utf8_lossy(&g.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&g.stderr));
    assert!(
        g.status.success(),
        "kiln-python-e2e failed ({}): a test of tests/python-e2e/passing.txt no longer passes\n{stdout}",
        g.status
    );
    assert!(stdout.contains(" passed, "), "{stdout}");
}
