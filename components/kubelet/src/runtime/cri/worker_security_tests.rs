//! Security contexts and image pull secrets through a whole pod sync, against the fake CRI (which
//! scripts image users and a registry that wants a password) and the recording event fake.

use super::*;
use crate::events::{FakeRecorder, Recorded};
use crate::pod_objects::FakeObjects;
use crate::runtime::cri::api::ImageUser;
use crate::runtime::cri::fake::FakeCri;
use crate::runtime::cri::keyring::{KEY_DOCKER_CONFIG_JSON, TYPE_DOCKER_CONFIG_JSON};
use cri::security_profile::ProfileType;

const PAUSE: &str = "reg/pause:1";
const IMG: &str = "10.250.0.1:5001/kiln/private:1";

fn cfg(pods_root: &std::path::Path) -> Arc<WorkerConfig> {
    Arc::new(WorkerConfig {
        log_root: "/var/log/pods".into(),
        pause_image: PAUSE.into(),
        backoff: Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        node_name: "host1".into(),
        node_ip: "10.250.0.11".into(),
        pods_root: pods_root.to_path_buf(),
        secrets_in_memory: false,
        allocatable: NodeAllocatable::default(),
        dns: super::super::tests::test_dns(),
        node_hosts_file: "/etc/hosts".into(),
        cgroups: None,
        pod_pids_limit: None,
    })
}

fn pod(spec: serde_json::Value, container: serde_json::Value) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": "web", "namespace": "apps", "uid": "u1"},
        "spec": {"automountServiceAccountToken": false, "containers": [{"name": "main", "image": IMG}]}
    });
    for (k, val) in spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    for (k, val) in container.as_object().unwrap() {
        v["spec"]["containers"][0][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

struct Rig {
    w: PodWorker,
    fake: Arc<FakeCri>,
    rec: Arc<FakeRecorder>,
    objects: Arc<FakeObjects>,
    _root: tempfile::TempDir,
}

fn rig(p: &Pod) -> Rig {
    let root = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeCri::default());
    let rec = Arc::new(FakeRecorder::default());
    let objects = Arc::new(FakeObjects::default());
    let w = PodWorker::new(p, cfg(&root.path().join("pods")), fake.clone())
        .unwrap()
        .with_recorder(rec.clone())
        .with_objects(objects.clone())
        .unwrap();
    Rig {
        w,
        fake,
        rec,
        objects,
        _root: root,
    }
}

fn waiting(w: &PodWorker) -> (String, String) {
    match &w.status().containers[0].state {
        ContainerState::Waiting { reason, message } => {
            (reason.clone(), message.clone().unwrap_or_default())
        }
        ContainerState::Running { .. } => ("Running".into(), String::new()),
        ContainerState::Terminated(t) => (format!("Terminated:{}", t.reason), String::new()),
    }
}

fn warnings(events: &[Recorded]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.type_ == EventType::Warning)
        .map(|e| format!("{}: {}", e.reason, e.message))
        .collect()
}

fn created_config(fake: &FakeCri) -> cri::ContainerConfig {
    fake.st()
        .configs
        .values()
        .next()
        .cloned()
        .expect("a container was created")
}

#[tokio::test]
async fn run_as_non_root_with_a_root_image_is_a_config_error_and_no_container() {
    let p = pod(
        serde_json::json!({"securityContext": {"runAsNonRoot": true}}),
        serde_json::json!({}),
    );
    let mut r = rig(&p);
    r.w.sync(Instant::now()).await;
    let want = "container has runAsNonRoot and image will run as root (pod: \"web_apps(u1)\", container: main)";
    assert_eq!(
        waiting(&r.w),
        ("CreateContainerConfigError".into(), want.into())
    );
    assert!(!r
        .fake
        .calls()
        .iter()
        .any(|c| c.starts_with("CreateContainer")));
    assert_eq!(
        warnings(&r.rec.take()),
        vec![format!("Failed: Error: {want}")]
    );
    // Retried every sync without a new event; a numeric non-root user in the image lets it start.
    r.w.sync(Instant::now()).await;
    assert!(warnings(&r.rec.take()).is_empty());
    r.fake.st().image_users.insert(
        IMG.into(),
        ImageUser {
            uid: Some(65534),
            username: String::new(),
        },
    );
    r.w.sync(Instant::now()).await;
    assert_eq!(waiting(&r.w).0, "Running");
    let sc = created_config(&r.fake)
        .linux
        .unwrap()
        .security_context
        .unwrap();
    assert_eq!(sc.run_as_user.map(|u| u.value), Some(65534));
}

#[tokio::test]
async fn capabilities_seccomp_and_masked_paths_reach_the_container_and_the_sandbox() {
    let p = pod(
        serde_json::json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}),
        serde_json::json!({"securityContext": {
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            "allowPrivilegeEscalation": false
        }}),
    );
    let mut r = rig(&p);
    r.w.sync(Instant::now()).await;
    assert_eq!(waiting(&r.w).0, "Running");
    let sc = created_config(&r.fake)
        .linux
        .unwrap()
        .security_context
        .unwrap();
    let caps = sc.capabilities.unwrap();
    assert_eq!(
        (caps.add_capabilities, caps.drop_capabilities),
        (
            vec!["NET_BIND_SERVICE".to_string()],
            vec!["ALL".to_string()]
        )
    );
    assert_eq!(
        sc.seccomp.map(|s| s.profile_type),
        Some(ProfileType::RuntimeDefault as i32)
    );
    assert!(sc.no_new_privs);
    assert!(sc.masked_paths.contains(&"/proc/kcore".to_string()));
    assert_eq!(sc.run_as_user.map(|u| u.value), Some(0), "image user: root");
    let sb = r
        .fake
        .st()
        .sandbox_configs
        .values()
        .next()
        .cloned()
        .unwrap();
    let sb_sc = sb.linux.unwrap().security_context.unwrap();
    assert_eq!(
        sb_sc.seccomp.map(|s| s.profile_type),
        Some(ProfileType::RuntimeDefault as i32)
    );
    assert!(!sb_sc.privileged);
}

#[tokio::test]
async fn a_localhost_profile_without_a_path_fails_the_sandbox_as_upstream() {
    let p = pod(
        serde_json::json!({"securityContext": {"seccompProfile": {"type": "Localhost"}}}),
        serde_json::json!({}),
    );
    let mut r = rig(&p);
    r.w.sync(Instant::now()).await;
    assert!(!r
        .fake
        .calls()
        .iter()
        .any(|c| c.starts_with("RunPodSandbox")));
    assert_eq!(
        warnings(&r.rec.take()),
        vec!["FailedCreatePodSandBox: Failed to create pod sandbox: localhostProfile must be set if seccompProfile type is Localhost."]
    );
}

fn put_regcred(objects: &FakeObjects, password: &str) {
    let json = serde_json::json!({"auths": {"10.250.0.1:5001": {"username": "lab", "password": password}}});
    objects.put_typed_secret(
        "apps",
        "regcred",
        TYPE_DOCKER_CONFIG_JSON,
        &[(KEY_DOCKER_CONFIG_JSON, &json.to_string())],
    );
}

#[tokio::test]
async fn pull_secrets_authenticate_the_pull_and_a_missing_one_is_warned_about() {
    let p = pod(
        serde_json::json!({"imagePullSecrets": [{"name": "regcred"}]}),
        serde_json::json!({}),
    );
    let mut r = rig(&p);
    r.fake
        .st()
        .registry_auth
        .insert(IMG.into(), ("lab".into(), "s3cret".into()));
    let t0 = Instant::now();
    // No secret yet: warned on the pod, the anonymous pull is refused: ErrImagePull, then back-off.
    r.w.sync(t0).await;
    let (reason, message) = waiting(&r.w);
    assert_eq!(reason, "ErrImagePull");
    assert!(message.contains("401 Unauthorized"), "{message}");
    let events = r.rec.take();
    let missing = events
        .iter()
        .find(|e| e.reason == "FailedToRetrieveImagePullSecret")
        .expect("missing secret warned about");
    assert_eq!(missing.object.field_path, None, "on the pod");
    assert_eq!(
        missing.message,
        "Unable to retrieve some image pull secrets (regcred); attempting to pull the image may not succeed."
    );
    assert!(warnings(&events).contains(&"Failed: Error: ErrImagePull".to_string()));
    r.w.sync(t0 + Duration::from_secs(5)).await;
    assert_eq!(
        waiting(&r.w),
        (
            "ImagePullBackOff".into(),
            format!("Back-off pulling image {IMG:?}")
        )
    );
    // A wrong password still fails; the right one pulls with it and the pod runs.
    put_regcred(&r.objects, "wrong");
    r.w.sync(t0 + Duration::from_secs(11)).await;
    assert_eq!(waiting(&r.w).0, "ErrImagePull");
    put_regcred(&r.objects, "s3cret");
    r.fake.take_calls();
    r.w.sync(t0 + Duration::from_secs(40)).await;
    assert_eq!(waiting(&r.w).0, "Running");
    assert!(r
        .fake
        .calls()
        .contains(&format!("PullImage {IMG} auth=lab")));
    // No event or call log carries the password.
    let all: Vec<String> = r
        .rec
        .take()
        .into_iter()
        .map(|e| e.message)
        .chain(r.fake.calls())
        .collect();
    assert!(!all.iter().any(|m| m.contains("s3cret")), "{all:?}");
}

#[tokio::test]
async fn a_secret_for_another_registry_leaves_the_pull_anonymous() {
    let p = pod(
        serde_json::json!({"imagePullSecrets": [{"name": "regcred"}]}),
        serde_json::json!({}),
    );
    let mut r = rig(&p);
    let json = serde_json::json!({"auths": {"other.example": {"auth": "dTpw"}}});
    r.objects.put_typed_secret(
        "apps",
        "regcred",
        TYPE_DOCKER_CONFIG_JSON,
        &[(KEY_DOCKER_CONFIG_JSON, &json.to_string())],
    );
    r.w.sync(Instant::now()).await;
    assert_eq!(waiting(&r.w).0, "Running");
    assert!(r.fake.calls().contains(&format!("PullImage {IMG}")));
}

#[tokio::test]
async fn apparmor_and_the_supplemental_groups_policy_reach_the_runtime() {
    let p = pod(
        serde_json::json!({"securityContext": {"supplementalGroupsPolicy": "Strict"}}),
        serde_json::json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}),
    );
    let mut r = rig(&p);
    r.w.sync(Instant::now()).await;
    assert_eq!(waiting(&r.w).0, "Running");
    let sc = created_config(&r.fake)
        .linux
        .unwrap()
        .security_context
        .unwrap();
    assert_eq!(
        sc.apparmor.map(|a| a.profile_type),
        Some(ProfileType::RuntimeDefault as i32)
    );
    #[allow(deprecated)]
    let deprecated = sc.apparmor_profile;
    assert_eq!(deprecated, "runtime/default");
    let strict = cri::SupplementalGroupsPolicy::Strict as i32;
    assert_eq!(sc.supplemental_groups_policy, strict);
    let sb = r
        .fake
        .st()
        .sandbox_configs
        .values()
        .next()
        .cloned()
        .unwrap();
    let sb_sc = sb.linux.unwrap().security_context.unwrap();
    assert_eq!(sb_sc.supplemental_groups_policy, strict);
}

#[tokio::test]
async fn a_localhost_apparmor_profile_without_a_name_is_a_config_error() {
    let p = pod(
        serde_json::json!({}),
        serde_json::json!({"securityContext": {"appArmorProfile": {"type": "Localhost"}}}),
    );
    let mut r = rig(&p);
    r.w.sync(Instant::now()).await;
    assert_eq!(
        waiting(&r.w),
        (
            "CreateContainerConfigError".into(),
            "missing localhost apparmor profile name".into()
        )
    );
}

#[tokio::test]
async fn the_user_the_runtime_reports_reaches_the_container_status() {
    let p = pod(
        serde_json::json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 3000,
            "supplementalGroups": [4000], "supplementalGroupsPolicy": "Strict"}}),
        serde_json::json!({}),
    );
    // containerd 1.x reports no user: the API status has none, as upstream's.
    let mut r = rig(&p);
    r.w.sync(Instant::now()).await;
    r.w.sync(Instant::now()).await;
    assert_eq!(waiting(&r.w).0, "Running");
    let api = crate::mirror::api_status(&r.w.status(), "10.250.0.11", None);
    assert_eq!(api.container_statuses.unwrap()[0].user, None);
    // A runtime that reports it (containerd 2.0+): uid, gid and groups as the runtime says.
    let mut r = rig(&p);
    r.fake.st().container_users.insert(
        "main".into(),
        crate::container_status::LinuxUser {
            uid: 1000,
            gid: 3000,
            supplemental_groups: vec![3000, 4000],
        },
    );
    r.w.sync(Instant::now()).await;
    r.w.sync(Instant::now()).await;
    let api = crate::mirror::api_status(&r.w.status(), "10.250.0.11", None);
    let user = serde_json::to_value(&api.container_statuses.unwrap()[0].user).unwrap();
    assert_eq!(
        user,
        serde_json::json!({"linux": {"uid": 1000, "gid": 3000, "supplementalGroups": [3000, 4000]}})
    );
}
