//! kiln-scheduler against an in-process kiln-apiserver on a real etcd: FailedScheduling messages and
//! conditions, binding, leader election, health and metrics.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kiln_testkit::{create_node, eventually, Cluster};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONTROL_PLANE_TAINT: &str = "node-role.kubernetes.io/control-plane";

fn options(c: &Cluster, extra: &[&str]) -> kiln_scheduler::Options {
    let mut args = vec![
        "kiln-scheduler".to_string(),
        format!("--kubeconfig={}", c.admin_kubeconfig.display()),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    kiln_scheduler::Options::parse_from(args)
}

async fn three_nodes(client: &kube::Client, small_cpu: &str) {
    create_node(
        client,
        "cp",
        "8",
        json!([{"key": CONTROL_PLANE_TAINT, "effect": "NoSchedule"}]),
    )
    .await;
    create_node(client, "host1", small_cpu, json!([])).await;
    create_node(client, "host2", "2", json!([])).await;
}

fn pod(name: &str, spec_extra: serde_json::Value, cpu: &str) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.local/app:1",
        "resources": {"requests": {"cpu": cpu}}}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec
    }))
    .unwrap()
}

/// The message of the newest event with this reason for the pod.
async fn event_message(client: &kube::Client, pod: &str, reason: &str) -> Option<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.ok()?;
    list.items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(pod) && e.reason.as_deref() == Some(reason)
        })
        .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0))
        .and_then(|e| e.message)
}

async fn wait_failed_scheduling(client: &kube::Client, pod: &str, expected: &str) {
    eventually(&format!("FailedScheduling {expected:?}"), || async {
        event_message(client, pod, "FailedScheduling")
            .await
            .filter(|m| m == expected)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_scheduling_messages_and_condition() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    three_nodes(&client, "2").await;
    let _scheduler = kiln_scheduler::start(options(&c, &["--leader-elect=false"]))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    pods.create(&PostParams::default(), &pod("too-big", json!({}), "4"))
        .await
        .unwrap();
    let too_big = "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";
    wait_failed_scheduling(&client, "too-big", too_big).await;

    pods.create(
        &PostParams::default(),
        &pod("nowhere", json!({"nodeSelector": {"disk": "ssd"}}), "100m"),
    )
    .await
    .unwrap();
    wait_failed_scheduling(
        &client,
        "nowhere",
        "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
    )
    .await;

    // The condition kubectl shows under Conditions, and the event under Events.
    let condition = eventually("PodScheduled=False", || async {
        let p = pods.get("too-big").await.ok()?;
        p.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(condition.message.as_deref(), Some(too_big));
    let describe = c
        .kubectl_ok(&["describe", "pod", "too-big", "-n", "default"])
        .await;
    assert!(
        describe.contains("FailedScheduling") && describe.contains("Insufficient cpu"),
        "kubectl describe shows the event:\n{describe}"
    );
    assert!(describe.contains("default-scheduler"), "{describe}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_a_pending_pod_to_the_only_fitting_node() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    three_nodes(&client, "500m").await;
    let _scheduler = kiln_scheduler::start(options(&c, &["--leader-elect=false"]))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("web-1", json!({}), "1"))
        .await
        .unwrap();
    let node = eventually("web-1 bound", || async {
        pods.get("web-1").await.ok()?.spec?.node_name
    })
    .await;
    assert_eq!(node, "host2");
    let message = eventually("Scheduled event", || async {
        event_message(&client, "web-1", "Scheduled").await
    })
    .await;
    assert_eq!(message, "Successfully assigned default/web-1 to host2");

    // Unschedulable until a fitting node appears, then scheduled there.
    pods.create(&PostParams::default(), &pod("web-2", json!({}), "3"))
        .await
        .unwrap();
    wait_failed_scheduling(
        &client,
        "web-2",
        "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
    )
    .await;
    create_node(&client, "host3", "4", json!([])).await;
    let node = eventually("web-2 bound", || async {
        pods.get("web-2").await.ok()?.spec?.node_name
    })
    .await;
    assert_eq!(node, "host3");
}

async fn lease_holder(client: &kube::Client) -> Option<(String, i32)> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let spec = leases.get_opt("kube-scheduler").await.ok()??.spec?;
    Some((spec.holder_identity?, spec.lease_transitions.unwrap_or(0)))
}

fn is_leader(s: &kiln_scheduler::RunningScheduler) -> bool {
    s.metrics()
        .render()
        .contains("leader_election_master_status{name=\"kube-scheduler\"} 1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_hand_over() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let flags = [
        "--leader-elect",
        "--leader-elect-lease-duration=2s",
        "--leader-elect-renew-deadline=1500ms",
        "--leader-elect-retry-period=200ms",
    ];
    let a = kiln_scheduler::start(options(&c, &flags)).await.unwrap();
    let b = kiln_scheduler::start(options(&c, &flags)).await.unwrap();
    let (first, transitions) = eventually("a lease holder", || lease_holder(&client)).await;
    assert_eq!(transitions, 0);
    eventually("one leader", || async {
        (is_leader(&a) != is_leader(&b)).then_some(())
    })
    .await;
    // Several renew periods later the same single leader still holds it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(is_leader(&a) != is_leader(&b), "exactly one leader");
    assert_eq!(lease_holder(&client).await.unwrap().0, first);

    let survivor = if is_leader(&a) {
        drop(a);
        b
    } else {
        drop(b);
        a
    };
    let (second, transitions) = eventually("a new holder", || async {
        lease_holder(&client).await.filter(|(h, _)| *h != first)
    })
    .await;
    assert_eq!(transitions, 1);
    assert!(!second.is_empty());
    eventually("survivor leads", || async {
        is_leader(&survivor).then_some(())
    })
    .await;
}

/// A busy process keeps its lease. Its renewals run on the election's own thread and client, so a
/// runtime whose workers are all tied up (controllers doing CPU work under load) does not delay
/// them; a second candidate, waiting a lease duration for the record to go stale, never takes over.
/// (Renewals on the process's own runtime stalled for the whole block, and the other took over.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_go_on_while_the_process_is_busy() {
    use kiln_common::leader_election::own_thread::Candidate;
    use kiln_common::leader_election::LeaderElectionConfig;
    let c = Cluster::start().await;
    let client = c.admin().await;
    let kube_config = kiln_common::client::config(Some(&c.admin_kubeconfig))
        .await
        .unwrap();
    let config = |identity: &str| {
        let mut l = LeaderElectionConfig::new("kube-system", "busy-process", identity);
        l.lease_duration = Duration::from_secs(2);
        l.renew_deadline = Duration::from_millis(1500);
        l.retry_period = Duration::from_millis(200);
        l
    };
    let holder = |client: kube::Client| async move {
        let leases: Api<Lease> = Api::namespaced(client, "kube-system");
        let spec = leases.get_opt("busy-process").await.ok()??.spec?;
        Some((spec.holder_identity?, spec.lease_transitions.unwrap_or(0)))
    };

    let (acquired_tx, acquired_rx) = tokio::sync::oneshot::channel();
    let a_config = kube_config.clone();
    let a = std::thread::spawn(move || {
        // Process A: one worker, like a small controller host.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut leadership = Candidate::spawn(a_config, config("a"))
                .unwrap()
                .acquired()
                .await
                .unwrap();
            acquired_tx.send(()).unwrap();
            // Four lease durations of work that never yields, on the worker and on this thread.
            let hog = tokio::spawn(async { std::thread::sleep(Duration::from_secs(8)) });
            std::thread::sleep(Duration::from_secs(8));
            hog.await.unwrap();
            let lost = tokio::time::timeout(Duration::from_millis(100), leadership.lost()).await;
            assert!(lost.is_err(), "A lost its leadership while busy");
        })
    });
    acquired_rx.await.unwrap();
    assert_eq!(holder(client.clone()).await, Some(("a".to_string(), 0)));
    // Process B campaigns on the same lease all through A's busy spell.
    let b = Candidate::spawn(kube_config, config("b")).unwrap();
    let b_won = tokio::time::timeout(Duration::from_secs(7), b.acquired()).await;
    assert!(b_won.is_err(), "B took the lease from a busy A");
    assert_eq!(holder(client.clone()).await, Some(("a".to_string(), 0)));
    tokio::task::spawn_blocking(move || a.join())
        .await
        .unwrap()
        .unwrap();
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_metrics() {
    let c = Cluster::start().await;
    let s = kiln_scheduler::start(options(&c, &["--leader-elect=false"]))
        .await
        .unwrap();
    let health = http_get(s.health_addr(), "/healthz").await;
    assert!(
        health.starts_with("HTTP/1.0 200") && health.ends_with("ok"),
        "{health}"
    );
    let metrics = http_get(s.health_addr(), "/metrics").await;
    assert!(
        metrics.contains("scheduler_schedule_attempts_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("scheduler_pending_pods{queue=\"active\"}"),
        "{metrics}"
    );
}
