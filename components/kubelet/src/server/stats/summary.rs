//! `/stats/summary` as upstream's statsapi Summary JSON (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`):
//! the node's cpu/memory/fs and one entry per running pod with its containers. Pure: a sample pair
//! and the node's pods in, JSON out.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::super::pods::NodePod;
use super::{nano_cores, rfc3339, ContainerSample, CpuSample, MemorySample, Sample};
use crate::container_status::{ContainerState, ContainerStatus};

fn cpu_json(cur: &CpuSample, nano: Option<u64>) -> Value {
    let mut m = Map::new();
    m.insert("time".into(), json!(rfc3339(cur.time)));
    if let Some(n) = nano {
        m.insert("usageNanoCores".into(), json!(n));
    }
    m.insert("usageCoreNanoSeconds".into(), json!(cur.usage_core_nanos));
    Value::Object(m)
}

fn memory_json(m: &MemorySample) -> Value {
    let mut o = Map::new();
    o.insert("time".into(), json!(rfc3339(m.time)));
    for (k, v) in [
        ("availableBytes", m.available),
        ("usageBytes", m.usage),
        ("workingSetBytes", Some(m.working_set)),
        ("rssBytes", m.rss),
        ("pageFaults", m.page_faults),
        ("majorPageFaults", m.major_page_faults),
    ] {
        if let Some(v) = v {
            o.insert(k.into(), json!(v));
        }
    }
    Value::Object(o)
}

/// The ids of the containers that run now (`<runtime>://<id>` in the status), so stats of exited
/// containers a runtime still lists are left out, as upstream's CRI stats provider does.
fn running_ids(pods: &[NodePod]) -> HashSet<String> {
    pods.iter()
        .filter_map(|p| p.status.as_ref().map(|s| (p, s)))
        .flat_map(|(p, s)| {
            s.containers
                .iter()
                .chain(s.init_containers.iter())
                .map(move |c| (p, c))
        })
        .filter(|(_, c)| matches!(c.state, ContainerState::Running { .. }))
        .map(|(p, c)| container_key(p, c))
        .collect()
}

/// How a running container's sample is keyed: its runtime id (`<runtime>://<id>` in the
/// status), or `<pod uid>/<name>` for a `kiln-host` process, which has none.
pub fn container_key(p: &NodePod, c: &ContainerStatus) -> String {
    match c.container_id.split_once("://") {
        Some((_, id)) => id.to_string(),
        None if c.container_id.is_empty() => format!("{}/{}", p.uid(), c.name),
        None => c.container_id.clone(),
    }
}

/// The running containers' samples, grouped by pod uid.
pub fn by_pod<'a>(
    sample: &'a Sample,
    pods: &[NodePod],
) -> BTreeMap<String, Vec<&'a ContainerSample>> {
    let running = running_ids(pods);
    let mut out: BTreeMap<String, Vec<&ContainerSample>> = BTreeMap::new();
    for c in &sample.containers {
        if running.contains(&c.id) {
            out.entry(c.pod_uid.clone()).or_default().push(c);
        }
    }
    out
}

/// Sums of the containers' CPU counters and memory (a pod's usage without its pause container).
pub fn pod_cpu(containers: &[&ContainerSample]) -> Option<CpuSample> {
    let cpus: Vec<&CpuSample> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    let time = cpus.iter().map(|c| c.time).max()?;
    Some(CpuSample {
        time,
        usage_core_nanos: cpus.iter().map(|c| c.usage_core_nanos).sum(),
    })
}

pub fn pod_memory(containers: &[&ContainerSample]) -> Option<MemorySample> {
    let mems: Vec<&MemorySample> = containers
        .iter()
        .filter_map(|c| c.memory.as_ref())
        .collect();
    let time = mems.iter().map(|m| m.time).max()?;
    let sum = |f: fn(&MemorySample) -> Option<u64>| -> Option<u64> {
        mems.iter().map(|m| f(m)).sum::<Option<u64>>()
    };
    Some(MemorySample {
        time,
        working_set: mems.iter().map(|m| m.working_set).sum(),
        usage: sum(|m| m.usage),
        rss: sum(|m| m.rss),
        available: None,
        page_faults: sum(|m| m.page_faults),
        major_page_faults: sum(|m| m.major_page_faults),
    })
}

pub fn render(node_name: &str, prev: Option<&Sample>, cur: &Sample, pods: &[NodePod]) -> Value {
    let mut node = Map::new();
    node.insert("nodeName".into(), json!(node_name));
    if let Some(t) = cur.node.boot_time {
        node.insert("startTime".into(), json!(rfc3339(t)));
    }
    if let Some(c) = &cur.node.cpu {
        let nano = prev
            .and_then(|p| p.node.cpu.as_ref())
            .and_then(|p| nano_cores(p, c));
        node.insert("cpu".into(), cpu_json(c, nano));
    }
    if let Some(m) = &cur.node.memory {
        node.insert("memory".into(), memory_json(m));
    }
    if let Some(fs) = &cur.node.fs {
        let mut o = Map::new();
        o.insert("time".into(), json!(rfc3339(fs.time)));
        o.insert("availableBytes".into(), json!(fs.available));
        o.insert("capacityBytes".into(), json!(fs.capacity));
        o.insert("usedBytes".into(), json!(fs.used));
        if let (Some(total), Some(free)) = (fs.inodes, fs.inodes_free) {
            o.insert("inodesFree".into(), json!(free));
            o.insert("inodes".into(), json!(total));
            o.insert("inodesUsed".into(), json!(total.saturating_sub(free)));
        }
        node.insert("fs".into(), Value::Object(o));
    }
    let prev_cpu: HashMap<&str, &CpuSample> = prev
        .map(|p| {
            p.containers
                .iter()
                .filter_map(|c| c.cpu.as_ref().map(|cpu| (c.id.as_str(), cpu)))
                .collect()
        })
        .unwrap_or_default();
    let grouped = by_pod(cur, pods);
    let mut items = Vec::new();
    for p in pods {
        let Some(status) = &p.status else { continue };
        let containers = grouped.get(p.uid()).cloned().unwrap_or_default();
        if containers.is_empty() {
            continue;
        }
        let mut entry = Map::new();
        entry.insert(
            "podRef".into(),
            json!({"name": p.name(), "namespace": p.namespace(), "uid": p.uid()}),
        );
        entry.insert("startTime".into(), json!(rfc3339(status.started_at)));
        let mut pod_nano: Option<u64> = Some(0);
        let mut list = Vec::new();
        for c in &containers {
            let mut e = Map::new();
            e.insert("name".into(), json!(c.name));
            let started = status.containers.iter().find_map(|s| match s.state {
                ContainerState::Running { started_at, .. } if s.name == c.name => Some(started_at),
                _ => None,
            });
            if let Some(t) = started {
                e.insert("startTime".into(), json!(rfc3339(t)));
            }
            let nano = c
                .cpu
                .as_ref()
                .and_then(|cur| prev_cpu.get(c.id.as_str()).and_then(|p| nano_cores(p, cur)));
            pod_nano = pod_nano.zip(nano).map(|(a, b)| a + b);
            if let Some(cpu) = &c.cpu {
                e.insert("cpu".into(), cpu_json(cpu, nano));
            }
            if let Some(m) = &c.memory {
                e.insert("memory".into(), memory_json(m));
            }
            if let Some(used) = c.rootfs_used {
                let time = c.cpu.map(|x| x.time).or(c.memory.map(|m| m.time));
                if let Some(t) = time {
                    e.insert(
                        "rootfs".into(),
                        json!({"time": rfc3339(t), "usedBytes": used}),
                    );
                }
            }
            list.push(Value::Object(e));
        }
        entry.insert("containers".into(), Value::Array(list));
        if let Some(cpu) = pod_cpu(&containers) {
            entry.insert("cpu".into(), cpu_json(&cpu, pod_nano));
        }
        if let Some(m) = pod_memory(&containers) {
            entry.insert("memory".into(), memory_json(&m));
        }
        items.push(Value::Object(entry));
    }
    json!({"node": Value::Object(node), "pods": items})
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::super::pods::PodRuntime;
    use super::super::tests::at;
    use super::super::{FsSample, NodeSample};
    use super::*;
    use crate::runtime::PodStatus;
    use k8s_openapi::api::core::v1::Pod;

    pub fn running(name: &str, id: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            image: "img".into(),
            container_id: format!("containerd://{id}"),
            restart_count: 0,
            state: ContainerState::Running {
                pid: 1,
                started_at: at(1),
            },
            last_termination: None,
            ready: true,
            restarting: false,
            started: true,
            restartable: false,
            user: None,
        }
    }

    pub fn node_pod(ns: &str, name: &str, uid: &str, containers: Vec<ContainerStatus>) -> NodePod {
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": ns, "uid": uid}}),
        )
        .unwrap();
        NodePod {
            pod,
            status: Some(PodStatus {
                uid: uid.into(),
                started_at: at(0),
                containers,
                init_containers: vec![],
                ephemeral_containers: vec![],
                pod_ip: None,
                resize: Default::default(),
            }),
            runtime: PodRuntime::Cri,
        }
    }

    pub fn container(
        id: &str,
        uid: &str,
        name: &str,
        t: u64,
        cpu_s: u64,
        ws: u64,
    ) -> ContainerSample {
        ContainerSample {
            id: id.into(),
            namespace: "default".into(),
            pod: "web".into(),
            pod_uid: uid.into(),
            name: name.into(),
            cpu: Some(CpuSample {
                time: at(t),
                usage_core_nanos: cpu_s * 1_000_000_000,
            }),
            memory: Some(MemorySample {
                time: at(t),
                working_set: ws,
                usage: Some(ws + 100),
                rss: Some(ws / 2),
                available: None,
                page_faults: Some(7),
                major_page_faults: Some(0),
            }),
            rootfs_used: Some(4096),
        }
    }

    fn sample(t: u64, a_cpu: u64, b_cpu: u64) -> Sample {
        Sample {
            node: NodeSample {
                cpu: Some(CpuSample {
                    time: at(t),
                    usage_core_nanos: (t + 100) * 1_000_000_000,
                }),
                memory: Some(MemorySample {
                    time: at(t),
                    working_set: 1 << 30,
                    usage: Some(2 << 30),
                    rss: Some(1 << 29),
                    available: Some(3 << 30),
                    page_faults: None,
                    major_page_faults: None,
                }),
                fs: Some(FsSample {
                    time: at(t),
                    capacity: 1000,
                    available: 600,
                    used: 400,
                    inodes: Some(50),
                    inodes_free: Some(20),
                }),
                boot_time: Some(at(0)),
            },
            containers: vec![
                container("a", "u1", "app", t, a_cpu, 1000),
                container("b", "u1", "side", t, b_cpu, 500),
                // An exited container the runtime still lists.
                container("old", "u1", "app", t, 99, 1),
            ],
            container_error: false,
        }
    }

    #[test]
    fn summary_has_node_and_running_containers_with_rates() {
        let pods = vec![node_pod(
            "default",
            "web",
            "u1",
            vec![running("app", "a"), running("side", "b")],
        )];
        let v = render("n1", Some(&sample(0, 1, 0)), &sample(10, 6, 1), &pods);
        let node = &v["node"];
        assert_eq!(node["nodeName"], "n1");
        // The node used 10 core-seconds in 10 s: one core.
        assert_eq!(node["cpu"]["usageNanoCores"], 1_000_000_000u64);
        assert_eq!(node["cpu"]["usageCoreNanoSeconds"], 110_000_000_000u64);
        assert_eq!(node["memory"]["workingSetBytes"], 1u64 << 30);
        assert_eq!(node["memory"]["availableBytes"], 3u64 << 30);
        assert_eq!(node["fs"]["inodesUsed"], 30);
        assert_eq!(node["startTime"], "2023-11-14T22:13:20Z");
        let pod = &v["pods"][0];
        assert_eq!(
            pod["podRef"],
            json!({"name": "web", "namespace": "default", "uid": "u1"})
        );
        let cs = pod["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2, "the exited container is left out");
        assert_eq!(cs[0]["name"], "app");
        assert_eq!(cs[0]["cpu"]["usageNanoCores"], 500_000_000);
        assert_eq!(cs[1]["cpu"]["usageNanoCores"], 100_000_000);
        assert_eq!(cs[0]["startTime"], "2023-11-14T22:13:21Z");
        assert_eq!(pod["cpu"]["usageNanoCores"], 600_000_000);
        assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 7_000_000_000u64);
        assert_eq!(pod["memory"]["workingSetBytes"], 1500);
        assert_eq!(pod["memory"]["usageBytes"], 1700);
    }

    #[test]
    fn without_a_previous_sample_there_is_no_rate() {
        let pods = vec![node_pod("default", "web", "u1", vec![running("app", "a")])];
        let v = render("n1", None, &sample(10, 6, 1), &pods);
        assert!(v["node"]["cpu"].get("usageNanoCores").is_none());
        assert!(v["pods"][0]["cpu"].get("usageNanoCores").is_none());
        assert_eq!(
            v["pods"][0]["containers"][0]["cpu"]["usageCoreNanoSeconds"],
            6_000_000_000u64
        );
    }
}
