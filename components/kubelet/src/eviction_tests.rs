use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::time::Instant;

use super::admission::{failed_status, Evicted, Failure, REJECT_MESSAGE};
use super::rank::{rank, Candidate, ContainerUsage, Measure, PodUsage};
use super::thresholds::{
    format_bytes, parse_bytes, parse_duration, parse_thresholds, Signal, Threshold, ThresholdValue,
};
use super::*;
use crate::container_status::{ContainerState, ContainerStatus};
use crate::events::{EventType, FakeRecorder};
use crate::runtime::PodStatus;

const MI: u64 = 1 << 20;

fn pod(name: &str, extra: serde_json::Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox"}]}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn requesting(name: &str, request: &str) -> Pod {
    pod(
        name,
        json!({"spec": {"containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"ephemeral-storage": request}}}]}}),
    )
}

fn usage(volumes: u64, rootfs: u64, logs: u64) -> PodUsage {
    PodUsage {
        volumes,
        containers: vec![ContainerUsage {
            name: "main".into(),
            rootfs,
            logs,
            memory: 0,
        }],
        ..Default::default()
    }
}

#[test]
fn thresholds_parse_like_upstream() {
    let t = parse_thresholds(thresholds::DEFAULT_EVICTION_HARD).unwrap();
    assert_eq!(
        t.enforced,
        vec![
            Threshold {
                signal: Signal::NodeFsAvailable,
                value: ThresholdValue::Percent(10.0),
                grace_period: Duration::ZERO,
            },
            Threshold {
                signal: Signal::ImageFsAvailable,
                value: ThresholdValue::Percent(15.0),
                grace_period: Duration::ZERO,
            },
        ]
    );
    let t = parse_thresholds("nodefs.available<1Gi, nodefs.inodesFree<5%,imagefs.available<0%")
        .unwrap();
    assert_eq!(
        t.enforced,
        vec![Threshold {
            signal: Signal::NodeFsAvailable,
            value: ThresholdValue::Bytes(1 << 30),
            grace_period: Duration::ZERO,
        }],
        "0% disables imagefs"
    );
    assert_eq!(t.not_enforced, vec!["nodefs.inodesFree".to_string()]);
    assert!(parse_thresholds("").unwrap().enforced.is_empty());
    for bad in [
        "nodefs.available>1Gi",
        "nodefs.available<1Gi,nodefs.available<2Gi",
        "disk.available<1Gi",
        "nodefs.available<lots",
        "nodefs.available<120%",
    ] {
        let e = parse_thresholds(bad).unwrap_err().to_string();
        assert!(e.starts_with("eviction threshold"), "{bad}: {e}");
    }
    let pct = Threshold {
        signal: Signal::NodeFsAvailable,
        value: ThresholdValue::Percent(10.0),
        grace_period: Duration::ZERO,
    };
    assert_eq!(pct.bytes(1000), 100);
}

#[test]
fn soft_thresholds_need_their_grace_periods() {
    let t = thresholds::parse_soft(
        "nodefs.available<15%,memory.available<1Gi,nodefs.inodesFree<5%",
        "nodefs.available=2m, memory.available=1m, nodefs.inodesFree=1m",
    )
    .unwrap();
    assert_eq!(
        t.enforced,
        vec![
            Threshold {
                signal: Signal::NodeFsAvailable,
                value: ThresholdValue::Percent(15.0),
                grace_period: Duration::from_secs(120),
            },
            Threshold {
                signal: Signal::MemoryAvailable,
                value: ThresholdValue::Bytes(1 << 30),
                grace_period: Duration::from_secs(60),
            }
        ]
    );
    assert!(thresholds::parse_soft("", "").unwrap().enforced.is_empty());
    for (soft, grace, why) in [
        (
            "nodefs.available<15%",
            "",
            "has no --eviction-soft-grace-period",
        ),
        ("nodefs.available<15%", "nodefs.available=0s", "more than 0"),
        ("", "imagefs.available=1m", "without a soft threshold"),
        (
            "nodefs.available<15%",
            "nodefs.available",
            "signal=duration",
        ),
    ] {
        let e = thresholds::parse_soft(soft, grace).unwrap_err().to_string();
        assert!(e.contains(why), "{soft} / {grace}: {e}");
    }
}

#[test]
fn quantities_and_durations() {
    assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
    assert_eq!(parse_bytes("500M"), Ok(500_000_000));
    assert_eq!(parse_bytes("1.5Ki"), Ok(1536));
    assert_eq!(parse_bytes("2e3"), Ok(2000));
    assert_eq!(parse_bytes("1500m"), Ok(2), "rounded up");
    assert_eq!(parse_bytes("123"), Ok(123));
    assert!(parse_bytes("1Qi").is_err());
    assert!(parse_bytes("").is_err());
    assert_eq!(format_bytes(24 * MI), "24Mi");
    assert_eq!(format_bytes(16_204 * 1024), "16204Ki");
    assert_eq!(format_bytes(1500), "1500");
    assert_eq!(format_bytes(0), "0");
    assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
    assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    assert!(parse_duration("5").is_err());
    assert!(parse_duration("5d").is_err());
}

#[test]
fn flags_resolve_eviction_settings() {
    let f = crate::Flags::parse_from([
        "kiln-kubelet",
        "--hostname-override=a",
        "--eviction-hard=nodefs.available<40Mi",
        "--eviction-pressure-transition-period=15s",
        "--eviction-monitoring-interval=1s",
        "--eviction-imagefs-dir=/srv/containerd",
        "--eviction-soft=imagefs.available<20%",
        "--eviction-soft-grace-period=imagefs.available=1m30s",
        "--eviction-max-pod-grace-period=20",
    ]);
    let c = crate::KubeletConfig::from_flags(f).unwrap().eviction;
    assert_eq!(
        c,
        EvictionConfig {
            hard: vec![Threshold {
                signal: Signal::NodeFsAvailable,
                value: ThresholdValue::Bytes(40 * MI),
                grace_period: Duration::ZERO,
            }],
            soft: vec![Threshold {
                signal: Signal::ImageFsAvailable,
                value: ThresholdValue::Percent(20.0),
                grace_period: Duration::from_secs(90),
            }],
            max_pod_grace_period: Duration::from_secs(20),
            pressure_transition_period: Duration::from_secs(15),
            monitoring_interval: Duration::from_secs(1),
            imagefs_dir: "/srv/containerd".into(),
        }
    );
    let defaults = crate::Flags::parse_from(["kiln-kubelet", "--hostname-override=a"]);
    assert_eq!(
        crate::KubeletConfig::from_flags(defaults).unwrap().eviction,
        EvictionConfig::default()
    );
    let bad = crate::Flags::parse_from([
        "kiln-kubelet",
        "--hostname-override=a",
        "--eviction-pressure-transition-period=soon",
    ]);
    let e = crate::KubeletConfig::from_flags(bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--eviction-pressure-transition-period"), "{e}");
}

#[test]
fn ranking_puts_pods_over_their_request_first_then_low_priority_then_usage() {
    let c = |p: Pod, u: PodUsage| Candidate { pod: p, usage: u };
    let ranked = rank(
        vec![
            c(requesting("within", "100Mi"), usage(50 * MI, 0, 0)),
            c(pod("small", json!({})), usage(10 * MI, 0, 0)),
            c(
                pod("important", json!({"spec": {"priority": 1000}})),
                usage(20 * MI, 0, 0),
            ),
            c(pod("big", json!({})), usage(0, 20 * MI, 10 * MI)),
        ],
        Measure::All,
    );
    let names: Vec<&str> = ranked
        .iter()
        .map(|c| c.pod.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["big", "small", "important", "within"]);
    // With a dedicated imagefs, nodefs pressure counts only volumes and logs: "big" uses 10Mi there.
    let u = usage(5 * MI, 20 * MI, 10 * MI);
    assert_eq!(u.total(Measure::VolumesAndLogs), 15 * MI);
    assert_eq!(u.total(Measure::Rootfs), 20 * MI);
    assert_eq!(u.total(Measure::All), 35 * MI);
}

#[test]
fn critical_pods_are_recognised() {
    use super::rank::is_critical;
    assert!(!is_critical(&pod("plain", json!({}))));
    assert!(is_critical(&pod(
        "node-critical",
        json!({"spec": {"priorityClassName": "system-node-critical"}})
    )));
    assert!(is_critical(&pod(
        "by-priority",
        json!({"spec": {"priority": 2_000_001_000}})
    )));
    assert!(is_critical(&pod(
        "mirror",
        json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})
    )));
    assert_eq!(
        rank::ephemeral_request(&pod(
            "init",
            json!({"spec": {"initContainers": [{"name": "i", "image": "x",
                "resources": {"requests": {"ephemeral-storage": "1Gi"}}}]}})
        )),
        1 << 30
    );
}

#[test]
fn eviction_message_names_the_threshold_and_offending_containers() {
    let p = requesting("hog", "1Mi");
    let m = rank::eviction_message(&p, &usage(40 * MI, MI, MI), 24 * MI, 16_204 * 1024);
    assert_eq!(
        m,
        "The node was low on resource: ephemeral-storage. Threshold quantity: 24Mi, available: 16204Ki. \
         Container main was using 2Mi, request is 1Mi, has larger consumption of ephemeral-storage. "
    );
}

#[test]
fn failed_status_terminates_containers() {
    let now = crate::node::now();
    let current: k8s_openapi::api::core::v1::PodStatus = serde_json::from_value(json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "", "ready": true,
            "restartCount": 0, "containerID": "containerd://abc",
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]
    }))
    .unwrap();
    let f = Failure {
        reason: REASON.into(),
        message: "The node was low on resource: ephemeral-storage. ".into(),
        disruption: true,
    };
    let s = failed_status(Some(current), &f, &now);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    let conds = s.conditions.unwrap();
    let get = |t: &str| conds.iter().find(|c| c.type_ == t).unwrap();
    assert_eq!(get("Ready").status, "False");
    assert_eq!(
        get("DisruptionTarget").reason.as_deref(),
        Some("TerminationByKubelet")
    );
    let c = &s.container_statuses.unwrap()[0];
    let t = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, c.ready), (137, false));
    assert!(t.started_at.is_some());
}

#[test]
fn writable_layers_come_from_mountinfo() {
    let mi = "1 0 8:1 / / rw - ext4 /dev/vda rw\n\
        812 30 0:90 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/abc123/rootfs rw,relatime - overlay overlay rw,lowerdir=/l1:/l2,upperdir=/var/lib/containerd/snapshots/42/fs,workdir=/var/lib/containerd/snapshots/42/work\n\
        813 30 0:91 / /mnt/other rw - overlay overlay rw,upperdir=/x,workdir=/y\n";
    let l = fs::writable_layers(mi);
    assert_eq!(l.len(), 1);
    assert_eq!(
        l["abc123"],
        PathBuf::from("/var/lib/containerd/snapshots/42/fs")
    );
}

#[test]
fn dir_usage_counts_allocated_blocks_once() {
    let d = tempfile::tempdir().unwrap();
    let data = vec![7u8; MI as usize];
    std::fs::create_dir_all(d.path().join("a/b")).unwrap();
    std::fs::write(d.path().join("a/b/f"), &data).unwrap();
    std::fs::hard_link(d.path().join("a/b/f"), d.path().join("a/link")).unwrap();
    let u = fs::dir_usage(d.path(), None);
    assert!((MI..2 * MI).contains(&u), "{u}");
    assert_eq!(fs::dir_usage(&d.path().join("missing"), None), 0);
    let st = fs::statvfs(d.path()).unwrap();
    assert!(st.capacity >= st.available && st.capacity > 0);
}

// ---- the manager, with fakes for every side effect ----

#[derive(Default)]
struct FakeDisk {
    fs: Mutex<HashMap<PathBuf, FsStats>>,
    usage: Mutex<HashMap<String, PodUsage>>,
}

impl FakeDisk {
    fn set(&self, path: &str, available: u64) {
        self.fs.lock().unwrap().insert(
            path.into(),
            FsStats {
                capacity: 100 * MI,
                available,
                device: if path == "/nodefs" { 1 } else { 2 },
            },
        );
    }
}

impl Disk for FakeDisk {
    fn fs_stats(&self, path: &Path) -> Result<FsStats, EvictionError> {
        self.fs
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .ok_or_else(|| EvictionError::Statvfs {
                path: path.display().to_string(),
                source: std::io::ErrorKind::NotFound.into(),
            })
    }

    fn pod_usage(&self, pod: &Pod, _: &PodStatus) -> PodUsage {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.usage
            .lock()
            .unwrap()
            .get(&name)
            .cloned()
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct FakePods {
    pods: Mutex<Vec<Pod>>,
    killed: Mutex<Vec<(String, Duration)>>,
}

fn running(uid: &str) -> PodStatus {
    PodStatus {
        uid: uid.into(),
        started_at: SystemTime::now(),
        containers: vec![ContainerStatus {
            name: "main".into(),
            image: "busybox".into(),
            container_id: "containerd://c1".into(),
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

#[async_trait]
impl ActivePods for FakePods {
    fn active_pods(&self) -> Vec<(Pod, PodStatus)> {
        self.pods
            .lock()
            .unwrap()
            .iter()
            .map(|p| (p.clone(), running(p.metadata.uid.as_deref().unwrap())))
            .collect()
    }

    async fn kill(&self, uid: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.killed.lock().unwrap().push((uid.into(), grace));
        self.pods
            .lock()
            .unwrap()
            .retain(|p| p.metadata.uid.as_deref() != Some(uid));
        Ok(())
    }
}

#[derive(Default)]
struct FakeFailer {
    failed: Mutex<Vec<(String, Failure)>>,
}

#[async_trait]
impl PodFailer for FakeFailer {
    async fn fail(&self, pod: &Pod, f: &Failure) -> Result<(), EvictionError> {
        self.failed
            .lock()
            .unwrap()
            .push((pod.metadata.name.clone().unwrap_or_default(), f.clone()));
        Ok(())
    }
}

struct Rig {
    disk: Arc<FakeDisk>,
    pods: Arc<FakePods>,
    failer: Arc<FakeFailer>,
    recorder: Arc<FakeRecorder>,
    pressure: watch::Receiver<Pressure>,
    evicted: Evicted,
    manager: Manager,
}

fn rig(pods: Vec<(Pod, u64)>) -> Rig {
    rig_with(pods, |_| {})
}

fn rig_with(pods: Vec<(Pod, u64)>, tweak: impl FnOnce(&mut EvictionConfig)) -> Rig {
    let disk = Arc::new(FakeDisk::default());
    disk.set("/nodefs", 50 * MI);
    disk.set("/imagefs", 50 * MI);
    let fake_pods = Arc::new(FakePods::default());
    for (p, used) in pods {
        disk.usage
            .lock()
            .unwrap()
            .insert(p.metadata.name.clone().unwrap(), usage(used, 0, 0));
        fake_pods.pods.lock().unwrap().push(p);
    }
    let failer = Arc::new(FakeFailer::default());
    let recorder = Arc::new(FakeRecorder::default());
    let (tx, rx) = pressure_channel();
    let evicted = Evicted::default();
    let mut cfg = EvictionConfig {
        hard: parse_thresholds("nodefs.available<20Mi,imagefs.available<10%")
            .unwrap()
            .enforced,
        soft: Vec::new(),
        max_pod_grace_period: Duration::ZERO,
        pressure_transition_period: Duration::from_secs(30),
        monitoring_interval: Duration::from_secs(1),
        imagefs_dir: "/imagefs".into(),
    };
    tweak(&mut cfg);
    let manager = Manager::new(
        cfg,
        Path::new("/nodefs"),
        disk.clone(),
        fake_pods.clone(),
        failer.clone(),
        recorder.clone(),
        tx,
        evicted.clone(),
    );
    Rig {
        disk,
        pods: fake_pods,
        failer,
        recorder,
        pressure: rx,
        evicted,
        manager,
    }
}

#[tokio::test]
async fn pressure_evicts_one_pod_per_pass_and_the_condition_outlasts_it() {
    let critical = pod(
        "critical",
        json!({"spec": {"priorityClassName": "system-node-critical"}}),
    );
    let mut r = rig(vec![
        (critical, 80 * MI),
        (pod("hog", json!({})), 30 * MI),
        (pod("calm", json!({})), MI),
    ]);
    let t0 = Instant::now();
    let o = r.manager.synchronize(t0).await.unwrap();
    assert_eq!(o, Outcome::default(), "no threshold crossed");
    assert!(r.pods.killed.lock().unwrap().is_empty());

    r.disk.set("/nodefs", 10 * MI);
    let o = r
        .manager
        .synchronize(t0 + Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        o,
        Outcome {
            pressure: true,
            evicted: Some("default/hog".into())
        },
        "the critical pod uses more but is never evicted"
    );
    assert!(r.pressure.borrow().disk);
    assert_eq!(
        *r.pods.killed.lock().unwrap(),
        vec![("uid-hog".to_string(), HARD_EVICTION_GRACE)]
    );
    assert!(r.evicted.contains("uid-hog"));
    let failed = r.failer.failed.lock().unwrap().clone();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, "hog");
    assert_eq!(failed[0].1.reason, "Evicted");
    assert!(failed[0].1.disruption);
    assert_eq!(
        failed[0].1.message,
        "The node was low on resource: ephemeral-storage. Threshold quantity: 20Mi, available: 10Mi. "
    );
    let events = r.recorder.take();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (
            events[0].type_,
            events[0].reason.as_str(),
            events[0].object.name.as_str()
        ),
        (EventType::Warning, "Evicted", "hog")
    );
    assert_eq!(events[0].message, failed[0].1.message);

    // Still under pressure: the next pass takes the next pod, never the critical one.
    let o = r
        .manager
        .synchronize(t0 + Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/calm"));
    let o = r
        .manager
        .synchronize(t0 + Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(
        o,
        Outcome {
            pressure: true,
            evicted: None
        }
    );
    assert_eq!(
        r.pods.pods.lock().unwrap().len(),
        1,
        "the critical pod runs"
    );

    // Relieved: the condition stays for the transition period after the last crossing (at 3 s).
    r.disk.set("/nodefs", 60 * MI);
    let o = r
        .manager
        .synchronize(t0 + Duration::from_secs(32))
        .await
        .unwrap();
    assert!(o.pressure);
    let o = r
        .manager
        .synchronize(t0 + Duration::from_secs(33))
        .await
        .unwrap();
    assert_eq!(o, Outcome::default());
    assert!(!r.pressure.borrow().disk);
}

#[tokio::test]
async fn soft_thresholds_evict_after_their_grace_period_with_a_bounded_pod_grace() {
    let mut r = rig_with(
        vec![
            (
                pod(
                    "quick",
                    json!({"spec": {"terminationGracePeriodSeconds": 3}}),
                ),
                30 * MI,
            ),
            (pod("plain", json!({})), 20 * MI),
        ],
        |c| {
            c.hard = parse_thresholds("nodefs.available<5Mi").unwrap().enforced;
            c.soft = thresholds::parse_soft("nodefs.available<20Mi", "nodefs.available=1m")
                .unwrap()
                .enforced;
            c.max_pod_grace_period = Duration::from_secs(10);
        },
    );
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    r.disk.set("/nodefs", 10 * MI);
    let pressure_only = Outcome {
        pressure: true,
        evicted: None,
    };
    assert_eq!(r.manager.synchronize(at(0)).await.unwrap(), pressure_only);
    assert_eq!(r.manager.synchronize(at(59)).await.unwrap(), pressure_only);
    let o = r.manager.synchronize(at(60)).await.unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/quick"));
    // A break in the crossing starts the grace period over.
    r.disk.set("/nodefs", 30 * MI);
    assert!(r
        .manager
        .synchronize(at(61))
        .await
        .unwrap()
        .evicted
        .is_none());
    r.disk.set("/nodefs", 10 * MI);
    assert_eq!(r.manager.synchronize(at(62)).await.unwrap(), pressure_only);
    assert_eq!(r.manager.synchronize(at(121)).await.unwrap(), pressure_only);
    let o = r.manager.synchronize(at(122)).await.unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/plain"));
    assert_eq!(
        *r.pods.killed.lock().unwrap(),
        vec![
            ("uid-quick".to_string(), Duration::from_secs(3)),
            ("uid-plain".to_string(), Duration::from_secs(10)),
        ],
        "the pod's own grace when shorter, else --eviction-max-pod-grace-period"
    );
}

#[tokio::test]
async fn a_hard_threshold_evicts_at_once_beside_a_soft_one() {
    let mut r = rig_with(vec![(pod("p", json!({})), 30 * MI)], |c| {
        c.hard = parse_thresholds("nodefs.available<5Mi").unwrap().enforced;
        c.soft = thresholds::parse_soft("nodefs.available<20Mi", "nodefs.available=1m")
            .unwrap()
            .enforced;
    });
    r.disk.set("/nodefs", 4 * MI);
    let o = r.manager.synchronize(Instant::now()).await.unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/p"));
    assert_eq!(
        *r.pods.killed.lock().unwrap(),
        vec![("uid-p".to_string(), HARD_EVICTION_GRACE)]
    );
    assert!(r.failer.failed.lock().unwrap()[0]
        .1
        .message
        .contains("Threshold quantity: 5Mi, available: 4Mi."));
}

#[tokio::test]
async fn imagefs_percentage_counts_writable_layers_when_dedicated() {
    let mut r = rig(vec![
        (pod("layers", json!({})), 0),
        (pod("volumes", json!({})), 40 * MI),
    ]);
    r.disk
        .usage
        .lock()
        .unwrap()
        .insert("layers".into(), usage(0, 30 * MI, 0));
    // 10 % of 100Mi is 10Mi: 5Mi available crosses it.
    r.disk.set("/imagefs", 5 * MI);
    let o = r.manager.synchronize(Instant::now()).await.unwrap();
    assert_eq!(o.evicted.as_deref(), Some("default/layers"));
    let msg = &r.failer.failed.lock().unwrap()[0].1.message;
    assert!(
        msg.contains(
            "Threshold quantity: 10Mi, available: 5Mi. Container main was using 30Mi, request is 0"
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn a_missing_filesystem_is_an_error_naming_it() {
    let mut r = rig(vec![]);
    r.disk.fs.lock().unwrap().remove(Path::new("/imagefs"));
    let e = r.manager.synchronize(Instant::now()).await.unwrap_err();
    assert!(e.to_string().contains("/imagefs"), "{e}");
}

// ---- admission ----

#[derive(Default)]
struct CountingRuntime {
    started: Mutex<Vec<String>>,
    updated: Mutex<Vec<String>>,
}

#[async_trait]
impl Runtime for CountingRuntime {
    fn handler(&self) -> &'static str {
        "fake"
    }
    fn version(&self) -> String {
        "fake://1".into()
    }
    async fn ready(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn run_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        self.started
            .lock()
            .unwrap()
            .push(pod.metadata.name.clone().unwrap());
        Ok(())
    }
    async fn stop_pod(&self, _: &str, _: Option<Duration>) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn update_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        self.updated
            .lock()
            .unwrap()
            .push(pod.metadata.name.clone().unwrap());
        Ok(())
    }
    fn pod_status(&self, _: &str) -> Option<PodStatus> {
        None
    }
    fn pod_uids(&self) -> Vec<String> {
        let started = self.started.lock().unwrap();
        started.iter().map(|n| format!("uid-{n}")).collect()
    }
}

#[tokio::test]
async fn a_running_pods_update_passes_the_gate_to_the_runtime() {
    let inner = Arc::new(CountingRuntime::default());
    let (_tx, rx) = pressure_channel();
    let g = gate(
        inner.clone(),
        rx,
        Evicted::default(),
        Arc::new(FakeFailer::default()),
        Arc::new(FakeRecorder::default()),
    );
    let p = pod("running", json!({}));
    g.run_pod(&p).await.unwrap();
    g.update_pod(&p).unwrap();
    assert_eq!(*inner.updated.lock().unwrap(), vec!["running".to_string()]);
}

#[tokio::test]
async fn under_pressure_only_critical_pods_are_admitted_and_evicted_pods_never_restart() {
    let inner = Arc::new(CountingRuntime::default());
    let failer = Arc::new(FakeFailer::default());
    let recorder = Arc::new(FakeRecorder::default());
    let (tx, rx) = pressure_channel();
    let evicted = Evicted::default();
    let g = gate(
        inner.clone(),
        rx,
        evicted.clone(),
        failer.clone(),
        recorder.clone(),
    );
    g.run_pod(&pod("before", json!({}))).await.unwrap();
    let eviction = Failure {
        reason: "Evicted".into(),
        message: "The node was low on resource: ephemeral-storage. ".into(),
        disruption: true,
    };
    evicted.insert("uid-gone", &eviction);
    // The workload loop starts an evicted pod only when the API shows it non-terminal (a stale status
    // landed after the Failed one): refused, and its Failed status posted again (at most every 5 s).
    let gone = pod("gone", json!({}));
    assert!(g.run_pod(&gone).await.is_err());
    assert!(g.run_pod(&gone).await.is_err());
    let reposted = after_spawned_tasks(|| failer.failed.lock().unwrap().clone()).await;
    assert_eq!(reposted, vec![("gone".to_string(), eviction)]);
    failer.failed.lock().unwrap().clear();

    tx.send_replace(Pressure {
        disk: true,
        ..Default::default()
    });
    let late = pod("late", json!({}));
    let e = g.run_pod(&late).await.unwrap_err().to_string();
    assert!(
        e.contains("default/late") && e.contains("DiskPressure"),
        "{e}"
    );
    g.run_pod(&pod(
        "critical",
        json!({"spec": {"priorityClassName": "system-node-critical"}}),
    ))
    .await
    .unwrap();
    // Asked again (the workload loop retries until it sees the Failed phase): rejected once only.
    assert!(g.run_pod(&late).await.is_err());
    tx.send_replace(Pressure::default());
    assert!(
        g.run_pod(&late).await.is_err(),
        "a rejected pod stays rejected"
    );
    assert_eq!(*inner.started.lock().unwrap(), ["before", "critical"]);

    let failed = after_spawned_tasks(|| failer.failed.lock().unwrap().clone()).await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, "late");
    assert_eq!(
        failed[0].1,
        Failure {
            reason: "Evicted".into(),
            message: format!("Pod was rejected: {REJECT_MESSAGE}"),
            disruption: false,
        }
    );
    assert_eq!(REJECT_MESSAGE, "The node had condition: [DiskPressure]. ");
    let events = recorder.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].reason.as_str(), events[0].message.as_str()),
        ("Evicted", REJECT_MESSAGE)
    );
}

/// Failed statuses are posted by spawned tasks: yields until one has run, then a little longer so that a
/// second one (which must not exist) would show too. Bounded.
async fn after_spawned_tasks<T>(f: impl Fn() -> Vec<T>) -> Vec<T> {
    for _ in 0..1000 {
        if !f().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    f()
}

#[tokio::test]
async fn a_pod_whose_host_port_is_taken_is_rejected_with_node_ports() {
    let inner = Arc::new(CountingRuntime::default());
    let failer = Arc::new(FakeFailer::default());
    let recorder = Arc::new(FakeRecorder::default());
    let (_tx, rx) = pressure_channel();
    let g = gate(
        inner.clone(),
        rx,
        Evicted::default(),
        failer.clone(),
        recorder.clone(),
    );
    let with_port = |name: &str, port: i32| {
        pod(
            name,
            json!({"spec": {"containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 80, "hostPort": port}]}]}}),
        )
    };
    g.run_pod(&with_port("first", 21017)).await.unwrap();
    let e = g
        .run_pod(&with_port("second", 21017))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("default/second") && e.contains("host port"),
        "{e}"
    );
    g.run_pod(&with_port("other", 21018)).await.unwrap();
    // The pod holding the port may run again (a restart of its sandbox is not a new admission).
    g.run_pod(&with_port("first", 21017)).await.unwrap();
    assert_eq!(*inner.started.lock().unwrap(), ["first", "other", "first"]);

    let failed = after_spawned_tasks(|| failer.failed.lock().unwrap().clone()).await;
    assert_eq!(
        failed,
        [(
            "second".to_string(),
            Failure {
                reason: "NodePorts".into(),
                message: "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports".into(),
                disruption: false,
            }
        )]
    );
    let events = recorder.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, "NodePorts");
}

#[tokio::test]
async fn a_pod_with_a_forbidden_sysctl_is_rejected_with_sysctl_forbidden() {
    let inner = Arc::new(CountingRuntime::default());
    let failer = Arc::new(FakeFailer::default());
    let recorder = Arc::new(FakeRecorder::default());
    let (_tx, rx) = pressure_channel();
    let allow = crate::sysctl_admission::Allowlist::new(Some((6, 1)), &[]).unwrap();
    let g = super::admission::AdmissionGate::new(
        inner.clone(),
        rx,
        Evicted::default(),
        failer.clone(),
        recorder.clone(),
    )
    .with_handlers(vec![Arc::new(allow)]);
    let sysctl = |name: &str, sysctl: &str| {
        pod(
            name,
            json!({"spec": {"securityContext": {"sysctls": [{"name": sysctl, "value": "1"}]}}}),
        )
    };
    g.run_pod(&sysctl("safe", "net.ipv4.tcp_syncookies"))
        .await
        .unwrap();
    let unsafe_pod = sysctl("unsafe", "kernel.msgmax");
    let e = g.run_pod(&unsafe_pod).await.unwrap_err().to_string();
    assert!(e.contains("default/unsafe"), "{e}");
    assert!(g.run_pod(&unsafe_pod).await.is_err(), "stays rejected");
    assert_eq!(*inner.started.lock().unwrap(), ["safe"]);
    let message = r#"forbidden sysctl: "kernel.msgmax" not allowlisted"#;
    let failed = after_spawned_tasks(|| failer.failed.lock().unwrap().clone()).await;
    assert_eq!(
        failed,
        vec![(
            "unsafe".to_string(),
            Failure {
                reason: "SysctlForbidden".into(),
                message: format!("Pod was rejected: {message}"),
                disruption: false,
            }
        )]
    );
    let events = recorder.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].reason.as_str(), events[0].message.as_str()),
        ("SysctlForbidden", message)
    );
}
