use std::collections::HashMap;
use std::sync::Mutex;

use super::*;
use serde_json::json;

/// The latest watched objects, changed by the test as the PV controller would.
#[derive(Default)]
struct FakeView {
    pods: Mutex<Vec<String>>,
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    volumes: Mutex<HashMap<String, Arc<PersistentVolume>>>,
    claims: Mutex<HashMap<String, Arc<PersistentVolumeClaim>>>,
}

impl VolumeView for FakeView {
    fn pod_exists(&self, namespace: &str, name: &str) -> bool {
        self.pods
            .lock()
            .unwrap()
            .contains(&format!("{namespace}/{name}"))
    }
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.lock().unwrap().get(name).cloned()
    }
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.lock().unwrap().get(name).cloned()
    }
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims
            .lock()
            .unwrap()
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }
}

impl FakeView {
    fn put_claim(&self, c: PersistentVolumeClaim) {
        self.claims.lock().unwrap().insert(
            format!("default/{}", c.metadata.name.clone().unwrap()),
            Arc::new(c),
        );
    }
    fn put_volume(&self, v: PersistentVolume) {
        self.volumes
            .lock()
            .unwrap()
            .insert(v.metadata.name.clone().unwrap(), Arc::new(v));
    }
}

/// Records the writes and answers with the object at the next resourceVersion.
#[derive(Default)]
struct RecordingWriter {
    writes: Mutex<Vec<String>>,
    fail: bool,
}

fn bump(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    let v: u64 = meta
        .resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .unwrap();
    meta.resource_version = Some((v + 1).to_string());
}

impl VolumeWriter for RecordingWriter {
    async fn replace_volume(&self, volume: &PersistentVolume) -> Result<PersistentVolume, String> {
        if self.fail {
            return Err("the object has been modified".into());
        }
        self.writes
            .lock()
            .unwrap()
            .push(format!("pv/{}", volume.metadata.name.as_deref().unwrap()));
        let mut v = volume.clone();
        bump(&mut v.metadata);
        Ok(v)
    }
    async fn replace_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, String> {
        self.writes
            .lock()
            .unwrap()
            .push(format!("pvc/{}", claim.metadata.name.as_deref().unwrap()));
        let mut c = claim.clone();
        bump(&mut c.metadata);
        Ok(c)
    }
}

fn pod() -> Pod {
    serde_json::from_value(
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": []}}),
    )
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
    )
    .unwrap()
}

fn claim(rv: &str, annotations: serde_json::Value, volume: Option<&str>) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "default", "uid": "c1", "resourceVersion": rv,
                     "annotations": annotations},
        "spec": {"volumeName": volume}
    }))
    .unwrap()
}

fn pv(rv: &str, claim_uid: Option<&str>, host: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pv1", "resourceVersion": rv},
        "spec": {
            "claimRef": claim_uid.map(|u| json!({"namespace": "default", "name": "data", "uid": u})),
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}
        }
    }))
    .unwrap()
}

fn view() -> FakeView {
    let v = FakeView::default();
    v.pods.lock().unwrap().push("default/web".into());
    v.nodes
        .lock()
        .unwrap()
        .insert("a".into(), Arc::new(node("a")));
    v
}

fn provision(node: &str) -> Reservation {
    Reservation {
        volumes: vec![],
        claims: vec![claim("2", json!({ANN_SELECTED: node}), None)],
    }
}

const ANN_SELECTED: &str = "volume.kubernetes.io/selected-node";
const BOUND: &str = "pv.kubernetes.io/bind-completed";

#[test]
fn a_provisioned_claim_is_waited_for_until_bound() {
    let v = view();
    let written = provision("a");
    // The watch still has the version before our write.
    v.put_claim(claim("1", json!({}), None));
    assert_eq!(check_bindings(&v, &pod(), "a", &written), Ok(false));
    // Our write arrived; the provisioner is at work.
    v.put_claim(claim("2", json!({ANN_SELECTED: "a"}), None));
    assert_eq!(check_bindings(&v, &pod(), "a", &written), Ok(false));
    // Bound to a PV the watch has not shown yet: look again.
    v.put_claim(claim(
        "3",
        json!({ANN_SELECTED: "a", BOUND: "yes"}),
        Some("pv1"),
    ));
    assert_eq!(check_bindings(&v, &pod(), "a", &written), Ok(false));
    v.put_volume(pv("1", Some("c1"), "a"));
    assert_eq!(check_bindings(&v, &pod(), "a", &written), Ok(true));
}

#[test]
fn a_claim_that_loses_its_node_fails_the_binding() {
    let v = view();
    let written = provision("a");
    v.put_claim(claim("3", json!({ANN_SELECTED: "b"}), None));
    assert_eq!(
        check_bindings(&v, &pod(), "a", &written),
        Err("provisioning failed for PVC \"data\"".into())
    );
    // Taken away while other annotations stay: upstream calls that a failed provisioning too.
    v.put_claim(claim(
        "4",
        json!({"volume.kubernetes.io/storage-provisioner": "kiln.io/local-path"}),
        None,
    ));
    assert_eq!(
        check_bindings(&v, &pod(), "a", &written),
        Err("provisioning failed for PVC \"data\"".into())
    );
    v.put_claim(claim("5", json!({}), None));
    assert_eq!(
        check_bindings(&v, &pod(), "a", &written),
        Err("selectedNode annotation reset for PVC \"data\"".into())
    );
}

#[test]
fn a_provisioned_pv_on_another_node_fails_the_binding() {
    let v = view();
    v.put_claim(claim(
        "3",
        json!({ANN_SELECTED: "a", BOUND: "yes"}),
        Some("pv1"),
    ));
    v.put_volume(pv("1", Some("c1"), "b"));
    assert_eq!(
        check_bindings(&v, &pod(), "a", &provision("a")),
        Err(
            "pv \"pv1\" node affinity doesn't match node \"a\": no matching NodeSelectorTerms"
                .into()
        )
    );
}

#[test]
fn a_static_binding_waits_for_the_pv_controller_and_fails_when_the_claim_ref_is_dropped() {
    let v = view();
    let written = Reservation {
        volumes: vec![pv("5", Some("c1"), "a")],
        claims: vec![],
    };
    v.put_claim(claim("1", json!({}), None));
    v.put_volume(pv("4", None, "a"));
    assert_eq!(
        check_bindings(&v, &pod(), "a", &written),
        Ok(false),
        "our write is not in the watch yet"
    );
    v.put_volume(pv("5", Some("c1"), "a"));
    assert_eq!(check_bindings(&v, &pod(), "a", &written), Ok(false));
    v.put_claim(claim("2", json!({BOUND: "yes"}), Some("pv1")));
    assert_eq!(check_bindings(&v, &pod(), "a", &written), Ok(true));
    v.put_volume(pv("6", Some(""), "a"));
    assert_eq!(
        check_bindings(&v, &pod(), "a", &written),
        Err("ClaimRef got reset for pv \"pv1\"".into())
    );
}

#[test]
fn a_deleted_pod_stops_the_wait() {
    let v = view();
    v.pods.lock().unwrap().clear();
    assert_eq!(
        check_bindings(&v, &pod(), "a", &provision("a")),
        Err("pod does not exist any more: pod \"web\" not found".into())
    );
}

#[tokio::test]
async fn bind_volumes_writes_then_times_out() {
    let v = view();
    let writer = RecordingWriter::default();
    let reservation = Reservation {
        volumes: vec![pv("1", Some("c1"), "a")],
        claims: vec![claim("1", json!({ANN_SELECTED: "a"}), None)],
    };
    v.put_volume(pv("2", Some("c1"), "a"));
    v.put_claim(claim("2", json!({ANN_SELECTED: "a"}), None));
    let err = bind_volumes(
        &writer,
        &v,
        &pod(),
        "a",
        &reservation,
        Duration::from_millis(50),
        Duration::from_millis(10),
    )
    .await
    .unwrap_err();
    assert_eq!(err, "binding volumes: context deadline exceeded");
    assert_eq!(*writer.writes.lock().unwrap(), ["pv/pv1", "pvc/data"]);
}

#[tokio::test]
async fn bind_volumes_returns_once_bound_and_reports_write_errors() {
    let v = view();
    v.put_claim(claim(
        "3",
        json!({ANN_SELECTED: "a", BOUND: "yes"}),
        Some("pv1"),
    ));
    v.put_volume(pv("1", Some("c1"), "a"));
    let writer = RecordingWriter::default();
    bind_volumes(
        &writer,
        &v,
        &pod(),
        "a",
        &provision("a"),
        Duration::from_secs(600),
        Duration::from_millis(10),
    )
    .await
    .unwrap();
    let failing = RecordingWriter {
        fail: true,
        ..Default::default()
    };
    let static_binding = Reservation {
        volumes: vec![pv("1", Some("c1"), "a")],
        claims: vec![],
    };
    assert_eq!(
        bind_volumes(
            &failing,
            &v,
            &pod(),
            "a",
            &static_binding,
            DEFAULT_BIND_TIMEOUT,
            POLL_INTERVAL
        )
        .await
        .unwrap_err(),
        "the object has been modified"
    );
}
