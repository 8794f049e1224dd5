//! Checks of files and programs: tools kiln's components run, the container runtime, and paths kiln
//! writes that must not hold someone else's data.

use super::{Outcome, Severity};
use crate::facts::{Facts, Role};

/// How much each program matters, and why (kubeadm makes all of its FileExisting checks errors, but
/// its list is the upstream kubelet's; this one is what kiln's own components run).
pub(super) fn executable(f: &Facts, name: &str) -> Outcome {
    if f.executables.contains(name) {
        return None;
    }
    let (severity, why) = match name {
        // kiln-proxy installs host-gw routes to other nodes' pod CIDRs with `ip route`; reset removes
        // pod links and routes with it.
        "ip" => (Severity::Error, "kiln-proxy routes pod traffic with it"),
        // kiln-proxy programs every Service with `nft -f`.
        "nft" => (Severity::Error, "kiln-proxy programs Services with it"),
        // containerd starts every workload container with runc; the container-runtime phase stops
        // without it.
        "runc" => (Severity::Error, "containerd runs containers with it"),
        // The upstream kubelet mounts volumes with mount(8); kiln-kubelet and containerd use the mount
        // syscall, and only `kiln reset` calls umount (same package): a warning.
        "mount" => (
            Severity::Warning,
            "kiln reset unmounts with umount (util-linux)",
        ),
        // The upstream kubelet used nsenter for port-forward and containerized kubelets; nothing in kiln
        // runs it, but debugging a pod's network without it is hard: a warning.
        _ => (
            Severity::Warning,
            "handy for debugging pod network namespaces",
        ),
    };
    Some((severity, format!("{name} not found in system path ({why})")))
}

/// containerd present: its socket, or the binary kiln starts. An error on every host, not only on those
/// that run workloads: the control plane's static pods run as host processes (runtime handler
/// kiln-host) without it, but kiln init's container-runtime phase configures containerd on every host
/// (and DaemonSet pods tolerate the control-plane taint), and stops where it is missing.
pub(super) fn cri(f: &Facts, role: Role) -> Outcome {
    if f.cri_socket || f.executables.contains("containerd") {
        return None;
    }
    let who = if role.runs_workloads() {
        "workload pods run in it"
    } else {
        "kiln init configures it on every host"
    };
    Some((
        Severity::Error,
        format!("containerd not found (no /run/containerd/containerd.sock, no containerd in system path); {who} (Debian: apt-get install containerd runc containernetworking-plugins)"),
    ))
}

/// (major, minor, patch).
type Version = (u32, u32, u32);

/// containerd releases whose task deletion closes a container's output pipes before they are
/// drained (containerd's task.Delete called io.Close before io.Wait; fixed in 1.6.22 and 1.7.2 by
/// "task: don't close() io before cancel()"): a container that prints and exits at once can lose
/// its last output, so `kubectl logs` of a short Job pod comes back empty. Debian 12 ships 1.6.20.
const LOSSY_LOG_RANGES: &[(Version, Version)] = &[((1, 6, 0), (1, 6, 22)), ((1, 7, 0), (1, 7, 2))];

/// `1.6.20~ds1`, `v1.7.1`, `1.6.20-1`: (major, minor, patch).
fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let core = v.trim_start_matches('v');
    let mut parts = core.split('.');
    let num = |p: Option<&str>| -> Option<u32> {
        let p = p?;
        let end = p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len());
        p[..end].parse().ok()
    };
    Some((num(parts.next())?, num(parts.next())?, num(parts.next())?))
}

pub(super) fn containerd_version(f: &Facts, role: Role) -> Outcome {
    if !role.runs_workloads() {
        return None;
    }
    let text = f.containerd_version.as_deref()?;
    let v = parse_version(text)?;
    LOSSY_LOG_RANGES
        .iter()
        .find(|(lo, hi)| *lo <= v && v < *hi)
        .map(|(_, hi)| {
            (
                Severity::Warning,
                format!("containerd {text} can lose the last output of a container that exits right after writing it (`kubectl logs` of a short-lived pod may be empty); fixed in containerd {}.{}.{}", hi.0, hi.1, hi.2),
            )
        })
}

pub(super) fn store_dir(f: &Facts, _: Role) -> Outcome {
    (f.non_empty_dirs.contains("/var/lib/kiln/store") && !f.kiln_components.contains("kiln-store")).then(|| {
        (Severity::Error, "/var/lib/kiln/store is not empty and no kiln-store is configured here (run `kiln reset` first)".into())
    })
}

/// A manifest kiln would write that is already there and not kiln's (its header does not say "Rendered by
/// `kiln"): kiln would overwrite someone else's static pod. kiln's own manifests from an earlier run are
/// fine, so a re-run of init converges.
pub(super) fn manifest(f: &Facts, file: &str) -> Outcome {
    f.foreign_manifests.contains(file).then(|| {
        (
            Severity::Error,
            format!("/etc/kiln/manifests/{file} already exists and was not written by kiln"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::{good_facts, run_checks};
    use super::*;

    #[test]
    fn missing_tools_kiln_runs_are_errors_others_warnings() {
        let mut f = good_facts();
        for name in ["ip", "nft", "runc", "mount", "nsenter"] {
            assert_eq!(executable(&f, name), None);
        }
        f.executables.clear();
        f.cri_socket = true;
        let r = run_checks(&f, Role::Worker, &[]);
        let sev = |n: &str| r.iter().find(|x| x.check == n).map(|x| x.severity);
        assert_eq!(sev("FileExisting-ip"), Some(Severity::Error));
        assert_eq!(sev("FileExisting-nft"), Some(Severity::Error));
        assert_eq!(sev("FileExisting-runc"), Some(Severity::Error));
        assert_eq!(sev("FileExisting-mount"), Some(Severity::Warning));
        assert_eq!(sev("FileExisting-nsenter"), Some(Severity::Warning));
        assert_eq!(sev("CRI"), None, "the socket is enough");
    }

    #[test]
    fn containerd_releases_that_lose_output_are_a_warning() {
        let mut f = good_facts();
        for (v, warned) in [
            ("1.6.20~ds1", true),
            ("v1.7.1", true),
            ("1.6.22", false),
            ("1.7.24~ds1", false),
            ("2.0.0", false),
            ("1.5.9", false),
        ] {
            f.containerd_version = Some(v.into());
            let got = containerd_version(&f, Role::Worker);
            assert_eq!(got.is_some(), warned, "{v}: {got:?}");
            if let Some((s, m)) = got {
                assert_eq!(s, Severity::Warning);
                assert!(m.contains(v) && m.contains("kubectl logs"), "{m}");
            }
        }
        f.containerd_version = None;
        assert_eq!(containerd_version(&f, Role::Worker), None);
    }

    #[test]
    fn containerd_socket_or_binary() {
        let mut f = good_facts();
        f.cri_socket = false;
        assert_eq!(cri(&f, Role::Worker), None, "binary present");
        f.executables.remove("containerd");
        let (s, m) = cri(&f, Role::Worker).unwrap();
        assert_eq!(s, Severity::Error);
        assert!(m.contains("workload pods"), "{m}");
        assert_eq!(cri(&f, Role::Controller).unwrap().0, Severity::Error);
    }

    #[test]
    fn store_dir_in_use_by_someone_else() {
        let mut f = good_facts();
        f.non_empty_dirs.insert("/var/lib/kiln/store".into());
        assert_eq!(store_dir(&f, Role::Controller).unwrap().0, Severity::Error);
        f.kiln_components.insert("kiln-store".into());
        assert_eq!(store_dir(&f, Role::Controller), None);
    }

    #[test]
    fn foreign_manifests_are_errors_and_kilns_own_are_not() {
        let mut f = good_facts();
        // kiln's own, from an earlier run: a re-run converges.
        f.kiln_components
            .extend(["kiln-apiserver".to_string(), "kiln-proxy".to_string()]);
        assert_eq!(run_checks(&f, Role::Controller, &[]), vec![]);
        f.foreign_manifests.insert("kiln-apiserver.yaml".into());
        let r = run_checks(&f, Role::Controller, &[]);
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0].check,
            "FileAvailable--etc-kiln-manifests-kiln-apiserver.yaml"
        );
        assert_eq!(r[0].severity, Severity::Error);
        // Workers never get the control plane's manifests.
        assert_eq!(run_checks(&f, Role::Worker, &[]), vec![]);
        assert_eq!(manifest(&f, "kiln-proxy.yaml"), None);
    }
}
