//! Memory and PID eviction: thresholds, host readings (on fake cgroup trees), ranking, messages, the
//! manager's conditions (each with its own transition) and admission under each condition.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::time::Instant;

use super::admission::{admit, reject_message, Evicted, Failure};
use super::host::{count_tasks, task_limit, working_set, HostResources};
use super::rank::{compare_memory, compare_pids, eviction_message_for, Candidate, PodUsage};
use super::thresholds::{format_decimal, parse_thresholds, Condition, Signal, ThresholdValue};
use super::*;
use crate::container_status::{ContainerState, ContainerStatus};
use crate::events::FakeRecorder;
use crate::runtime::PodStatus;

const MI: u64 = 1 << 20;

fn pod(name: &str, extra: serde_json::Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox"}]}
    });
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.get("spec")) {
        for (k, x) in extra.as_object().unwrap() {
            spec.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).unwrap()
}

/// A pod whose one container `main` requests `memory` (a Burstable pod).
fn requesting_memory(name: &str, memory: &str) -> Pod {
    pod(
        name,
        json!({"spec": {"containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"memory": memory}}}]}}),
    )
}

fn with_priority(name: &str, priority: i32) -> Pod {
    pod(name, json!({"spec": {"priority": priority}}))
}

fn memory_use(pod: Pod, bytes: u64) -> Candidate {
    Candidate {
        pod,
        usage: PodUsage {
            memory: bytes,
            ..Default::default()
        },
    }
}

fn names(c: &[Candidate]) -> Vec<String> {
    c.iter()
        .map(|c| c.pod.metadata.name.clone().unwrap())
        .collect()
}

#[test]
fn memory_and_pid_thresholds_are_enforced() {
    let t = parse_thresholds(
        "memory.available<100Mi,pid.available<5%,allocatableMemory.available<1Gi,nodefs.available<1Gi",
    )
    .unwrap();
    let signals: Vec<Signal> = t.enforced.iter().map(|t| t.signal).collect();
    assert_eq!(
        signals,
        [
            Signal::MemoryAvailable,
            Signal::PidAvailable,
            Signal::NodeFsAvailable
        ]
    );
    assert_eq!(t.enforced[0].value, ThresholdValue::Bytes(100 * MI));
    assert_eq!(t.enforced[1].value, ThresholdValue::Percent(5.0));
    assert_eq!(t.enforced[1].bytes(32768), 1638);
    assert_eq!(t.not_enforced, ["allocatableMemory.available"]);
    assert_eq!(
        Signal::MemoryAvailable.condition(),
        Condition::MemoryPressure
    );
    assert_eq!(Signal::PidAvailable.condition(), Condition::PidPressure);
    assert_eq!(Condition::PidPressure.as_str(), "PIDPressure");
    assert_eq!(format_decimal(4_193_000), "4193k");
    assert_eq!(format_decimal(32768), "32768");
    assert_eq!(format_decimal(2_000_000), "2M");
}

#[test]
fn working_sets_are_usage_less_inactive_file() {
    let v1 = "cache 100\ntotal_inactive_file 300\ntotal_rss 5\n";
    assert_eq!(working_set(Some(1000), v1, false), 700);
    // usage below inactive_file (counters read at different instants): none, not an underflow.
    assert_eq!(working_set(Some(200), v1, false), 0);
    let v2 = "anon 4000\nfile 3000\ninactive_file 1000\nactive_file 2000\n";
    assert_eq!(working_set(Some(9000), v2, true), 8000);
    // The v2 root cgroup has no memory.current: anon + file stands in, as runc.
    assert_eq!(working_set(None, v2, true), 6000);
    assert_eq!(task_limit("4194304\n", "192735\n"), Some(192735));
    assert_eq!(task_limit("32768", "x"), None);
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn status_with(container: &str, id: &str) -> PodStatus {
    PodStatus {
        uid: "u".into(),
        started_at: SystemTime::now(),
        containers: vec![ContainerStatus {
            name: container.into(),
            image: "busybox".into(),
            container_id: format!("containerd://{id}"),
            restart_count: 0,
            state: ContainerState::Running {
                pid: 0,
                started_at: SystemTime::now(),
            },
            last_termination: None,
            ready: true,
            restarting: false,
            started: true,
            restartable: false,
            user: None,
        }],
        init_containers: vec![],
        ephemeral_containers: vec![],
        pod_ip: None,
        resize: Default::default(),
    }
}

#[test]
fn host_resources_read_cgroup_v1_and_proc() {
    let dir = tempfile::tempdir().unwrap();
    let (cg, proc) = (dir.path().join("cgroup"), dir.path().join("proc"));
    write(&cg, "memory/memory.usage_in_bytes", "1000000\n");
    write(&cg, "memory/memory.stat", "total_inactive_file 400000\n");
    let hog = pod("hog", json!({}));
    let pod_dir = "memory/kubepods/besteffort/poduid-hog";
    write(&cg, &format!("{pod_dir}/memory.usage_in_bytes"), "5000");
    write(
        &cg,
        &format!("{pod_dir}/memory.stat"),
        "total_inactive_file 1000\n",
    );
    write(&cg, &format!("{pod_dir}/c1/memory.usage_in_bytes"), "4500");
    write(
        &cg,
        &format!("{pod_dir}/c1/memory.stat"),
        "total_inactive_file 500\n",
    );
    write(
        &cg,
        "pids/kubepods/besteffort/poduid-hog/pids.current",
        "7\n",
    );
    write(&proc, "sys/kernel/pid_max", "32768\n");
    write(&proc, "sys/kernel/threads-max", "192735\n");
    for (pid, tasks) in [("1", 1), ("42", 3)] {
        for t in 0..tasks {
            std::fs::create_dir_all(proc.join(pid).join("task").join(t.to_string())).unwrap();
        }
    }
    std::fs::create_dir_all(proc.join("self")).unwrap();
    assert_eq!(count_tasks(&proc), 4, "threads of numbered dirs only");

    let host = HostResources::under(&cg, &proc);
    assert_eq!(host.memory_working_set().unwrap(), 600_000);
    assert_eq!(
        host.pids().unwrap(),
        PidStats {
            max: 32768,
            running: 4
        }
    );
    let (total, containers) = host.pod_memory(&hog, &status_with("main", "c1"));
    assert_eq!(total, 4000);
    assert_eq!(containers, vec![("main".to_string(), 4000)]);
    assert_eq!(host.pod_processes(&hog), 7);
    // A pod without a cgroup uses nothing measurable.
    assert_eq!(host.pod_processes(&pod("other", json!({}))), 0);
    let err = HostResources::under(&dir.path().join("none"), &proc)
        .memory_working_set()
        .unwrap_err()
        .to_string();
    assert!(err.contains("memory.stat"), "{err}");
}

#[test]
fn host_resources_read_cgroup_v2() {
    let dir = tempfile::tempdir().unwrap();
    let cg = dir.path().join("cgroup");
    write(&cg, "cgroup.controllers", "cpu memory pids\n");
    write(
        &cg,
        "memory.stat",
        "anon 3000\nfile 2000\ninactive_file 500\n",
    );
    let p = requesting_memory("web", "1Mi");
    write(
        &cg,
        "kubepods/burstable/poduid-web/memory.current",
        "9000\n",
    );
    write(
        &cg,
        "kubepods/burstable/poduid-web/memory.stat",
        "anon 1\ninactive_file 2000\n",
    );
    write(&cg, "kubepods/burstable/poduid-web/pids.current", "3\n");
    let host = HostResources::under(&cg, dir.path());
    // The root has no memory.current: anon + file - inactive_file.
    assert_eq!(host.memory_working_set().unwrap(), 4500);
    assert_eq!(host.pod_memory(&p, &status_with("main", "gone")).0, 7000);
    assert_eq!(host.pod_processes(&p), 3);
}

#[test]
fn memory_ranking_puts_pods_over_their_request_first_then_low_priority_then_usage() {
    let within = memory_use(requesting_memory("within", "500Mi"), 400 * MI);
    let small = memory_use(pod("small", json!({})), 10 * MI);
    let big = memory_use(pod("big", json!({})), 300 * MI);
    let over = memory_use(requesting_memory("over", "100Mi"), 250 * MI);
    let low = memory_use(with_priority("low", -5), MI);
    let mut all = vec![within, small, big, over, low];
    all.sort_by(compare_memory);
    // Everyone but "within" exceeds its request; among those "low" has the lowest priority, then the
    // largest usage above request: big 300Mi, over 150Mi, small 10Mi.
    assert_eq!(names(&all), ["low", "big", "over", "small", "within"]);
}

#[test]
fn pid_ranking_is_priority_then_process_count() {
    let procs = |p: Pod, n: u64| Candidate {
        pod: p,
        usage: PodUsage {
            processes: n,
            ..Default::default()
        },
    };
    let mut all = vec![
        procs(pod("few", json!({})), 2),
        procs(with_priority("important", 1000), 500),
        procs(pod("many", json!({})), 90),
    ];
    all.sort_by(compare_pids);
    assert_eq!(names(&all), ["many", "few", "important"]);
}

#[test]
fn memory_and_pid_messages_are_upstreams() {
    let p = pod(
        "p",
        json!({"spec": {"containers": [
            {"name": "c", "image": "busybox"},
            {"name": "d", "image": "busybox", "resources": {"requests": {"memory": "64Mi"}}},
        ]}}),
    );
    let usage = PodUsage {
        memory: 340 * MI,
        containers: vec![
            super::rank::ContainerUsage {
                name: "c".into(),
                memory: 300 * MI,
                ..Default::default()
            },
            super::rank::ContainerUsage {
                name: "d".into(),
                memory: 40 * MI,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(
        eviction_message_for(Signal::MemoryAvailable, &p, &usage, 100 * MI, 50 * MI),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container c was using 300Mi, request is 0, has larger consumption of memory. "
    );
    assert_eq!(
        eviction_message_for(Signal::PidAvailable, &p, &usage, 1000, 950),
        "The node was low on resource: pids. Threshold quantity: 1k, available: 950. "
    );
}

#[test]
fn admission_follows_the_conditions_as_upstream() {
    let best_effort = pod("be", json!({}));
    let burstable = requesting_memory("burst", "10Mi");
    let tolerating = pod(
        "tol",
        json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/memory-pressure",
            "operator": "Exists", "effect": "NoSchedule"}]}}),
    );
    let tolerates_disk_only = pod(
        "toldisk",
        json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/disk-pressure",
            "operator": "Exists", "effect": "NoSchedule"}]}}),
    );
    let critical = pod(
        "crit",
        json!({"spec": {"priorityClassName": "system-node-critical"}}),
    );
    let memory = Pressure {
        memory: true,
        ..Default::default()
    };
    assert_eq!(admit(&Pressure::default(), &best_effort), None);
    assert_eq!(
        admit(&memory, &best_effort),
        Some(vec![Condition::MemoryPressure])
    );
    assert_eq!(
        admit(&memory, &tolerates_disk_only),
        Some(vec![Condition::MemoryPressure])
    );
    assert_eq!(admit(&memory, &burstable), None);
    assert_eq!(admit(&memory, &tolerating), None);
    assert_eq!(admit(&memory, &critical), None);
    let memory_and_disk = Pressure {
        memory: true,
        disk: true,
        pid: false,
    };
    let rejected = admit(&memory_and_disk, &burstable).unwrap();
    assert_eq!(
        reject_message(&rejected),
        "The node had condition: [MemoryPressure DiskPressure]. "
    );
    let pid = Pressure {
        pid: true,
        ..Default::default()
    };
    assert_eq!(
        reject_message(&admit(&pid, &burstable).unwrap()),
        "The node had condition: [PIDPressure]. "
    );
    assert_eq!(admit(&pid, &critical), None);
    assert_eq!(
        reject_message(&[Condition::MemoryPressure]),
        "The node had condition: [MemoryPressure]. "
    );
}

#[test]
fn node_status_reports_each_condition() {
    let cfg = crate::config::KubeletConfig::new("n1", "10.1.0.2".parse().unwrap());
    let mut s = crate::node::node_status(&cfg, &crate::node::HostInfo::default(), "x", None);
    let get = |s: &k8s_openapi::api::core::v1::NodeStatus, t: &str| {
        let c = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
            .clone();
        (c.status, c.reason.unwrap(), c.message.unwrap())
    };
    crate::node::set_pressure(
        &mut s,
        Pressure {
            memory: true,
            disk: false,
            pid: true,
        },
    );
    assert_eq!(
        get(&s, "MemoryPressure"),
        (
            "True".into(),
            "KubeletHasInsufficientMemory".into(),
            "kubelet has insufficient memory available".into()
        )
    );
    assert_eq!(get(&s, "DiskPressure").0, "False");
    assert_eq!(
        get(&s, "PIDPressure"),
        (
            "True".into(),
            "KubeletHasInsufficientPID".into(),
            "kubelet has insufficient PID available".into()
        )
    );
    crate::node::set_pressure(&mut s, Pressure::default());
    assert_eq!(
        get(&s, "MemoryPressure"),
        (
            "False".into(),
            "KubeletHasSufficientMemory".into(),
            "kubelet has sufficient memory available".into()
        )
    );
    assert_eq!(
        get(&s, "PIDPressure"),
        (
            "False".into(),
            "KubeletHasSufficientPID".into(),
            "kubelet has sufficient PID available".into()
        )
    );
}

// ---- the manager with fakes ----

/// Plenty of disk: only memory and PIDs matter here.
struct RoomyDisk;

impl Disk for RoomyDisk {
    fn fs_stats(&self, _: &Path) -> Result<FsStats, EvictionError> {
        Ok(FsStats {
            capacity: 1000 * MI,
            available: 900 * MI,
            device: 1,
        })
    }

    fn pod_usage(&self, _: &Pod, _: &PodStatus) -> PodUsage {
        PodUsage::default()
    }
}

#[derive(Default)]
struct FakeResources {
    working_set: Mutex<Option<u64>>,
    running: Mutex<u64>,
    /// By pod name: working set, processes.
    pods: Mutex<HashMap<String, (u64, u64)>>,
}

impl NodeResources for FakeResources {
    fn memory_working_set(&self) -> Result<u64, EvictionError> {
        self.working_set
            .lock()
            .unwrap()
            .ok_or_else(|| EvictionError::Read {
                path: "/sys/fs/cgroup/memory/memory.stat".into(),
                source: std::io::ErrorKind::NotFound.into(),
            })
    }

    fn pids(&self) -> Result<PidStats, EvictionError> {
        Ok(PidStats {
            max: 1000,
            running: *self.running.lock().unwrap(),
        })
    }

    fn pod_memory(&self, pod: &Pod, _: &PodStatus) -> (u64, Vec<(String, u64)>) {
        let name = pod.metadata.name.clone().unwrap();
        let ws = self.pods.lock().unwrap().get(&name).map_or(0, |p| p.0);
        (ws, vec![("main".into(), ws)])
    }

    fn pod_processes(&self, pod: &Pod) -> u64 {
        let name = pod.metadata.name.clone().unwrap();
        self.pods.lock().unwrap().get(&name).map_or(0, |p| p.1)
    }
}

#[derive(Default)]
struct Pods {
    pods: Mutex<Vec<Pod>>,
    killed: Mutex<Vec<String>>,
}

#[async_trait]
impl ActivePods for Pods {
    fn active_pods(&self) -> Vec<(Pod, PodStatus)> {
        self.pods
            .lock()
            .unwrap()
            .iter()
            .map(|p| (p.clone(), status_with("main", "c1")))
            .collect()
    }

    async fn kill(&self, uid: &str, _: Duration) -> Result<(), RuntimeError> {
        self.killed.lock().unwrap().push(uid.into());
        self.pods
            .lock()
            .unwrap()
            .retain(|p| p.metadata.uid.as_deref() != Some(uid));
        Ok(())
    }
}

#[derive(Default)]
struct Failer(Mutex<Vec<(String, Failure)>>);

#[async_trait]
impl PodFailer for Failer {
    async fn fail(&self, pod: &Pod, f: &Failure) -> Result<(), EvictionError> {
        self.0
            .lock()
            .unwrap()
            .push((pod.metadata.name.clone().unwrap(), f.clone()));
        Ok(())
    }
}

struct Rig {
    resources: Arc<FakeResources>,
    pods: Arc<Pods>,
    failer: Arc<Failer>,
    recorder: Arc<FakeRecorder>,
    pressure: tokio::sync::watch::Receiver<Pressure>,
    manager: Manager,
}

/// A node of 1000Mi memory and 1000 PIDs with `hard` thresholds and a 30 s transition period.
fn rig(hard: &str, pods: Vec<(Pod, u64, u64)>) -> Rig {
    let resources = Arc::new(FakeResources::default());
    *resources.working_set.lock().unwrap() = Some(500 * MI);
    *resources.running.lock().unwrap() = 100;
    let fake_pods = Arc::new(Pods::default());
    for (p, memory, processes) in pods {
        resources
            .pods
            .lock()
            .unwrap()
            .insert(p.metadata.name.clone().unwrap(), (memory, processes));
        fake_pods.pods.lock().unwrap().push(p);
    }
    let failer = Arc::new(Failer::default());
    let recorder = Arc::new(FakeRecorder::default());
    let (tx, rx) = pressure_channel();
    let cfg = EvictionConfig {
        hard: parse_thresholds(hard).unwrap().enforced,
        soft: Vec::new(),
        max_pod_grace_period: Duration::ZERO,
        pressure_transition_period: Duration::from_secs(30),
        monitoring_interval: Duration::from_secs(1),
        imagefs_dir: "/imagefs".into(),
    };
    let manager = Manager::new(
        cfg,
        Path::new("/nodefs"),
        Arc::new(RoomyDisk),
        fake_pods.clone(),
        failer.clone(),
        recorder.clone(),
        tx,
        Evicted::default(),
    )
    .with_resources(resources.clone(), 1000 * MI);
    Rig {
        resources,
        pods: fake_pods,
        failer,
        recorder,
        pressure: rx,
        manager,
    }
}

#[tokio::test]
async fn memory_pressure_evicts_the_pod_over_its_request_and_the_condition_outlasts_it() {
    let critical = pod(
        "critical",
        json!({"spec": {"priorityClassName": "system-node-critical"}}),
    );
    let mut r = rig(
        "memory.available<100Mi",
        vec![
            (requesting_memory("steady", "400Mi"), 350 * MI, 1),
            (pod("hog", json!({})), 300 * MI, 1),
            (critical, 900 * MI, 1),
        ],
    );
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let o = r.manager.synchronize(at(0)).await.unwrap();
    assert_eq!(o, Outcome::default(), "500Mi available of 1000Mi");
    assert_eq!(*r.pressure.borrow(), Pressure::default());

    *r.resources.working_set.lock().unwrap() = Some(950 * MI);
    let o = r.manager.synchronize(at(1)).await.unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/hog"));
    assert_eq!(
        *r.pressure.borrow(),
        Pressure {
            memory: true,
            ..Default::default()
        }
    );
    let failed = r.failer.0.lock().unwrap().clone();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, "hog");
    let message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
                   Container main was using 300Mi, request is 0, has larger consumption of memory. ";
    assert_eq!(failed[0].1.message, message);
    assert_eq!(failed[0].1.reason, "Evicted");
    let events = r.recorder.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].reason.as_str(), events[0].message.as_str()),
        ("Evicted", message)
    );

    // Relieved: the condition holds for the transition period, then goes.
    *r.resources.working_set.lock().unwrap() = Some(600 * MI);
    let o = r.manager.synchronize(at(2)).await.unwrap();
    assert!(o.pressure && o.evicted.is_none());
    assert!(r.pressure.borrow().memory);
    let o = r.manager.synchronize(at(31)).await.unwrap();
    assert_eq!(o, Outcome::default());
    assert_eq!(*r.pressure.borrow(), Pressure::default());
    assert_eq!(*r.pods.killed.lock().unwrap(), ["uid-hog"]);
}

#[tokio::test]
async fn pid_pressure_has_its_own_condition_and_transition() {
    let mut r = rig(
        "memory.available<100Mi,pid.available<10%",
        vec![
            (pod("forker", json!({})), MI, 300),
            (pod("quiet", json!({})), MI, 2),
            (with_priority("vip", 100), MI, 500),
        ],
    );
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // 950 of 1000 tasks: 50 left, below 100.
    *r.resources.running.lock().unwrap() = 950;
    let o = r.manager.synchronize(at(0)).await.unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/forker"));
    let failed = r.failer.0.lock().unwrap().clone();
    assert_eq!(
        failed[0].1.message,
        "The node was low on resource: pids. Threshold quantity: 100, available: 50. "
    );
    assert_eq!(
        *r.pressure.borrow(),
        Pressure {
            pid: true,
            ..Default::default()
        }
    );
    // Memory crosses later: both conditions, each released on its own schedule.
    *r.resources.running.lock().unwrap() = 100;
    *r.resources.working_set.lock().unwrap() = Some(950 * MI);
    r.manager.synchronize(at(20)).await.unwrap();
    assert!(r.pressure.borrow().pid && r.pressure.borrow().memory);
    *r.resources.working_set.lock().unwrap() = Some(100 * MI);
    r.manager.synchronize(at(31)).await.unwrap();
    assert_eq!(
        *r.pressure.borrow(),
        Pressure {
            memory: true,
            ..Default::default()
        },
        "PIDPressure ends 30 s after its last crossing, MemoryPressure later"
    );
    r.manager.synchronize(at(51)).await.unwrap();
    assert_eq!(*r.pressure.borrow(), Pressure::default());
}

#[tokio::test]
async fn memory_goes_first_and_a_failed_memory_reading_leaves_the_other_signals() {
    let mut r = rig(
        "memory.available<100Mi,pid.available<100",
        vec![
            (pod("fat", json!({})), 400 * MI, 1),
            (pod("forker", json!({})), MI, 500),
        ],
    );
    *r.resources.working_set.lock().unwrap() = Some(990 * MI);
    *r.resources.running.lock().unwrap() = 990;
    let o = r.manager.synchronize(Instant::now()).await.unwrap();
    assert_eq!(
        o.evicted.as_deref(),
        Some("default/fat"),
        "memory is reclaimed before PIDs"
    );
    *r.resources.working_set.lock().unwrap() = None;
    let o = r.manager.synchronize(Instant::now()).await.unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/forker"));
}
