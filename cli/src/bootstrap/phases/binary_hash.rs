//! The sha256 of each component binary this kiln pushes, rendered into what runs it: the static pod
//! manifests (annotation `kiln.dev/binary-sha256`) and the kubelet's unit or supervisor script (a
//! comment). A binary is replaced by a rename, so a running process keeps the old one; the kubelet
//! restarts a static pod only when its manifest changes, and `kubelet-start` restarts the kubelet only
//! when its unit or script changes. With the hash in them, a new binary changes exactly the files of
//! the processes that run it, so a re-run of `kiln init` (or `kiln apply`) restarts those and nothing
//! else — the same path as a renewed certificate (`kiln.dev/pki-hash`).

use super::{BootstrapError, Context, CONTROL_PLANE_MANIFESTS, MANIFESTS};
use crate::bootstrap::host_files::{staged, Install};

/// The static pods kiln renders and the binary each runs: `<manifest stem>` → `kiln-<stem>`.
const POD_BINARIES: &[(&str, &str)] = &[
    ("store", "kiln-store"),
    ("apiserver", "kiln-apiserver"),
    ("scheduler", "kiln-scheduler"),
    ("controller_manager", "kiln-controller-manager"),
    ("proxy", "kiln-proxy"),
    ("dns", "kiln-dns"),
];

/// The local binary's sha256, "" when it is not there (then nothing is rendered for it: a dry run or
/// a test without binaries).
pub fn binary_sha256(ctx: &Context, binary: &str) -> String {
    ctx.sha256_file(&ctx.bin_dir.join(binary))
        .unwrap_or_default()
}

/// `binary_sha256_<stem>` for every static pod, and `kubelet_sha256`, into a template context.
pub fn insert_binary_hashes(ctx: &Context, c: &mut tera::Context) {
    for (stem, binary) in POD_BINARIES {
        c.insert(format!("binary_sha256_{stem}"), &binary_sha256(ctx, binary));
    }
    c.insert("kubelet_sha256", &binary_sha256(ctx, "kiln-kubelet"));
}

/// The static pod manifests of `host` as init's phases render them (`store-start` and
/// `control-plane` on a controller, the store's only where kiln-store runs; `proxy` and `dns` on
/// every host): each carries its binary's sha256. `kiln upgrade apply` installs these after a binary
/// swap, so the host ends with the files a re-run of `init` would write and that re-run restarts
/// nothing.
pub(crate) fn static_pod_files(ctx: &Context, host: &str) -> Result<Vec<Install>, BootstrapError> {
    let manifest = |name: &str, c: &tera::Context| {
        staged(ctx, host, name, c, format!("{MANIFESTS}/{name}"), 0o600)
    };
    let mut files = vec![];
    if ctx.host(host).is_controller() {
        let c = super::push::control_plane_context(ctx, host);
        let external = ctx.cluster.config.spec.store.external.is_some();
        for m in CONTROL_PLANE_MANIFESTS {
            if *m == super::push::STORE_MANIFEST && external {
                continue;
            }
            files.push(manifest(m, &c)?);
        }
    }
    files.push(manifest(
        "kiln-proxy.yaml",
        &super::push::proxy_context(ctx, host),
    )?);
    files.push(manifest(
        "kiln-dns.yaml",
        &super::dns::dns_context(ctx, host),
    )?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use crate::bootstrap::golden_tests::golden_context;
    use crate::bootstrap::phases::push::control_plane_context;
    use crate::bootstrap::render::render;

    #[test]
    fn a_new_binary_changes_only_the_manifest_that_runs_it() {
        let (_dir, ctx) = golden_context();
        let before: Vec<String> = ["kiln-scheduler.yaml", "kiln-apiserver.yaml"]
            .iter()
            .map(|m| render(m, &control_plane_context(&ctx, "host1")).unwrap())
            .collect();
        // A rebuilt kiln-scheduler (other content, so another hash).
        std::fs::write(ctx.bin_dir.join("kiln-scheduler"), b"scheduler, rebuilt").unwrap();
        let after: Vec<String> = ["kiln-scheduler.yaml", "kiln-apiserver.yaml"]
            .iter()
            .map(|m| render(m, &control_plane_context(&ctx, "host1")).unwrap())
            .collect();
        assert_ne!(before[0], after[0], "the scheduler's manifest must change");
        assert_eq!(before[1], after[1], "the API server's must not");
        let sum = super::binary_sha256(&ctx, "kiln-scheduler");
        assert_eq!(sum.len(), 64);
        assert!(
            after[0].contains(&format!("kiln.dev/binary-sha256: \"{sum}\"")),
            "{}",
            after[0]
        );
    }

    #[test]
    fn a_host_gets_the_manifests_of_its_role() {
        let (_dir, ctx) = golden_context();
        let remote = |host: &str| -> Vec<String> {
            super::static_pod_files(&ctx, host)
                .unwrap()
                .into_iter()
                .map(|f| f.remote)
                .collect()
        };
        assert_eq!(
            remote("host1"),
            [
                "/etc/kiln/manifests/kiln-store.yaml",
                "/etc/kiln/manifests/kiln-apiserver.yaml",
                "/etc/kiln/manifests/kiln-scheduler.yaml",
                "/etc/kiln/manifests/kiln-controller-manager.yaml",
                "/etc/kiln/manifests/kiln-proxy.yaml",
                "/etc/kiln/manifests/kiln-dns.yaml",
            ]
        );
        assert_eq!(
            remote("host2"),
            [
                "/etc/kiln/manifests/kiln-proxy.yaml",
                "/etc/kiln/manifests/kiln-dns.yaml"
            ]
        );
        // What upgrade installs is what init's phases render: the same bytes.
        let files = super::static_pod_files(&ctx, "host1").unwrap();
        let scheduler = std::fs::read_to_string(&files[2].local).unwrap();
        assert_eq!(
            scheduler,
            render("kiln-scheduler.yaml", &control_plane_context(&ctx, "host1")).unwrap()
        );
        assert!(scheduler.contains("kiln.dev/binary-sha256"), "{scheduler}");
    }
}
