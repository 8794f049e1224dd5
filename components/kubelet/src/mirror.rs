//! Mirror pods: the API's read-only copies of static pods, so `kubectl get pods -A` shows the control plane.
//! A mirror carries `kubernetes.io/config.mirror=<hash>`, is owned by the Node, and its status comes from the
//! runtime. A mirror whose hash differs from the running static pod is deleted and recreated.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, ContainerUser,
    LinuxContainerUser, Pod, PodCondition, PodIP, PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;

use crate::container_status::{ContainerState, Terminated};
use crate::init_containers;
use crate::lease::node_owner;
use crate::manifest::{CONFIG_HASH, CONFIG_MIRROR};
use crate::node::to_timestamp;
use crate::runtime::PodStatus;

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("mirror pod {pod}: {source}")]
    Api {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

pub fn config_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(CONFIG_HASH)
        .map(String::as_str)
}

fn mirror_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(CONFIG_MIRROR)
        .map(String::as_str)
}

/// The object to POST for a static pod: its spec and labels, mirror annotation, owned by the node.
pub fn mirror_pod(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let mut pod = static_pod.clone();
    let hash = config_hash(static_pod).unwrap_or_default().to_string();
    pod.metadata.uid = None;
    pod.metadata.resource_version = None;
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CONFIG_MIRROR.into(), hash);
    pod.metadata.owner_references = Some(vec![{
        let mut o = node_owner(node_name, node_uid);
        o.controller = Some(true);
        o
    }]);
    pod.status = None;
    pod
}

fn time(t: std::time::SystemTime) -> Time {
    Time(to_timestamp(t))
}

pub(crate) fn terminated(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: t.started_at.map(time),
        finished_at: Some(time(t.finished_at)),
        container_id: None,
    }
}

fn api_state(s: &ContainerState) -> ApiState {
    match s {
        ContainerState::Waiting { reason, message } => ApiState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        ContainerState::Running { started_at, .. } => ApiState {
            running: Some(ContainerStateRunning {
                started_at: Some(time(*started_at)),
            }),
            ..Default::default()
        },
        ContainerState::Terminated(t) => ApiState {
            terminated: Some(terminated(t)),
            ..Default::default()
        },
    }
}

/// The pod phase the kubelet would report for these containers, once initialized ([`crate::pod_phase`]).
pub fn phase(rt: &PodStatus) -> &'static str {
    crate::pod_phase::app_phase(&rt.init_containers, &rt.containers)
}

fn cond(type_: &str, ok: bool, at: &Time) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        last_transition_time: Some(at.clone()),
        ..Default::default()
    }
}

/// The mirror pod's status from the runtime's view; hostNetwork, so the pod IP is the node IP.
pub fn mirror_status(rt: &PodStatus, node_ip: &str) -> ApiPodStatus {
    api_status(rt, node_ip, Some(rt.pod_ip.as_deref().unwrap_or(node_ip)))
}

/// The API status of a pod from the runtime's view (static and workload pods alike): phase, the four
/// conditions, containerStatuses, podIP (None until the sandbox has one) and hostIP.
pub fn api_status(rt: &PodStatus, node_ip: &str, pod_ip: Option<&str>) -> ApiPodStatus {
    // Sidecars count in the pod's readiness (upstream's ContainersReady); other init containers do not.
    let sidecars = rt.init_containers.iter().filter(|c| c.restartable);
    let ready = !rt.containers.is_empty() && rt.containers.iter().chain(sidecars).all(|c| c.ready);
    let started = time(rt.started_at);
    let init = init_containers::progress(&rt.init_containers, &rt.containers);
    let pod_phase = crate::pod_phase::pod_phase(&rt.init_containers, &rt.containers);
    let statuses = api_container_statuses(&rt.containers);
    let init_statuses = api_container_statuses(&rt.init_containers);
    let ephemeral_statuses = api_container_statuses(&rt.ephemeral_containers);
    let mut status = ApiPodStatus {
        phase: Some(pod_phase.into()),
        conditions: Some(vec![
            cond("PodScheduled", true, &started),
            cond(
                "Initialized",
                init == init_containers::Progress::Complete,
                &started,
            ),
            cond("ContainersReady", ready, &started),
            cond("Ready", ready, &started),
        ]),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        host_ip: Some(node_ip.into()),
        host_ips: Some(vec![k8s_openapi::api::core::v1::HostIP {
            ip: node_ip.into(),
        }]),
        pod_ip: pod_ip.map(String::from),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip: ip.into() }]),
        start_time: Some(started),
        ..Default::default()
    };
    crate::pod_resize::report(&rt.resize, &mut status);
    status
}

fn api_container_statuses(
    cs: &[crate::container_status::ContainerStatus],
) -> Vec<ApiContainerStatus> {
    cs.iter()
        .map(|c| ApiContainerStatus {
            name: c.name.clone(),
            image: c.image.clone(),
            image_id: String::new(),
            container_id: (!c.container_id.is_empty()).then(|| c.container_id.clone()),
            ready: c.ready,
            started: Some(c.is_running() && c.started),
            restart_count: c.restart_count,
            state: Some(api_state(&c.state)),
            last_state: c.last_termination.as_ref().map(|t| ApiState {
                terminated: Some(terminated(t)),
                ..Default::default()
            }),
            user: c.user.as_ref().map(api_user),
            ..Default::default()
        })
        .collect()
}

/// ContainerStatus.user as upstream's kubelet converts the runtime's (an empty group list omitted).
fn api_user(u: &crate::container_status::LinuxUser) -> ContainerUser {
    ContainerUser {
        linux: Some(LinuxContainerUser {
            uid: u.uid,
            gid: u.gid,
            supplemental_groups: (!u.supplemental_groups.is_empty())
                .then(|| u.supplemental_groups.clone()),
        }),
    }
}

/// Keeps the mirror pods of this node in line with its static pods; remembers what it last posted so
/// an unchanged status is not re-sent.
#[derive(Default)]
pub struct MirrorSync {
    /// uid (config hash) → last status posted, as JSON without timestamps that always change.
    posted: HashMap<String, serde_json::Value>,
}

fn status_fingerprint(s: &ApiPodStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(conds) = v.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for c in conds {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastTransitionTime");
            }
        }
    }
    v
}

impl MirrorSync {
    /// One pass: create missing mirrors, replace stale ones, post changed statuses, and when `full`,
    /// also re-check every mirror and delete orphans (mirrors of static pods this node no longer runs).
    pub async fn sync(
        &mut self,
        client: &Client,
        node_name: &str,
        node_uid: &str,
        node_ip: &str,
        static_pods: &[(Pod, Option<PodStatus>)],
        full: bool,
    ) -> Result<(), MirrorError> {
        for (pod, rt) in static_pods {
            let Some(rt) = rt else { continue };
            let status = mirror_status(rt, node_ip);
            let fp = status_fingerprint(&status);
            if !full && self.posted.get(&rt.uid) == Some(&fp) {
                continue;
            }
            self.sync_one(client, pod, node_name, node_uid, status)
                .await?;
            self.posted.insert(rt.uid.clone(), fp);
        }
        let live: Vec<&str> = static_pods
            .iter()
            .filter_map(|(p, _)| config_hash(p))
            .collect();
        self.posted.retain(|uid, _| live.contains(&uid.as_str()));
        if full {
            self.delete_orphans(client, node_name, static_pods).await?;
        }
        Ok(())
    }

    async fn sync_one(
        &self,
        client: &Client,
        static_pod: &Pod,
        node_name: &str,
        node_uid: &str,
        status: ApiPodStatus,
    ) -> Result<(), MirrorError> {
        let ns = static_pod
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("kube-system");
        let name = static_pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let err = |source| MirrorError::Api {
            pod: key(static_pod),
            source,
        };
        let want_hash = config_hash(static_pod);
        let existing = api.get_opt(name).await.map_err(err)?;
        let mut mirror = match existing {
            Some(p) if mirror_hash(&p).is_some() && mirror_hash(&p) == want_hash => p,
            Some(p) => {
                if mirror_hash(&p).is_none() {
                    // Not ours to delete: an ordinary pod took the name.
                    tracing::warn!(pod = %key(static_pod), "a non-mirror pod has the static pod's name; leaving it");
                    return Ok(());
                }
                tracing::info!(pod = %key(static_pod), "mirror pod is stale, recreating");
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                match api.delete(name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(err(e)),
                }
                api.create(
                    &PostParams::default(),
                    &mirror_pod(static_pod, node_name, node_uid),
                )
                .await
                .map_err(err)?
            }
            None => {
                tracing::info!(pod = %key(static_pod), "creating mirror pod");
                api.create(
                    &PostParams::default(),
                    &mirror_pod(static_pod, node_name, node_uid),
                )
                .await
                .map_err(err)?
            }
        };
        mirror.status = Some(status);
        api.replace_status(name, &PostParams::default(), &mirror)
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn delete_orphans(
        &self,
        client: &Client,
        node_name: &str,
        static_pods: &[(Pod, Option<PodStatus>)],
    ) -> Result<(), MirrorError> {
        let api: Api<Pod> = Api::all(client.clone());
        let lp = ListParams::default().fields(&format!("spec.nodeName={node_name}"));
        let list = api.list(&lp).await.map_err(|source| MirrorError::Api {
            pod: format!("*/* on {node_name}"),
            source,
        })?;
        let live: Vec<String> = static_pods.iter().map(|(p, _)| key(p)).collect();
        for p in list.items {
            // The field selector may be ignored by a minimal server: check the node here too.
            let on_node = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name);
            if !on_node || mirror_hash(&p).is_none() || live.contains(&key(&p)) {
                continue;
            }
            tracing::info!(pod = %key(&p), "deleting orphaned mirror pod");
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let napi: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            if let Err(e) = napi
                .delete(p.metadata.name.as_deref().unwrap_or_default(), &dp)
                .await
            {
                if !matches!(&e, kube::Error::Api(r) if r.code == 404) {
                    return Err(MirrorError::Api {
                        pod: key(&p),
                        source: e,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container_status::ContainerStatus;
    use std::time::SystemTime;

    fn rt(states: Vec<(ContainerState, Option<Terminated>)>) -> PodStatus {
        PodStatus {
            uid: "u".into(),
            started_at: SystemTime::now(),
            init_containers: Vec::new(),
            ephemeral_containers: Vec::new(),
            containers: states
                .into_iter()
                .enumerate()
                .map(|(i, (state, last))| ContainerStatus {
                    name: format!("c{i}"),
                    image: "i".into(),
                    container_id: "kiln-host://x".into(),
                    restart_count: 2,
                    ready: matches!(state, ContainerState::Running { .. }),
                    state,
                    last_termination: last,
                    restarting: false,
                    started: true,
                    restartable: false,
                    user: None,
                })
                .collect(),
            pod_ip: None,
            resize: Default::default(),
        }
    }

    fn term(code: i32) -> Terminated {
        Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: None,
            finished_at: SystemTime::now(),
        }
    }

    #[test]
    fn phases() {
        let running = ContainerState::Running {
            pid: 1,
            started_at: SystemTime::now(),
        };
        let crash = ContainerState::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: None,
        };
        assert_eq!(phase(&rt(vec![(running.clone(), None)])), "Running");
        assert_eq!(phase(&rt(vec![(crash.clone(), Some(term(1)))])), "Running");
        assert_eq!(
            phase(&rt(vec![(ContainerState::Terminated(term(0)), None)])),
            "Succeeded"
        );
        assert_eq!(
            phase(&rt(vec![(ContainerState::Terminated(term(2)), None)])),
            "Failed"
        );
        // The same exit shown before its restart back-off: the pod is still Running.
        let mut restarting = rt(vec![(ContainerState::Terminated(term(2)), Some(term(2)))]);
        restarting.containers[0].restarting = true;
        assert_eq!(phase(&restarting), "Running");
        let creating = ContainerState::Waiting {
            reason: "ContainerCreating".into(),
            message: None,
        };
        assert_eq!(phase(&rt(vec![(creating, None)])), "Pending");
    }

    #[test]
    fn status_reports_restarts_ready_and_host_ip() {
        let s = mirror_status(
            &rt(vec![(
                ContainerState::Running {
                    pid: 1,
                    started_at: SystemTime::now(),
                },
                Some(term(1)),
            )]),
            "10.1.0.2",
        );
        assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.2"));
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.restart_count, 2);
        assert!(c.ready);
        assert_eq!(
            c.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            1
        );
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn mirror_pod_is_annotated_and_owned() {
        let pod = crate::manifest::static_pod_from_bytes(
            b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: a\n    command: [x]\n",
            std::path::Path::new("a.yaml"),
            "n1",
        )
        .unwrap();
        let m = mirror_pod(&pod, "n1", "node-uid");
        assert!(m.metadata.uid.is_none());
        assert_eq!(mirror_hash(&m), config_hash(&pod));
        let o = &m.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
            ("Node", "n1", "node-uid")
        );
    }
}
