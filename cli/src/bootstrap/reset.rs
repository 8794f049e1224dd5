//! `kiln reset`: undo everything kiln did on a host — static pods, the kubelet, files, data — and verify.
//! Processes are stopped by the PIDs kiln recorded or by their executable being one of kiln's own
//! binaries in /usr/local/bin: never anything else.

use crate::transport::Transport;

use super::phases::runtime::MANAGED;
use super::phases::{Outcome, MANIFESTS, REMOTE_BIN, SUPERVISOR_PID, UNIT};
use super::BootstrapError;

/// What kiln writes on a host; reset removes exactly these, and verify-clean checks them.
const PATHS: &[&str] = &[
    "/etc/kiln",
    "/var/lib/kiln",
    "/var/log/kiln",
    "/var/log/pods",
    "/run/kiln",
    UNIT,
    // `kiln snapshot schedule` on hosts with systemd
    "/etc/systemd/system/kiln-snapshot.service",
    "/etc/systemd/system/kiln-snapshot.timer",
    "/usr/local/bin/kiln-store",
    "/usr/local/bin/kiln-apiserver",
    "/usr/local/bin/kiln-kubelet",
    "/usr/local/bin/kiln-scheduler",
    "/usr/local/bin/kiln-controller-manager",
    "/usr/local/bin/kiln-proxy",
    "/usr/local/bin/kiln-dns",
];

/// Where uploads land outside the directories reset removes whole; an upload cut off hard (sshd killed,
/// host powered off) can leave its temp file (`.<name>.kiln-XXXXXX`, see the transport) there.
const UPLOAD_DIRS: &[&str] = &[
    "/usr/local/bin",
    "/etc",
    "/etc/systemd/system",
    "/etc/containerd",
    "/etc/containerd/certs.d",
];

/// Leftover upload temp files, one per line.
fn upload_temps_script() -> String {
    format!(
        "find {} -maxdepth 2 -name '.*.kiln-??????' 2>/dev/null; true",
        UPLOAD_DIRS.join(" ")
    )
}

/// Paths of kiln that exist, one per line; an empty mount point counts as absent (it was there before).
/// `local_path`: a local-path directory outside [`PATHS`] ([`local_path_dir`]), checked the same way.
fn present_script(local_path: Option<&str>) -> String {
    let mut paths = PATHS.join(" ");
    if let Some(d) = local_path {
        paths.push_str(&format!(" '{d}'"));
    }
    format!(
        "for p in {paths}; do [ -e $p ] || continue; if mountpoint -q $p 2>/dev/null && [ -z \"$(ls -A $p)\" ]; then continue; fi; echo $p; done; \
         grep -qs '^{MANAGED}' /etc/rc.local && echo /etc/rc.local; {}",
        upload_temps_script()
    )
}

/// The local-path provisioner's directory when cluster.yaml moved it out of /var/lib/kiln (which
/// reset removes whole). Validation keeps it a plain absolute path, so it is safe in a script.
pub(crate) fn local_path_dir(cluster: &crate::config::ClusterConfig) -> Option<String> {
    let dir = &cluster.spec.storage.local_path.dir;
    let covered = PATHS
        .iter()
        .any(|p| p.starts_with('/') && dir.starts_with(p));
    (!covered).then(|| dir.display().to_string())
}

/// Removes what the provisioner made in a custom local-path directory — its `pvc-*` volume
/// directories — then the directory itself if nothing else is in it (it may hold the operator's
/// files, or be a mount point: those stay, and the residue scan names the directory).
fn local_path_remove_script(dir: &str) -> String {
    format!(
        "if [ -d '{dir}' ]; then find '{dir}' -mindepth 1 -maxdepth 1 -name 'pvc-*' -exec rm -rf {{}} +; \
         mountpoint -q '{dir}' 2>/dev/null || rmdir '{dir}' 2>/dev/null; fi; true"
    )
}

/// PIDs (one per line) of processes running one of kiln's binaries, found through /proc/PID/exe.
fn kiln_pids_script() -> String {
    format!(
        "for p in /proc/[0-9]*; do e=$(readlink $p/exe 2>/dev/null) || continue; \
         case \"$e\" in {REMOTE_BIN}/kiln-*) echo \"${{p#/proc/}} $e\";; esac; done"
    )
}

/// Remove the manifests so the kubelet stops the control plane gracefully (like kubeadm reset).
pub(super) async fn stop_static_pods(t: &dyn Transport) -> Result<Outcome, BootstrapError> {
    let had = t
        .run(&format!("ls {MANIFESTS} 2>/dev/null | wc -l"))
        .await?;
    if had.trim() == "0" {
        return Ok(Outcome::Skipped("no static pods".into()));
    }
    t.run(&format!("rm -f {MANIFESTS}/*")).await?;
    // Wait (bounded) for the kubelet to stop them; what is left is killed in stop-kubelet.
    let script = format!(
        "for i in $(seq 60); do n=0; for p in /proc/[0-9]*; do e=$(readlink $p/exe 2>/dev/null) || continue; \
         case \"$e\" in {REMOTE_BIN}/kiln-kubelet) ;; {REMOTE_BIN}/kiln-*) n=$((n+1));; esac; done; \
         [ $n = 0 ] && exit 0; sleep 0.5; done; exit 1"
    );
    let stopped = t.exec(&script, None).await?.success();
    Ok(Outcome::Done(if stopped {
        "static pods stopped by the kubelet".into()
    } else {
        "manifests removed; leftovers are killed with the kubelet".into()
    }))
}

pub async fn stop_supervisor(t: &dyn Transport) -> Result<(), BootstrapError> {
    // The supervisor is the leader of its own session (setsid): signal its whole process group.
    t.run(&format!(
        "p=$(cat {SUPERVISOR_PID} 2>/dev/null) || exit 0; kill -TERM -- -$p 2>/dev/null; \
         for i in $(seq 50); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; kill -KILL -- -$p 2>/dev/null; \
         rm -f {SUPERVISOR_PID}; true"
    ))
    .await?;
    Ok(())
}

pub(super) async fn stop_kubelet(t: &dyn Transport) -> Result<Outcome, BootstrapError> {
    let mut did = vec![];
    if t.probe(&format!("test -f {UNIT}"), None).await?.success() {
        t.run("systemctl disable --now kiln-kubelet 2>/dev/null; true")
            .await?;
        did.push("systemd unit stopped");
    }
    // A timer for an interval, the loop's service for a cron schedule.
    if t.probe("test -f /etc/systemd/system/kiln-snapshot.timer -o -f /etc/systemd/system/kiln-snapshot.service", None)
        .await?
        .success()
    {
        t.run(
            "systemctl disable --now kiln-snapshot.timer kiln-snapshot.service 2>/dev/null; true",
        )
        .await?;
        did.push("snapshot timer stopped");
    }
    if t.probe(&format!("test -f {SUPERVISOR_PID}"), None)
        .await?
        .success()
    {
        stop_supervisor(t).await?;
        did.push("supervisor stopped");
    }
    // Anything still running one of kiln's binaries was started by kiln: TERM, then KILL.
    let pids = t.run(&kiln_pids_script()).await?;
    let pids: Vec<&str> = pids
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    if !pids.is_empty() {
        let list = pids.join(" ");
        t.run(&format!(
            "kill -TERM {list} 2>/dev/null; for i in $(seq 50); do alive=0; for p in {list}; do kill -0 $p 2>/dev/null && alive=1; done; \
             [ $alive = 0 ] && break; sleep 0.1; done; kill -KILL {list} 2>/dev/null; true"
        ))
        .await?;
        did.push("kiln processes stopped");
    }
    Ok(if did.is_empty() {
        Outcome::Skipped("nothing running".into())
    } else {
        Outcome::Done(did.join(", "))
    })
}

/// kiln-proxy leaves its rules and routes in place when it stops (like kube-proxy); remove them: the
/// nftables table `kiln` and the routes with kiln's protocol number. Nothing else is touched.
const NETWORK_RESIDUE: &str =
    "nft list table ip kiln >/dev/null 2>&1 && echo 'nftables table ip kiln'; \
     ip route show proto 252 | sed 's/^/route /'; true";

pub(super) async fn cleanup_network(t: &dyn Transport) -> Result<Outcome, BootstrapError> {
    let found = t.run(NETWORK_RESIDUE).await?;
    if found.trim().is_empty() {
        return Ok(Outcome::Skipped("no rules or routes".into()));
    }
    t.run("nft delete table ip kiln 2>/dev/null; ip route flush proto 252; true")
        .await?;
    Ok(Outcome::Done(format!(
        "removed {}",
        found.lines().collect::<Vec<_>>().join(", ")
    )))
}

pub(super) async fn remove_files(
    t: &dyn Transport,
    local_path: Option<&str>,
) -> Result<Outcome, BootstrapError> {
    let present = t.run(&present_script(local_path)).await?;
    if present.trim().is_empty() {
        return Ok(Outcome::Skipped("nothing to remove".into()));
    }
    // A data dir may be a mount point (its own disk, or a lab host's private dir): empty it, keep it.
    t.run(&format!(
        "for p in {}; do if mountpoint -q $p 2>/dev/null; then find $p -mindepth 1 -delete; else rm -rf $p; fi; done; \
         grep -qs '^{MANAGED}' /etc/rc.local && rm -f /etc/rc.local; \
         {} | while read -r f; do rm -f -- \"$f\"; done; true",
        PATHS.join(" "),
        upload_temps_script()
    ))
    .await?;
    if let Some(d) = local_path {
        t.run(&local_path_remove_script(d)).await?;
    }
    if t.probe("test -d /run/systemd/system", None)
        .await?
        .success()
    {
        // A kiln unit that failed (e.g. a snapshot run) stays listed as "not-found failed" after its file
        // is gone until its failed state is reset: a clean host lists no kiln unit at all.
        t.run("systemctl daemon-reload && systemctl reset-failed 'kiln-*'")
            .await?;
    }
    Ok(Outcome::Done(format!(
        "removed {}",
        present.split_whitespace().collect::<Vec<_>>().join(", ")
    )))
}

/// The residue scan: no kiln file, directory or process is left.
pub(super) async fn verify_clean(
    t: &dyn Transport,
    local_path: Option<&str>,
) -> Result<Outcome, BootstrapError> {
    let files = t.run(&present_script(local_path)).await?;
    let procs = t.run(&kiln_pids_script()).await?;
    let network = t.run(NETWORK_RESIDUE).await?;
    let workloads = t.run(super::phases::runtime::WORKLOAD_RESIDUE).await?;
    let residue: Vec<String> = files
        .lines()
        .map(str::to_string)
        .map(|l| format!("file {l}"))
        .chain(procs.lines().map(|l| format!("process {l}")))
        .chain(network.lines().map(str::to_string))
        .chain(workloads.lines().map(str::to_string))
        .collect();
    if residue.is_empty() {
        Ok(Outcome::Done("clean".into()))
    } else {
        Err(BootstrapError::Residue {
            host: t.host().to_string(),
            residue: residue.join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(dir: &str) -> crate::config::ClusterConfig {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/config/fixtures/minimal.yaml"),
        )
        .unwrap();
        let mut c = crate::config::parse(&text, "minimal.yaml").unwrap();
        c.spec.storage.local_path.dir = dir.into();
        c
    }

    #[test]
    fn a_local_path_dir_under_var_lib_kiln_goes_with_it_and_another_is_cleaned_on_its_own() {
        assert_eq!(local_path_dir(&cluster("/var/lib/kiln/local-path")), None);
        assert_eq!(
            local_path_dir(&cluster("/srv/kiln-volumes")).as_deref(),
            Some("/srv/kiln-volumes")
        );
        // Not fooled by a shared prefix that is not a parent directory.
        assert_eq!(
            local_path_dir(&cluster("/var/lib/kilnish")).as_deref(),
            Some("/var/lib/kilnish")
        );
        let script = local_path_remove_script("/srv/kiln-volumes");
        assert!(
            script.contains("-name 'pvc-*' -exec rm -rf {} +"),
            "{script}"
        );
        assert!(script.contains("rmdir '/srv/kiln-volumes'"), "{script}");
        assert!(
            !script.contains("rm -rf '/srv"),
            "never the whole directory: {script}"
        );
        assert!(present_script(Some("/srv/kiln-volumes")).contains(" '/srv/kiln-volumes'; do"));
    }
}
