//! spec.registry.mirrorOf: containerd's per-registry hosts.toml (certs.d/<upstream>/hosts.toml) that sends
//! pulls of an upstream registry (`docker.io`) to the cluster's mirror first, with the upstream as fallback.
//! This is how an air-gapped cluster (or one behind a pull-through cache) runs manifests that name public
//! images (`busybox`, `nginx:1.15.4`) unchanged: the mirror holds them under the same repository path.

use super::pki::pki_err;
use crate::bootstrap::host_files::Install;
use crate::bootstrap::render::render;
use crate::bootstrap::{BootstrapError, Context};
use crate::config::Registry;

/// Where containerd pulls an upstream from when no mirror has the image: Docker Hub's name is not its
/// registry host (containerd's own default for docker.io).
fn server(upstream: &str) -> String {
    match upstream {
        "docker.io" => "https://registry-1.docker.io".to_string(),
        other => format!("https://{other}"),
    }
}

/// One rendered hosts.toml per upstream, each staged under a name of its own.
pub(super) fn mirror_files(
    ctx: &Context,
    host: &str,
    reg: &Registry,
) -> Result<Vec<Install>, BootstrapError> {
    let staging = ctx.staging_dir(host);
    let mut out = Vec::new();
    for upstream in &reg.mirror_of {
        let mut c = tera::Context::new();
        c.insert("upstream", upstream);
        c.insert("server", &server(upstream));
        c.insert("registry", &reg.mirror);
        c.insert("scheme", if reg.insecure { "http" } else { "https" });
        let text = render("registry-mirror-hosts.toml", &c)?;
        std::fs::create_dir_all(&staging).map_err(|source| BootstrapError::Io {
            what: "creating",
            path: staging.clone(),
            source,
        })?;
        // `:` (a port) is fine in a file name; validation keeps `/` out of upstream names.
        let local = staging.join(format!("registry-mirror-{upstream}.toml"));
        kiln_pki::files::write_atomic(&local, text.as_bytes(), 0o600).map_err(pki_err)?;
        out.push(Install {
            local,
            remote: format!("/etc/containerd/certs.d/{upstream}/hosts.toml"),
            mode: 0o644,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_falls_back_to_its_registry_host() {
        assert_eq!(server("docker.io"), "https://registry-1.docker.io");
        assert_eq!(server("registry.k8s.io"), "https://registry.k8s.io");
        let mut c = tera::Context::new();
        c.insert("upstream", "docker.io");
        c.insert("server", &server("docker.io"));
        c.insert("registry", "10.250.0.1:5000");
        c.insert("scheme", "http");
        let t = render("registry-mirror-hosts.toml", &c).unwrap();
        assert!(t.starts_with(super::super::runtime::MANAGED), "{t}");
        assert!(
            t.contains("server = \"https://registry-1.docker.io\"\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "[host.\"http://10.250.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]"
            ),
            "{t}"
        );
    }
}
