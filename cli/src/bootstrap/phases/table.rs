//! Every phase a playbook may name, as data (kubeadm's `workflow.Phase`): its name, where it runs, whether
//! it needs the cluster's API, what it does, and the function that does it. The runner, playbook
//! validation, reset and `--dry-run` all read this one table; nothing else matches on phase names.
//!
//! `run` is a function pointer returning a boxed future rather than an enum matched elsewhere, so a phase
//! is one row: adding one cannot forget the dispatch, and the row says what runs. The box costs one
//! allocation per phase and host, nothing next to an SSH round trip. The three `Run` variants give each
//! kind of phase the arguments it needs (no host, one host, all hosts), so a host phase cannot be called
//! without a host and `runs_on` cannot disagree with the function.

use futures::future::BoxFuture;

use super::{
    backup, cp_join, dns, external_etcd, join_token, leave, pki, preflight, push, runtime, storage,
    wait, BootstrapError, Context, Outcome,
};
use crate::bootstrap::reset;

type PhaseResult = Result<Outcome, BootstrapError>;
type LocalFn = fn(&Context) -> BoxFuture<'_, PhaseResult>;
type HostFn = for<'a> fn(&'a Context, &'a str) -> BoxFuture<'a, PhaseResult>;
type AllHostsFn =
    for<'a> fn(&'a Context, &'a [Option<String>]) -> BoxFuture<'a, Result<(), BootstrapError>>;

/// How a phase runs, with the arguments its kind needs.
#[derive(Debug, Clone, Copy)]
pub enum Run {
    /// On the operator's machine; once per selected host, the host unused (`local` selects one).
    Local(LocalFn),
    /// On each selected host, in parallel; the runner reports each host's outcome.
    Host(HostFn),
    /// On all selected hosts at once, reporting itself (preflight: the cross-host checks need every
    /// host's facts). A `None` host (the `local` selector) is the phase's own error.
    AllHosts(AllHostsFn),
}

/// Where a phase runs: what a playbook's selector for it must name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsOn {
    Local,
    Host,
}

/// Which store a phase belongs to: the runner skips (and reports) a phase whose store the cluster
/// does not have, so a playbook lists both kinds and cluster.yaml's `spec.store.external` picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreUse {
    /// Every cluster.
    Any,
    /// Only where kiln runs the store (kiln-store members): none with an external etcd, whose
    /// members kiln does not own.
    KilnStore,
    /// Only with `spec.store.external`.
    External,
}

impl StoreUse {
    /// Why a phase does not run for a cluster whose store is external (`true`) or kiln's, if it does not.
    pub fn skip_reason(self, external: bool) -> Option<&'static str> {
        match (self, external) {
            (StoreUse::KilnStore, true) => {
                Some("spec.store.external: the etcd members are not kiln's")
            }
            (StoreUse::External, false) => Some("spec.store.external is not set"),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub name: &'static str,
    /// Waits on or writes to the API: a dry run only names it (the cluster may not exist yet).
    pub needs_api: bool,
    /// The store it belongs to (see [`StoreUse`]).
    pub store: StoreUse,
    /// One line for the operator (logged at debug, with `runs_on`, when the phase starts).
    pub summary: &'static str,
    pub run: Run,
}

impl Phase {
    /// Derived from `run`, so the two cannot disagree. Nothing refuses a misfit selector at load today
    /// (a host phase on `local` fails when it runs); the playbook tests below hold the embedded ones to it.
    pub fn runs_on(&self) -> RunsOn {
        match self.run {
            Run::Local(_) => RunsOn::Local,
            Run::Host(_) | Run::AllHosts(_) => RunsOn::Host,
        }
    }
}

/// The phase called `name`, or the error that names every known phase.
pub fn find(name: &str) -> Result<&'static Phase, BootstrapError> {
    PHASES
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| BootstrapError::UnknownPhase {
            phase: name.to_string(),
            known: PHASES.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
        })
}

/// Every phase, in the order `known` lists them in errors (init's, then join's, then reset's).
pub const PHASES: &[Phase] = &[
    Phase {
        name: "preflight",
        needs_api: false,
        store: StoreUse::Any,
        summary: "facts from every host, checked per host and across hosts",
        run: Run::AllHosts(|ctx, hosts| Box::pin(preflight::preflight_hosts(ctx, hosts))),
    },
    Phase {
        name: "external-etcd",
        needs_api: false,
        store: StoreUse::External,
        summary: "spec.store.external: every endpoint answers with the given certificates; copies for the controllers",
        run: Run::Local(|ctx| Box::pin(external_etcd::external_etcd(ctx))),
    },
    Phase {
        name: "certs",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the PKI tree per host in the state directory",
        run: Run::Local(|ctx| Box::pin(async move { pki::certs(ctx) })),
    },
    Phase {
        name: "kubeconfigs",
        needs_api: false,
        store: StoreUse::Any,
        summary: "admin.conf, per-controller and node kubeconfigs in the state directory",
        run: Run::Local(|ctx| Box::pin(async move { pki::kubeconfigs(ctx) })),
    },
    Phase {
        name: "push",
        needs_api: false,
        store: StoreUse::Any,
        summary: "binaries, PKI and kubeconfigs whose sha256 differs on the host",
        run: Run::Host(|ctx, host| Box::pin(push::push(ctx, host))),
    },
    Phase {
        name: "store-start",
        needs_api: false,
        store: StoreUse::KilnStore,
        summary: "the kiln-store static pod manifest",
        run: Run::Host(|ctx, host| Box::pin(push::store_start(ctx, host))),
    },
    Phase {
        name: "control-plane",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the control plane's static pod manifests",
        run: Run::Host(|ctx, host| Box::pin(push::control_plane(ctx, host))),
    },
    Phase {
        name: "proxy",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the kiln-proxy static pod",
        run: Run::Host(|ctx, host| Box::pin(push::proxy(ctx, host))),
    },
    Phase {
        name: "dns",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the kiln-dns static pod (cluster DNS on the node address)",
        run: Run::Host(|ctx, host| Box::pin(dns::dns(ctx, host))),
    },
    Phase {
        name: "dns-service",
        needs_api: true,
        store: StoreUse::Any,
        summary: "the Service kube-system/kube-dns at networking.clusterDNS",
        run: Run::Local(|ctx| Box::pin(dns::dns_service(ctx))),
    },
    Phase {
        name: "storage-class",
        needs_api: true,
        store: StoreUse::Any,
        summary: "the default StorageClass local-path (kiln.io/local-path), unless disabled",
        run: Run::Local(|ctx| Box::pin(storage::storage_class(ctx))),
    },
    Phase {
        name: "backup-schedule",
        needs_api: false,
        store: StoreUse::Any,
        summary: "spec.store.backup: scheduled snapshot bundles on each controller (as `kiln snapshot schedule`)",
        run: Run::Host(|ctx, host| Box::pin(backup::backup_schedule(ctx, host))),
    },
    Phase {
        name: "container-runtime",
        needs_api: false,
        store: StoreUse::Any,
        summary: "containerd's configuration, and containerd started",
        run: Run::Host(|ctx, host| Box::pin(runtime::container_runtime(ctx, host))),
    },
    Phase {
        name: "kubelet-start",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the kubelet as a systemd unit or under kiln's supervisor",
        run: Run::Host(|ctx, host| Box::pin(push::kubelet_start(ctx, host))),
    },
    Phase {
        name: "wait-control-plane",
        needs_api: true,
        store: StoreUse::Any,
        summary: "the API server's /readyz",
        run: Run::Local(|ctx| Box::pin(wait::wait_control_plane(ctx))),
    },
    Phase {
        name: "wait-node-ready",
        needs_api: true,
        store: StoreUse::Any,
        summary: "the host's Node Ready",
        run: Run::Host(|ctx, host| Box::pin(wait::wait_node_ready(ctx, host))),
    },
    Phase {
        name: "wait-static-pods",
        needs_api: true,
        store: StoreUse::Any,
        summary: "every static pod's mirror pod Ready",
        run: Run::Host(|ctx, host| Box::pin(wait::wait_static_pods(ctx, host))),
    },
    Phase {
        name: "upload-config",
        needs_api: true,
        store: StoreUse::Any,
        summary: "the ConfigMap kube-system/kiln-config",
        run: Run::Local(|ctx| Box::pin(wait::upload_config(ctx))),
    },
    Phase {
        name: "mark-control-plane",
        needs_api: true,
        store: StoreUse::Any,
        summary: "the control-plane label, and its taint unless the host is also a worker",
        run: Run::Host(|ctx, host| Box::pin(wait::mark_control_plane(ctx, host))),
    },
    Phase {
        name: "bootstrap-token",
        needs_api: true,
        store: StoreUse::Any,
        summary: "a just-in-time bootstrap token for workers that have not joined",
        run: Run::Local(|ctx| Box::pin(join_token::bootstrap_token(ctx))),
    },
    Phase {
        name: "store-learner",
        needs_api: true,
        store: StoreUse::KilnStore,
        summary: "the joining controller added as a store learner",
        run: Run::Host(|ctx, host| Box::pin(cp_join::store_learner(ctx, host))),
    },
    Phase {
        name: "store-promote",
        needs_api: true,
        store: StoreUse::KilnStore,
        summary: "the store learner promoted once it caught up",
        run: Run::Host(|ctx, host| Box::pin(cp_join::store_promote(ctx, host))),
    },
    Phase {
        name: "apiserver-lb",
        needs_api: true,
        store: StoreUse::Any,
        summary: "every node's API server balancer lists every controller",
        run: Run::Local(|ctx| Box::pin(cp_join::apiserver_lb(ctx))),
    },
    Phase {
        name: "leave-cluster",
        needs_api: true,
        store: StoreUse::Any,
        summary: "drain and delete the node, remove its store member",
        run: Run::Host(|ctx, host| Box::pin(leave::leave_cluster(ctx, host))),
    },
    Phase {
        name: "store-member-leave",
        needs_api: false,
        store: StoreUse::KilnStore,
        summary: "a controller leaving a running control plane: its store member removed",
        run: Run::Host(|ctx, host| Box::pin(leave::store_member_leave(ctx, host))),
    },
    Phase {
        name: "external-etcd-data",
        needs_api: false,
        store: StoreUse::External,
        summary: "the external etcd's data stays (kiln does not own it): says how to clear it",
        run: Run::Local(|ctx| Box::pin(async move { external_etcd::external_etcd_data(ctx) })),
    },
    Phase {
        name: "stop-static-pods",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the manifests removed so the kubelet stops the static pods",
        run: Run::Host(|ctx, host| {
            Box::pin(async move { reset::stop_static_pods(&*ctx.transport(host).await?).await })
        }),
    },
    Phase {
        name: "stop-kubelet",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the kubelet and every process running one of kiln's binaries stopped",
        run: Run::Host(|ctx, host| {
            Box::pin(async move { reset::stop_kubelet(&*ctx.transport(host).await?).await })
        }),
    },
    Phase {
        name: "remove-workloads",
        needs_api: false,
        store: StoreUse::Any,
        summary: "kiln's CRI sandboxes, mounts, netns, CNI state and containerd files removed",
        run: Run::Host(|ctx, host| {
            Box::pin(async move { runtime::remove_workloads(&*ctx.transport(host).await?).await })
        }),
    },
    Phase {
        name: "cleanup-network",
        needs_api: false,
        store: StoreUse::Any,
        summary: "kiln-proxy's nftables table and routes removed",
        run: Run::Host(|ctx, host| {
            Box::pin(async move { reset::cleanup_network(&*ctx.transport(host).await?).await })
        }),
    },
    Phase {
        name: "remove-files",
        needs_api: false,
        store: StoreUse::Any,
        summary: "every path kiln wrote removed (mount points emptied)",
        run: Run::Host(|ctx, host| {
            Box::pin(async move {
                let dir = reset::local_path_dir(&ctx.cluster.config);
                reset::remove_files(&*ctx.transport(host).await?, dir.as_deref()).await
            })
        }),
    },
    Phase {
        name: "verify-clean",
        needs_api: false,
        store: StoreUse::Any,
        summary: "the residue scan: no kiln file or process is left",
        run: Run::Host(|ctx, host| {
            Box::pin(async move {
                let dir = reset::local_path_dir(&ctx.cluster.config);
                reset::verify_clean(&*ctx.transport(host).await?, dir.as_deref()).await
            })
        }),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::{Playbook, Selector};

    /// Every playbook file in playbooks/, each loaded both from disk and as embedded (a file that is not
    /// embedded fails here rather than at a user's `kiln`).
    fn every_playbook() -> Vec<Playbook> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../playbooks");
        let mut out = vec![];
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            let embedded = Playbook::load(&stem, None)
                .unwrap_or_else(|e| panic!("{} is not embedded: {e}", path.display()));
            let on_disk = Playbook::load(&stem, Some(&path)).unwrap();
            assert_eq!(
                format!("{:?}", embedded.phases),
                format!("{:?}", on_disk.phases),
                "{stem}"
            );
            out.push(on_disk);
        }
        assert!(
            out.len() >= 7,
            "found {} playbooks in {}",
            out.len(),
            dir.display()
        );
        out
    }

    #[test]
    fn playbooks_name_table_phases_with_fitting_selectors() {
        for pb in every_playbook() {
            for spec in &pb.phases {
                let phase = find(&spec.name).unwrap();
                let fits = match phase.runs_on() {
                    RunsOn::Local => spec.hosts == Selector::Local,
                    RunsOn::Host => spec.hosts != Selector::Local,
                };
                assert!(
                    fits,
                    "playbook {}: phase {} runs on {:?} but selects {:?}",
                    pb.name,
                    phase.name,
                    phase.runs_on(),
                    spec.hosts
                );
            }
        }
    }

    /// Cluster DNS answers from every node: whatever playbook starts a host's kubelet (init, join,
    /// join --control-plane) has put the kiln-dns static pod on that host first.
    #[test]
    fn every_host_that_starts_a_kubelet_gets_kiln_dns_first() {
        let covers = |dns: Selector, kubelet: Selector| dns == kubelet || dns == Selector::All;
        let mut starting = vec![];
        for pb in every_playbook() {
            for (i, spec) in pb.phases.iter().enumerate() {
                if spec.name != "kubelet-start" {
                    continue;
                }
                starting.push(pb.name.clone());
                let before = &pb.phases[..i];
                assert!(
                    before
                        .iter()
                        .any(|p| p.name == "dns" && covers(p.hosts, spec.hosts)),
                    "playbook {}: kubelet-start on {:?} without the dns phase before it",
                    pb.name,
                    spec.hosts
                );
            }
        }
        starting.sort();
        starting.dedup();
        assert_eq!(starting, ["init", "join", "join-control-plane"]);
    }

    /// A dry run only names these; a change here changes what `--dry-run` touches.
    #[test]
    fn the_api_phases_are_exactly_these() {
        let api: Vec<&str> = PHASES
            .iter()
            .filter(|p| p.needs_api)
            .map(|p| p.name)
            .collect();
        assert_eq!(
            api,
            [
                "dns-service",
                "storage-class",
                "wait-control-plane",
                "wait-node-ready",
                "wait-static-pods",
                "upload-config",
                "mark-control-plane",
                "bootstrap-token",
                "store-learner",
                "store-promote",
                "apiserver-lb",
                "leave-cluster",
            ]
        );
    }

    #[test]
    fn names_are_unique_and_listed_in_unknown_phase_errors() {
        let mut names: Vec<&str> = PHASES.iter().map(|p| p.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate phase names");
        let e = find("frobnicate").unwrap_err().to_string();
        assert!(
            e.starts_with(
                "phase frobnicate: unknown phase name (known: preflight, external-etcd, certs, kubeconfigs,"
            ),
            "{e}"
        );
        assert!(e.ends_with("remove-files, verify-clean)"), "{e}");
    }

    #[test]
    fn phases_run_where_the_table_says() {
        let local: Vec<&str> = PHASES
            .iter()
            .filter(|p| p.runs_on() == RunsOn::Local)
            .map(|p| p.name)
            .collect();
        assert_eq!(
            local,
            [
                "external-etcd",
                "certs",
                "kubeconfigs",
                "dns-service",
                "storage-class",
                "wait-control-plane",
                "upload-config",
                "bootstrap-token",
                "apiserver-lb",
                "external-etcd-data",
            ]
        );
        assert!(matches!(find("preflight").unwrap().run, Run::AllHosts(_)));
    }

    /// The phases each playbook runs for a cluster on kiln-store and for one on an external etcd.
    fn selected(playbook: &str, external: bool) -> Vec<String> {
        let pb = Playbook::load(playbook, None).unwrap();
        pb.phases
            .iter()
            .filter(|p| find(&p.name).unwrap().store.skip_reason(external).is_none())
            .map(|p| p.name.clone())
            .collect()
    }

    /// With spec.store.external no store member is started, joined or removed, and the endpoints are
    /// checked before anything is made; without it, nothing of the external store runs.
    #[test]
    fn the_store_decides_which_store_phases_run() {
        let own = selected("init", false);
        let ext = selected("init", true);
        assert!(own.iter().any(|p| p == "store-start"), "{own:?}");
        assert!(
            !own.iter().any(|p| p.starts_with("external-etcd")),
            "{own:?}"
        );
        assert!(!ext.iter().any(|p| p == "store-start"), "{ext:?}");
        assert_eq!(ext[..2], ["preflight", "external-etcd"], "{ext:?}");
        // Everything else is the same playbook.
        let common = |v: &[String]| -> Vec<String> {
            v.iter()
                .filter(|p| *p != "store-start" && *p != "external-etcd")
                .cloned()
                .collect()
        };
        assert_eq!(common(&own), common(&ext));
        // The store manifest goes out before the control plane's other manifests, which need it.
        let at = |n: &str| own.iter().position(|p| p == n).unwrap();
        assert!(at("store-start") < at("control-plane"));

        let reset_ext = selected("reset", true);
        assert!(!reset_ext.iter().any(|p| p == "store-member-leave"));
        assert!(reset_ext.iter().any(|p| p == "external-etcd-data"));
        let reset_own = selected("reset", false);
        assert!(reset_own.iter().any(|p| p == "store-member-leave"));
        assert!(!reset_own.iter().any(|p| p == "external-etcd-data"));
        // Growing the kiln-store by a learner is kiln-store's only.
        let cp = selected("join-control-plane", true);
        assert!(!cp.iter().any(|p| p.starts_with("store-")), "{cp:?}");
        assert_eq!(
            PHASES
                .iter()
                .filter(|p| p.store == StoreUse::KilnStore)
                .map(|p| p.name)
                .collect::<Vec<_>>(),
            [
                "store-start",
                "store-learner",
                "store-promote",
                "store-member-leave"
            ]
        );
    }
}
