//! The real [`Actions`] of `kiln upgrade apply`: host commands through the transport, cordon/drain
//! and the gates' API reads through kube-rs with admin.conf, the store gate through the member client.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::drain;
use super::plan::{Step, Target};
use super::stamp::Stamp;
use super::steps::{Action, Actions, Gate};
use crate::bootstrap::host_files::{install_files, Install};
use crate::bootstrap::phases::{
    binary_hash, member_client::MemberClient, REMOTE_BIN, SUPERVISOR, SUPERVISOR_PID, UNIT,
};
use crate::bootstrap::Context;
use crate::transport::{shell_quote, Payload, Transport};

/// Present on a host while its upgrade is under way: a re-run resumes that host even when its
/// binaries are already the target's (the restart or the gates may not have happened).
pub const MARKER: &str = "/var/lib/kiln/upgrade-in-progress";

/// Where the host's manifests and kubelet unit are kept as they were before the swap (under their
/// own paths), for a rollback; outside the manifest directory, which the kubelet reads whole.
pub const KEPT_FILES: &str = "/var/lib/kiln/upgrade-prev";

pub struct HostActions<'a> {
    pub ctx: &'a Context,
    pub client: kube::Client,
    pub targets: &'a BTreeMap<String, Target>,
    /// Evict pods no controller manages too (`--force`).
    pub force: bool,
}

/// The leader leases whose holder must be alive before a worker is drained.
const LEADER_LEASES: &[&str] = &["kube-controller-manager", "kube-scheduler"];

/// Restart the kubelet: systemd's unit (its file may have changed: reloaded first), else TERM the
/// supervisor's kubelet (it stops its static pods first) and wait for the supervisor to start the
/// binary now installed.
fn restart_script() -> String {
    format!(
        "if [ -d /run/systemd/system ] && [ -f {UNIT} ]; then systemctl daemon-reload; exec systemctl restart kiln-kubelet; fi\n\
         sup=$(cat {SUPERVISOR_PID} 2>/dev/null)\n\
         if ! kill -0 \"$sup\" 2>/dev/null; then setsid /bin/sh {SUPERVISOR} </dev/null >/dev/null 2>&1 & exit 0; fi\n\
         old=$(pgrep -P \"$sup\" -x kiln-kubelet)\n\
         if [ -n \"$old\" ]; then kill -TERM $old\n\
           for i in $(seq 900); do kill -0 $old 2>/dev/null || break; sleep 0.1; done\n\
           kill -KILL $old 2>/dev/null; fi\n\
         for i in $(seq 150); do new=$(pgrep -P \"$sup\" -x kiln-kubelet); \
         [ -n \"$new\" ] && [ \"$new\" != \"$old\" ] && exit 0; sleep 0.1; done\n\
         echo 'the kubelet did not start again' >&2; exit 1"
    )
}

/// Stop the kubelet and wait until it is gone (it stops its static pods first): systemd's unit, else
/// the supervisor, whose TERM trap stops the kubelet and waits for it.
fn stop_script() -> String {
    format!(
        "if [ -d /run/systemd/system ] && [ -f {UNIT} ]; then exec systemctl stop kiln-kubelet; fi\n\
         sup=$(cat {SUPERVISOR_PID} 2>/dev/null)\n\
         if [ -n \"$sup\" ] && kill -0 \"$sup\" 2>/dev/null; then kill -TERM \"$sup\"\n\
           for i in $(seq 900); do kill -0 \"$sup\" 2>/dev/null || break; sleep 0.1; done\n\
           kill -0 \"$sup\" 2>/dev/null && kill -KILL -- -\"$sup\" 2>/dev/null; fi\n\
         rm -f {SUPERVISOR_PID}"
    )
}

/// Start the kubelet stopped by [`stop_script`] from its (new) unit or supervisor script, and wait
/// for the supervisor's kubelet to run.
fn start_script() -> String {
    format!(
        "if [ -d /run/systemd/system ] && [ -f {UNIT} ]; then systemctl daemon-reload; exec systemctl start kiln-kubelet; fi\n\
         setsid /bin/sh {SUPERVISOR} </dev/null >/dev/null 2>&1 &\n\
         for i in $(seq 150); do sup=$(cat {SUPERVISOR_PID} 2>/dev/null); \
         [ -n \"$sup\" ] && pgrep -P \"$sup\" -x kiln-kubelet >/dev/null && exit 0; sleep 0.1; done\n\
         echo 'the kubelet did not start again' >&2; exit 1"
    )
}

/// Keep each of `paths` under [`KEPT_FILES`] once: a resumed upgrade must not keep the new files as
/// the old ones. A path the host does not have is not kept (nothing to put back).
pub fn keep_script(kept: &str, paths: &[String]) -> String {
    let list: Vec<String> = paths.iter().map(|p| shell_quote(p)).collect();
    let k = shell_quote(kept);
    let tmp = shell_quote(&format!("{kept}.tmp"));
    format!(
        "[ -e {k}/.complete ] && exit 0; rm -rf {tmp} && mkdir -p {tmp} && \
         for f in {}; do if [ -e \"$f\" ]; then mkdir -p {tmp}\"${{f%/*}}\" && cp -p \"$f\" {tmp}\"$f\" || exit 1; fi; done; \
         touch {tmp}/.complete && rm -rf {k} && mv {tmp} {k}",
        list.join(" ")
    )
}

/// Put every kept file back where it was, each by a rename (the kubelet never reads half a manifest;
/// the temporary name is no manifest name). A subshell, so it can be chained.
pub fn put_back_script(kept: &str) -> String {
    let k = shell_quote(kept);
    format!(
        "( [ -e {k}/.complete ] || exit 0; cd {k} && \
         find . -type f ! -name .complete | while read -r f; do t=\"${{f#.}}\"; \
         cp -p \"$f\" \"$t.kiln-prev\" && mv -f \"$t.kiln-prev\" \"$t\" || exit 1; done && \
         rm -rf {k} )"
    )
}

/// Every running process whose executable is a kiln binary: `<pid> <exe>`, exe ending in
/// ` (deleted)` when the binary was replaced after the process started.
const RUNNING_SCRIPT: &str =
    "for p in /proc/[0-9]*; do e=$(readlink $p/exe 2>/dev/null) || continue; \
     case \"$e\" in /usr/local/bin/kiln-*) echo \"${p#/proc/} $e\";; esac; done";

/// The components that must be running on a host of this role after its restart: no kiln-store
/// where the store is an external etcd (`external_store`).
fn must_run(controller: bool, external_store: bool) -> &'static [&'static str] {
    match (controller, external_store) {
        (true, false) => &["kiln-store", "kiln-apiserver", "kiln-kubelet", "kiln-proxy"],
        (true, true) => &["kiln-apiserver", "kiln-kubelet", "kiln-proxy"],
        (false, _) => &["kiln-kubelet", "kiln-proxy"],
    }
}

/// Why the running processes are not the installed binaries, if they are not.
pub fn stale_processes(ps: &str, controller: bool, external_store: bool) -> Option<String> {
    let stale: Vec<String> = ps
        .lines()
        .filter(|l| l.ends_with(" (deleted)"))
        .map(|l| l.trim_end_matches(" (deleted)").to_string())
        .collect();
    if !stale.is_empty() {
        return Some(format!(
            "still running a replaced binary: {}",
            stale.join(", ")
        ));
    }
    let missing: Vec<&str> = must_run(controller, external_store)
        .iter()
        .copied()
        .filter(|b| !ps.lines().any(|l| l.ends_with(&format!("/{b}"))))
        .collect();
    (!missing.is_empty()).then(|| format!("not running: {}", missing.join(", ")))
}

impl HostActions<'_> {
    fn timeout(&self) -> Duration {
        self.ctx.opts.wait_timeout
    }

    async fn transport(&self, host: &str) -> Result<std::sync::Arc<dyn Transport>, String> {
        self.ctx.transport(host).await.map_err(|e| e.to_string())
    }

    async fn run(&self, host: &str, cmd: &str) -> Result<String, String> {
        self.transport(host)
            .await?
            .run(cmd)
            .await
            .map_err(|e| e.to_string())
    }

    /// Try `f` until it answers Ok or the wait timeout passes; the error is the last answer.
    async fn poll<F, Fut>(&self, what: &str, mut f: F) -> Result<String, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<String, String>>,
    {
        let start = Instant::now();
        loop {
            match f().await {
                Ok(v) => return Ok(format!("{v} after {:.1}s", start.elapsed().as_secs_f64())),
                Err(e) if start.elapsed() > self.timeout() => {
                    return Err(format!(
                        "{what} not within {}s: {e}",
                        self.timeout().as_secs()
                    ))
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }

    fn target(&self, binary: &str) -> Option<&Stamp> {
        self.targets.get(binary).map(|t| &t.stamp)
    }

    /// The files of the host that name its binaries' sha256, rendered as `init` renders them.
    async fn rendered(
        &self,
        host: &str,
    ) -> Result<
        (
            Vec<Install>,
            crate::bootstrap::phases::push::KubeletLauncher,
        ),
        String,
    > {
        let err = |e: crate::bootstrap::BootstrapError| e.to_string();
        let mut files = binary_hash::static_pod_files(self.ctx, host).map_err(err)?;
        // The KubeletConfiguration the launcher's command names (`--config`), before the launcher.
        files.push(crate::bootstrap::phases::kubelet_config::stage(self.ctx, host).map_err(err)?);
        let launcher = crate::bootstrap::phases::push::kubelet_launcher(self.ctx, host)
            .await
            .map_err(err)?;
        files.push(launcher.file(self.ctx, host).map_err(err)?);
        Ok((files, launcher))
    }

    async fn push(&self, st: &Step) -> Result<String, String> {
        let t = self.transport(&st.host).await?;
        // The files the render step rewrites, as they are now: a rollback puts them back.
        let (files, _) = self.rendered(&st.host).await?;
        let paths: Vec<String> = files.iter().map(|f| f.remote.clone()).collect();
        t.run(&keep_script(KEPT_FILES, &paths))
            .await
            .map_err(|e| e.to_string())?;
        let mut done = vec![];
        for c in &st.changes {
            let remote = format!("{REMOTE_BIN}/{}", c.binary);
            let q = shell_quote(&remote);
            // The running binary is kept once: a resumed upgrade must not overwrite the old one
            // with the new.
            t.run(&format!(
                "if [ -e {q} ] && [ ! -e {q}.prev ]; then cp -p {q} {q}.prev.tmp && mv {q}.prev.tmp {q}.prev; fi"
            ))
            .await
            .map_err(|e| e.to_string())?;
            let local = self.ctx.bin_dir.join(&c.binary);
            t.upload(Payload::File(&local), &remote, 0o755)
                .await
                .map_err(|e| e.to_string())?;
            done.push(c.binary.as_str());
        }
        Ok(format!("installed {}", done.join(", ")))
    }

    /// The host's manifests and kubelet unit as `init` renders them for the binaries now installed.
    /// When the kubelet's own binary changed (or a resumed host, whose changes are unknown) the
    /// kubelet is stopped first and started after, so each pod restarts once, on the new kubelet;
    /// otherwise the running kubelet restarts each pod whose manifest changed, as after `init`.
    async fn render(&self, st: &Step) -> Result<String, String> {
        let host = st.host.as_str();
        let (files, _) = self.rendered(host).await?;
        let kubelet_changes =
            st.changes.is_empty() || st.changes.iter().any(|c| c.binary == "kiln-kubelet");
        if kubelet_changes {
            self.run(host, &stop_script()).await?;
        }
        let installed = install_files(self.ctx, host, &files)
            .await
            .map_err(|e| e.to_string());
        let launcher_changed = installed
            .as_ref()
            .is_ok_and(|c| c.iter().any(|f| f == UNIT || f == SUPERVISOR));
        if kubelet_changes {
            // Started again whatever the install did: a host is never left without its kubelet.
            self.run(host, &start_script()).await?;
        } else if launcher_changed {
            self.run(host, &restart_script()).await?;
        }
        let changed = installed?;
        let restart = if kubelet_changes {
            "kubelet restarted"
        } else if launcher_changed {
            "kubelet restarted (its unit changed)"
        } else {
            "the kubelet restarts the pods whose manifest changed"
        };
        Ok(if changed.is_empty() {
            format!("files up to date; {restart}")
        } else {
            format!("wrote {}; {restart}", changed.join(", "))
        })
    }

    async fn restore(&self, st: &Step) -> Result<String, String> {
        let mut cmds = vec![];
        for c in &st.changes {
            let q = shell_quote(&format!("{REMOTE_BIN}/{}", c.binary));
            cmds.push(format!("if [ -e {q}.prev ]; then mv -f {q}.prev {q}; fi"));
        }
        if cmds.is_empty() {
            // A resumed host: nothing of this run to put back (its files name the binaries it has).
            return Ok("no binaries to put back".into());
        }
        // The kept manifests and kubelet unit, then the binaries they name.
        cmds.insert(0, put_back_script(KEPT_FILES));
        self.run(&st.host, &cmds.join(" && ")).await?;
        Ok("previous binaries, manifests and kubelet unit back in place".into())
    }

    async fn gate(&self, st: &Step, gate: Gate) -> Result<String, String> {
        let host = st.host.as_str();
        match gate {
            Gate::StoreHealthy if self.ctx.cluster.config.spec.store.external.is_some() => {
                // An external etcd is not restarted by the upgrade: the gate is its quorum, through
                // its endpoints (a linearizable read and a known leader on at least one).
                let access =
                    crate::bootstrap::phases::external_etcd::StoreAccess::for_cluster(self.ctx);
                self.poll("the external etcd healthy", || {
                    let access = access.clone();
                    async move {
                        let report = crate::bootstrap::phases::external_etcd::health(&access).await;
                        match report.iter().find(|h| h.healthy) {
                            Some(h) => Ok(format!("external etcd {}: {}", h.endpoint, h.detail)),
                            None => Err(report
                                .iter()
                                .map(|h| format!("{}: {}", h.endpoint, h.detail))
                                .collect::<Vec<_>>()
                                .join("; ")),
                        }
                    }
                })
                .await
            }
            Gate::StoreHealthy => {
                let addr = self.ctx.host(host).node_address();
                let pki = self.ctx.pki_dir(host);
                self.poll("the store member healthy", || {
                    let (addr, pki) = (addr.clone(), pki.clone());
                    async move {
                        let mut m = MemberClient::connect(&addr, &pki)
                            .await
                            .map_err(|e| e.to_string())?;
                        m.quorum_read().await.map_err(|e| e.to_string())?;
                        let s = m.status().await.map_err(|e| e.to_string())?;
                        if s.leader == 0 {
                            return Err("the member knows no leader".into());
                        }
                        Ok(format!("quorum read answered, leader {:x}", s.leader))
                    }
                })
                .await
            }
            Gate::ApiServerReady => {
                let client =
                    crate::bootstrap::phases::wait::host_admin_client(self.ctx, host).await?;
                self.poll("/readyz", || {
                    let client = client.clone();
                    async move {
                        crate::bootstrap::phases::wait::readyz(client)
                            .await
                            .map(|()| "/readyz ok".to_string())
                    }
                })
                .await
            }
            Gate::ControlPlanePods => {
                crate::bootstrap::phases::wait::wait_static_pods(self.ctx, host)
                    .await
                    .map(|o| o.detail().to_string())
                    .map_err(|e| e.to_string())
            }
            Gate::Leaders => {
                // A live leader renews every few seconds; a dead one's lease stays as it was. So
                // a lease is led once its renewTime moves while we watch.
                use k8s_openapi::api::coordination::v1::Lease;
                let leases: kube::Api<Lease> =
                    kube::Api::namespaced(self.client.clone(), "kube-system");
                let mut moved = vec![];
                for name in LEADER_LEASES {
                    let renewed = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
                    let first = leases
                        .get_opt(name)
                        .await
                        .map_err(|e| e.to_string())?
                        .and_then(|l| renewed(&l));
                    let what = format!("lease {name} renewed");
                    let detail = self
                        .poll(&what, || {
                            let (leases, first) = (leases.clone(), first.clone());
                            async move {
                                let now = leases
                                    .get_opt(name)
                                    .await
                                    .map_err(|e| e.to_string())?
                                    .and_then(|l| renewed(&l));
                                match now {
                                    Some(t) if Some(&t) != first.as_ref() => {
                                        Ok(format!("{name} led"))
                                    }
                                    _ => Err(format!("{name} not renewed since {first:?}")),
                                }
                            }
                        })
                        .await?;
                    moved.push(detail);
                }
                Ok(moved.join(", "))
            }
            Gate::Versions => {
                self.poll("the target build everywhere", || self.versions(st))
                    .await
            }
            Gate::NodeReady => {
                use k8s_openapi::api::core::v1::Node;
                let nodes: kube::Api<Node> = kube::Api::all(self.client.clone());
                self.poll("the node Ready", || {
                    let nodes = nodes.clone();
                    async move {
                        let n = nodes.get(host).await.map_err(|e| e.to_string())?;
                        let ready = n
                            .status
                            .and_then(|s| s.conditions)
                            .unwrap_or_default()
                            .into_iter()
                            .find(|c| c.type_ == "Ready");
                        match ready {
                            Some(c) if c.status == "True" => Ok("Ready".into()),
                            Some(c) => Err(format!(
                                "Ready={} ({})",
                                c.status,
                                c.message.unwrap_or_default()
                            )),
                            None => Err("no Ready condition".into()),
                        }
                    }
                })
                .await
            }
        }
    }

    /// The Versions gate, once: processes, binaries on disk, what the API reports.
    async fn versions(&self, st: &Step) -> Result<String, String> {
        let host = st.host.as_str();
        let ps = self.run(host, RUNNING_SCRIPT).await?;
        let external = self.ctx.cluster.config.spec.store.external.is_some();
        if let Some(why) = stale_processes(&ps, st.controller, external) {
            return Err(why);
        }
        for c in &st.changes {
            let line = self
                .run(host, &format!("{REMOTE_BIN}/{} --version", c.binary))
                .await?;
            let got = Stamp::parse(line.lines().next().unwrap_or_default());
            if got.as_ref() != Some(&c.to) {
                return Err(format!(
                    "{} --version says {:?}, not {}",
                    c.binary,
                    line.trim(),
                    c.to
                ));
            }
        }
        let want = |binary: &str| self.target(binary).and_then(|s| s.build.clone());
        if let Some(build) = want("kiln-kubelet") {
            use k8s_openapi::api::core::v1::Node;
            let nodes: kube::Api<Node> = kube::Api::all(self.client.clone());
            let n = nodes.get(host).await.map_err(|e| e.to_string())?;
            let info = n.status.and_then(|s| s.node_info).unwrap_or_default();
            for (field, v) in [
                ("kubeletVersion", &info.kubelet_version),
                ("kubeProxyVersion", &info.kube_proxy_version),
            ] {
                if kiln_common::version::build_of(v) != Some(build.as_str()) {
                    return Err(format!(
                        "node {host} reports {field} {v}, not build {build}"
                    ));
                }
            }
        }
        if st.controller {
            if let Some(build) = want("kiln-apiserver") {
                let client =
                    crate::bootstrap::phases::wait::host_admin_client(self.ctx, host).await?;
                let v = client
                    .apiserver_version()
                    .await
                    .map_err(|e| e.to_string())?;
                if kiln_common::version::build_of(&v.git_version) != Some(build.as_str()) {
                    return Err(format!(
                        "the API server on {host} reports {}, not build {build}",
                        v.git_version
                    ));
                }
            }
        }
        Ok("every component on the target build".into())
    }
}

#[async_trait]
impl Actions for HostActions<'_> {
    async fn act(&self, st: &Step, action: Action) -> Result<String, String> {
        let host = st.host.as_str();
        match action {
            Action::Mark => self
                .run(host, &format!("mkdir -p /var/lib/kiln && touch {MARKER}"))
                .await
                .map(|_| "marked".into()),
            Action::Unmark => self
                .run(host, &format!("rm -f {MARKER}"))
                .await
                .map(|_| "marker removed".into()),
            Action::Cordon => drain::cordon(&self.client, host, true)
                .await
                .map_err(|e| e.to_string()),
            Action::Uncordon => drain::cordon(&self.client, host, false)
                .await
                .map_err(|e| e.to_string()),
            Action::Drain => drain::drain(&self.client, host, self.force, self.timeout())
                .await
                .map_err(|e| e.to_string()),
            Action::Push => self.push(st).await,
            Action::Render => self.render(st).await,
            Action::Restore => self.restore(st).await,
            Action::RestartKubelet => self
                .run(host, &restart_script())
                .await
                .map(|_| "kubelet restarted".into()),
            Action::Gate(g) => self.gate(st, g).await,
            Action::PodsRunning => {
                let client = self.client.clone();
                self.poll("the node's pods Running", || {
                    let client = client.clone();
                    async move {
                        let left = drain::not_running(&client, host)
                            .await
                            .map_err(|e| e.to_string())?;
                        if left.is_empty() {
                            Ok("its pods are Running".into())
                        } else {
                            Err(format!("not Running yet: {}", left.join(", ")))
                        }
                    }
                })
                .await
            }
            Action::Cleanup => self
                .run(
                    host,
                    &format!("rm -f {REMOTE_BIN}/kiln-*.prev && rm -rf {KEPT_FILES}"),
                )
                .await
                .map(|_| "previous binaries and kept files removed".into()),
        }
    }
}

/// The hosts where an earlier run was interrupted (the marker is there).
pub async fn interrupted(ctx: &Context) -> Vec<String> {
    let mut out = vec![];
    for h in &ctx.cluster.config.spec.hosts {
        let Ok(t) = ctx.transport(&h.name).await else {
            continue;
        };
        if t.probe(&format!("test -e {MARKER}"), None)
            .await
            .is_ok_and(|o| o.success())
        {
            out.push(h.name.clone());
        }
    }
    out
}

/// The hosts that still hold `<bin>.prev` files.
pub async fn with_previous_binaries(ctx: &Context) -> Vec<String> {
    let mut out = vec![];
    for h in &ctx.cluster.config.spec.hosts {
        let Ok(t) = ctx.transport(&h.name).await else {
            continue;
        };
        if t.probe(
            &format!("ls {REMOTE_BIN}/kiln-*.prev >/dev/null 2>&1"),
            None,
        )
        .await
        .is_ok_and(|o| o.success())
        {
            out.push(h.name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_on_replaced_binaries_fail_the_gate() {
        let ps = "10 /usr/local/bin/kiln-kubelet\n11 /usr/local/bin/kiln-proxy (deleted)\n";
        assert_eq!(
            stale_processes(ps, false, false).unwrap(),
            "still running a replaced binary: 11 /usr/local/bin/kiln-proxy"
        );
        let ps = "10 /usr/local/bin/kiln-kubelet\n11 /usr/local/bin/kiln-proxy\n";
        assert_eq!(stale_processes(ps, false, false), None);
        assert_eq!(
            stale_processes(ps, true, false).unwrap(),
            "not running: kiln-store, kiln-apiserver"
        );
        // An external etcd: no kiln-store runs on the controllers.
        assert_eq!(
            stale_processes(ps, true, true).unwrap(),
            "not running: kiln-apiserver"
        );
        assert!(restart_script().contains("pgrep -P \"$sup\" -x kiln-kubelet"));
    }

    fn sh(script: &str) -> std::process::Output {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap()
    }

    #[test]
    fn kept_files_go_back_by_rename_and_are_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let manifests = root.join("etc/kiln/manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let store = manifests.join("kiln-store.yaml");
        let unit = root.join("etc/kiln/kubelet-supervisor.sh");
        std::fs::write(&store, "store A").unwrap();
        std::fs::write(&unit, "kubelet A").unwrap();
        let kept = root.join("var/lib/kiln/upgrade-prev");
        let kept = kept.to_str().unwrap();
        let missing = manifests.join("kiln-new.yaml");
        let paths: Vec<String> = [&store, &unit, &missing]
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let o = sh(&keep_script(kept, &paths));
        assert!(o.status.success(), "{o:?}");
        // The render writes B; a resumed upgrade keeps again: A stays what is kept.
        std::fs::write(&store, "store B").unwrap();
        std::fs::write(&unit, "kubelet B").unwrap();
        assert!(sh(&keep_script(kept, &paths)).status.success());
        // Chained, as the rollback runs it: the binaries' moves follow.
        let o = sh(&format!("{} && echo chained", put_back_script(kept)));
        assert!(o.status.success(), "{o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "chained\n");
        assert_eq!(std::fs::read_to_string(&store).unwrap(), "store A");
        assert_eq!(std::fs::read_to_string(&unit).unwrap(), "kubelet A");
        assert!(!missing.exists());
        // Nothing left in the manifest directory but manifests, nor in the kept folder.
        let names: Vec<String> = std::fs::read_dir(&manifests)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["kiln-store.yaml"]);
        assert!(!std::path::Path::new(kept).exists());
        // Nothing kept (a resumed host's rollback): nothing to do, and still chainable.
        let o = sh(&format!("{} && echo chained", put_back_script(kept)));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "chained\n");
    }
}
