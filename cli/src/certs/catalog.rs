//! What `kiln certs renew` can renew, as data: every leaf of the certificate tree (per controller) and the
//! kubeconfigs whose client certificates kiln issued. Which state-directory files each static pod reads
//! (and the manifest hash that reloads them) is [`crate::bootstrap::pki_hash`].

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
}
