//! What `kiln certs renew` can renew, as data: every leaf of the certificate tree (per controller) and the
//! kubeconfigs whose client certificates kiln issued. Also which state-directory files each static pod
//! reads, so its manifest carries a hash of them (`kiln.dev/pki-hash`) and changes when they do — the
//! kubelet restarts a static pod when its manifest changes, which is how renewed certificates get loaded.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::CertsError;

/// Where a renewable certificate lives in the operator's state directory, and where it goes on hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A leaf of `kiln_pki::CERT_TREE`: `<state>/pki/<controller>/<base>.{crt,key}` →
    /// `/etc/kiln/pki/<base>.{crt,key}` on that controller.
    Leaf(&'static kiln_pki::CertSpec),
    /// `<state>/kubeconfigs/<controller>/<file>` → `/etc/kiln/<file>` on that controller.
    ControllerKubeconfig(&'static str),
    /// `<state>/<file>` (one for the cluster) → `/etc/kiln/<file>` on the hosts that use it.
    ClusterKubeconfig {
        file: &'static str,
        /// Every host (kiln-proxy runs on all nodes), or only controllers (admin.conf).
        all_hosts: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewable {
    pub name: &'static str,
    pub kind: Kind,
}

/// Kubeconfigs kiln renews. The kubelet's kubelet.conf is not among them: kubelets rotate their own
/// client certificate (CSR at 80 % of its life), as with kubeadm.
const KUBECONFIGS: &[Renewable] = &[
    Renewable {
        name: "admin.conf",
        kind: Kind::ClusterKubeconfig {
            file: "admin.conf",
            all_hosts: false,
        },
    },
    Renewable {
        name: "scheduler.conf",
        kind: Kind::ControllerKubeconfig("scheduler.conf"),
    },
    Renewable {
        name: "controller-manager.conf",
        kind: Kind::ControllerKubeconfig("controller-manager.conf"),
    },
    Renewable {
        name: "proxy.conf",
        kind: Kind::ClusterKubeconfig {
            file: "proxy.conf",
            all_hosts: true,
        },
    },
    Renewable {
        name: "dns.conf",
        kind: Kind::ClusterKubeconfig {
            file: "dns.conf",
            all_hosts: true,
        },
    },
];

/// Every renewable name, in the order renewals run: tree leaves, then kubeconfigs. CAs are not renewable.
pub fn renewables() -> Vec<Renewable> {
    kiln_pki::CERT_TREE
        .iter()
        .filter(|s| !s.is_ca())
        .map(|s| Renewable {
            name: s.name,
            kind: Kind::Leaf(s),
        })
        .chain(KUBECONFIGS.iter().copied())
        .collect()
}

/// `all`, or names (deduplicated, in catalogue order). An unknown name is an error that lists the valid ones.
pub fn resolve(names: &[String]) -> Result<Vec<Renewable>, CertsError> {
    let all = renewables();
    if names.is_empty() {
        return Err(CertsError::NoName {
            valid: valid_names(&all),
        });
    }
    if names.iter().any(|n| n == "all") {
        return Ok(all);
    }
    for n in names {
        if !all.iter().any(|r| r.name == n) {
            let hint = if kiln_pki::spec(n).is_some_and(|s| s.is_ca()) {
                " (a CA is not renewed: everything it issued would stop verifying)"
            } else if n == "kubelet.conf" {
                " (kubelets rotate their own client certificates)"
            } else {
                ""
            };
            return Err(CertsError::UnknownName {
                name: n.clone(),
                hint,
                valid: valid_names(&all),
            });
        }
    }
    Ok(all
        .into_iter()
        .filter(|r| names.iter().any(|n| n == r.name))
        .collect())
}

fn valid_names(all: &[Renewable]) -> String {
    std::iter::once("all")
        .chain(all.iter().map(|r| r.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The annotation a static pod's manifest carries: a hash of the certificates and kubeconfigs it reads.
pub const PKI_HASH_ANNOTATION: &str = "kiln.dev/pki-hash";

/// The state-directory files (relative to it; `{host}` is the node) each kiln static pod reads.
/// Certificates and kubeconfigs only: a renewal always changes the certificate along with its key.
pub const POD_INPUTS: &[(&str, &[&str])] = &[
    (
        "kiln-store.yaml",
        &[
            "pki/{host}/store/ca.crt",
            "pki/{host}/store/server.crt",
            "pki/{host}/store/peer.crt",
        ],
    ),
    (
        "kiln-apiserver.yaml",
        &[
            "pki/{host}/ca.crt",
            "pki/{host}/apiserver.crt",
            "pki/{host}/apiserver-kubelet-client.crt",
            "pki/{host}/apiserver-store-client.crt",
            "pki/{host}/store/ca.crt",
            "pki/{host}/front-proxy-ca.crt",
            "pki/{host}/front-proxy-client.crt",
            "pki/{host}/sa.pub",
        ],
    ),
    (
        "kiln-scheduler.yaml",
        &["kubeconfigs/{host}/scheduler.conf"],
    ),
    (
        "kiln-controller-manager.yaml",
        &[
            "kubeconfigs/{host}/controller-manager.conf",
            "pki/{host}/ca.crt",
        ],
    ),
    ("kiln-proxy.yaml", &["proxy.conf"]),
    ("kiln-dns.yaml", &["dns.conf"]),
];

/// The template variable holding a manifest's hash: `pki_hash_store` for kiln-store.yaml, ….
pub fn hash_variable(manifest: &str) -> String {
    let stem = manifest
        .trim_end_matches(".yaml")
        .trim_start_matches("kiln-")
        .replace('-', "_");
    format!("pki_hash_{stem}")
}

/// sha256 (first 16 hex digits) over the names and contents of `files` under `state_dir`; "" when none
/// exists yet (then the manifest carries no annotation at all).
pub fn files_hash(state_dir: &Path, files: &[PathBuf]) -> String {
    let mut h = Sha256::new();
    let mut any = false;
    for f in files {
        if let Ok(bytes) = std::fs::read(state_dir.join(f)) {
            any = true;
            h.update(f.to_string_lossy().as_bytes());
            h.update([0]);
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(&bytes);
        }
    }
    if !any {
        return String::new();
    }
    hex::encode(h.finalize())[..16].to_string()
}

/// The hash of one manifest's inputs on `host`.
pub fn pod_hash(state_dir: &Path, host: &str, manifest: &str) -> String {
    let files: Vec<PathBuf> = POD_INPUTS
        .iter()
        .find(|(m, _)| *m == manifest)
        .map(|(_, fs)| {
            fs.iter()
                .map(|f| PathBuf::from(f.replace("{host}", host)))
                .collect()
        })
        .unwrap_or_default();
    files_hash(state_dir, &files)
}

/// Put every manifest's hash into a template context (`pki_hash_store`, `pki_hash_apiserver`, …).
pub fn insert_pod_hashes(c: &mut tera::Context, state_dir: &Path, host: &str) {
    for (manifest, _) in POD_INPUTS {
        c.insert(
            hash_variable(manifest),
            &pod_hash(state_dir, host, manifest),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_names_every_leaf_and_the_kubeconfigs_but_no_ca() {
        let names: Vec<&str> = resolve(&["all".into()])
            .unwrap()
            .iter()
            .map(|r| r.name)
            .collect();
        for want in [
            "apiserver",
            "apiserver-kubelet-client",
            "store-server",
            "store-peer",
            "store-healthcheck-client",
            "apiserver-store-client",
            "front-proxy-client",
            "admin.conf",
            "scheduler.conf",
            "controller-manager.conf",
            "proxy.conf",
            "dns.conf",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(!names.contains(&"ca") && !names.contains(&"store-ca"));
        assert!(!names.contains(&"front-proxy-ca"));
    }

    #[test]
    fn unknown_names_are_refused_with_the_valid_ones() {
        let e = resolve(&["apiserver".into(), "nope".into()]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("\"nope\""), "{text}");
        assert!(
            text.contains("all, apiserver, apiserver-kubelet-client"),
            "{text}"
        );
        let e = resolve(&["ca".into()]).unwrap_err().to_string();
        assert!(e.contains("a CA is not renewed"), "{e}");
        assert!(resolve(&[]).is_err());
    }

    #[test]
    fn names_resolve_once_in_catalogue_order() {
        let r = resolve(&["admin.conf".into(), "apiserver".into(), "admin.conf".into()]).unwrap();
        let names: Vec<&str> = r.iter().map(|r| r.name).collect();
        assert_eq!(names, ["apiserver", "admin.conf"]);
    }

    #[test]
    fn a_pod_hash_follows_its_inputs_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(pod_hash(d, "h1", "kiln-apiserver.yaml"), "");
        std::fs::create_dir_all(d.join("pki/h1")).unwrap();
        std::fs::write(d.join("pki/h1/apiserver.crt"), "one").unwrap();
        std::fs::create_dir_all(d.join("kubeconfigs/h1")).unwrap();
        std::fs::write(d.join("kubeconfigs/h1/scheduler.conf"), "s").unwrap();
        let api = pod_hash(d, "h1", "kiln-apiserver.yaml");
        let sched = pod_hash(d, "h1", "kiln-scheduler.yaml");
        assert_eq!(api.len(), 16);
        std::fs::write(d.join("pki/h1/apiserver.crt"), "two").unwrap();
        assert_ne!(pod_hash(d, "h1", "kiln-apiserver.yaml"), api);
        assert_eq!(pod_hash(d, "h1", "kiln-scheduler.yaml"), sched);
        // Another host's files are not this host's inputs.
        assert_eq!(pod_hash(d, "h2", "kiln-apiserver.yaml"), "");
        assert_eq!(
            hash_variable("kiln-controller-manager.yaml"),
            "pki_hash_controller_manager"
        );
    }
}
