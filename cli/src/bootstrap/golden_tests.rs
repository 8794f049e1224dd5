//! Golden tests: every file kiln renders for a host, from a fixed cluster.yaml, compared byte for byte
//! with `cli/tests/golden/`. A template change shows up as a reviewable diff of real output.
//! Regenerate with `KILN_UPDATE_GOLDEN=1 cargo test -p kiln --lib golden`.

use std::path::PathBuf;

use super::phases::push::{control_plane_context, kubelet_command, proxy_context};
use super::phases::runtime::containerd_context;
use super::render::render;
use super::{Context, Options};

const CLUSTER: &str = "\
apiVersion: kiln.dev/v1alpha1
kind: Cluster
metadata:
  name: golden
spec:
  controlPlaneEndpoint: 10.250.0.11:6443
  hosts:
    - name: host1
      address: 10.250.0.11
      role: controller
    - name: host2
      address: 10.250.0.12
      role: worker
  registry:
    mirror: 10.250.0.1:5000
    insecure: true
  images:
    pause: 10.250.0.1:5000/kiln/pause:1
";

fn golden_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/golden")
}

fn check(name: &str, rendered: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("KILN_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, rendered).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (KILN_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert!(
        want == rendered,
        "{name} differs from {} (KILN_UPDATE_GOLDEN=1 to accept):\n{rendered}",
        path.display()
    );
}

/// A context over the golden cluster.yaml (host1 controller, host2 worker) in a temp dir that lives as
/// long as the returned guard.
pub(crate) fn golden_context() -> (tempfile::TempDir, Context) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, CLUSTER).unwrap();
    // Fixed stand-ins for the binaries, so the rendered binary hashes are stable.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for b in super::phases::CONTROL_PLANE_BINARIES {
        std::fs::write(bin.join(b), b).unwrap();
    }
    let opts = Options {
        bin_dir: Some(bin),
        ..Options::default()
    };
    let ctx = Context::new(crate::config::load(&file).unwrap(), opts).unwrap();
    (dir, ctx)
}

#[test]
fn rendered_files_match_the_golden_copies() {
    let (_dir, ctx) = golden_context();
    let cp = control_plane_context(&ctx, "host1");
    for m in super::phases::CONTROL_PLANE_MANIFESTS {
        check(m, &render(m, &cp).unwrap());
    }
    check(
        "kiln-proxy.yaml",
        &render("kiln-proxy.yaml", &proxy_context(&ctx, "host2")).unwrap(),
    );
    check(
        "kiln-dns.yaml",
        &render(
            "kiln-dns.yaml",
            &super::phases::dns::dns_context(&ctx, "host2"),
        )
        .unwrap(),
    );
    check(
        "containerd.toml",
        &render("containerd.toml", &containerd_context(&ctx, "/usr/lib/cni")).unwrap(),
    );
    let mut k = tera::Context::new();
    k.insert("kubelet_command", &kubelet_command(&ctx, "host2").unwrap());
    super::phases::binary_hash::insert_binary_hashes(&ctx, &mut k);
    k.insert(
        "kubelet_config_sha256",
        &super::phases::kubelet_config::config_sha256(&ctx),
    );
    check(
        "kubelet-config.yaml",
        &super::phases::kubelet_config::config_text(&ctx),
    );
    check(
        "kiln-kubelet.service",
        &render("kiln-kubelet.service", &k).unwrap(),
    );
    check(
        "kubelet-supervisor.sh",
        &render("kubelet-supervisor.sh", &k).unwrap(),
    );
}
