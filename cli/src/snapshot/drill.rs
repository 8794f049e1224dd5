//! `kiln drill`: a disaster-recovery drill that proves a bundle restores, without touching the cluster it
//! came from. It brings up a scratch `kiln lab` with as many hosts as the bundle's cluster.yaml, writes a
//! cluster.yaml for them (the bundle's, with the lab's addresses and SSH settings), and restores the bundle
//! onto it by the same path as `kiln snapshot restore` onto new hosts (`super::new_hosts`: the bundle's CA
//! and keys seed the state, serving certificates and kubeconfigs are issued again for the new addresses,
//! `init`, restore, nodes settled), then verifies every recorded namespace, deployment, service, configmap and secret: the
//! same bytes at the snapshot's revision in the restored store, and the same UIDs through the apiserver.
//! It reports RPO (age of the snapshot) and RTO (drill start → data verified), and tears the lab down
//! whatever happened.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::bundle::Bundle;
use super::manifest::{self, ObjectRecord};
use super::store_client::StoreClient;
use super::SnapshotError;
use crate::backup_store::encrypt::KeyMaterial;
use crate::bootstrap::{Context, Options};
use crate::lab::{host_ip, Lab, UpOptions};

pub struct DrillOptions {
    pub bundle: PathBuf,
    pub key: Option<KeyMaterial>,
    /// Scratch lab name (default: drill-<cluster>, or drill-<hash> when that is too long for a lab name).
    pub lab_name: Option<String>,
    pub wait_timeout: Duration,
    /// Print steps as they finish (text mode).
    pub progress: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub name: String,
    pub seconds: f64,
    /// "ok", or the error.
    pub result: String,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillReport {
    pub bundle: String,
    pub cluster: String,
    pub lab: String,
    pub hosts: usize,
    pub snapshot_created: String,
    pub revision: i64,
    pub encrypted: bool,
    /// Age of the snapshot when the drill started.
    pub rpo_seconds: i64,
    /// Drill start → restored API answering with the data verified; absent when it never got there.
    pub rto_seconds: Option<f64>,
    pub objects_recorded: usize,
    pub objects_verified: usize,
    pub steps: Vec<Step>,
    pub problems: Vec<String>,
    /// "name address" of every scratch host.
    pub scratch_hosts: Vec<String>,
    pub torn_down: bool,
    pub passed: bool,
}

impl DrillReport {
    fn step<T>(
        &mut self,
        progress: bool,
        name: &str,
        started: Instant,
        r: Result<T, String>,
    ) -> Option<T> {
        let seconds = started.elapsed().as_secs_f64();
        let result = match &r {
            Ok(_) => "ok".to_string(),
            Err(e) => e.clone(),
        };
        if progress {
            eprintln!("drill: {name:<18} {seconds:>7.1}s  {result}");
        }
        self.steps.push(Step {
            name: name.into(),
            seconds,
            result,
        });
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.problems.push(format!("{name}: {e}"));
                None
            }
        }
    }

    pub fn text(&self) -> String {
        let mut s = format!(
            "drill of {} (cluster {}, revision {}, taken {}{})\n",
            self.bundle,
            self.cluster,
            self.revision,
            self.snapshot_created,
            if self.encrypted { ", encrypted" } else { "" }
        );
        if !self.lab.is_empty() {
            s.push_str(&format!(
                "scratch lab {} with {} host(s) ({}){}\n",
                self.lab,
                self.hosts,
                self.scratch_hosts.join(", "),
                if self.torn_down {
                    ", torn down"
                } else {
                    ", NOT torn down"
                }
            ));
        }
        for st in &self.steps {
            s.push_str(&format!(
                "  {:<18} {:>7.1}s  {}\n",
                st.name, st.seconds, st.result
            ));
        }
        s.push_str(&format!(
            "objects verified: {}/{}\n",
            self.objects_verified, self.objects_recorded
        ));
        s.push_str(&format!(
            "RPO: {}s (age of the snapshot)\n",
            self.rpo_seconds
        ));
        match self.rto_seconds {
            Some(r) => s.push_str(&format!("RTO: {r:.1}s (drill start to verified data)\n")),
            None => s.push_str("RTO: - (never reached verified data)\n"),
        }
        if self.passed {
            s.push_str("PASSED\n");
        } else {
            s.push_str("FAILED:\n");
            for p in &self.problems {
                s.push_str(&format!("  - {p}\n"));
            }
        }
        s
    }
}

/// A valid lab name for a drill of `cluster` (at most 12 characters, lowercase, digits and '-').
pub fn lab_name(cluster: &str) -> String {
    let plain = format!("drill-{cluster}");
    let valid = plain.len() <= 12
        && plain
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        return plain;
    }
    use sha2::{Digest, Sha256};
    format!("drill-{}", &hex::encode(Sha256::digest(cluster))[..6])
}

/// Run the drill. Never an error: every failure is in the report (and `passed` false).
pub fn run(opts: &DrillOptions) -> DrillReport {
    let start = Instant::now();
    let mut r = DrillReport {
        bundle: opts.bundle.display().to_string(),
        ..Default::default()
    };
    let p = opts.progress;

    // Labs are made from the machine's own network (and mount) namespaces: from inside `kiln lab run`
    // or `ip netns exec`, the scratch lab's namespace would be invisible to everything else.
    let same = |a: &str, b: &str| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.ino() == y.ino() && x.dev() == y.dev(),
            _ => true,
        }
    };
    if !same("/proc/self/ns/net", "/proc/1/ns/net") {
        r.problems.push(
            "run kiln drill from the machine's own network namespace, not inside a lab's (`kiln lab run`, `ip netns exec`)"
                .into(),
        );
        return r;
    }

    let t = Instant::now();
    let opened = Bundle::open(&opts.bundle, opts.key.as_ref()).map_err(|e| e.to_string());
    let Some(bundle) = r.step(p, "open bundle", t, opened) else {
        return r;
    };
    let info = bundle.info.clone();
    r.cluster = info.cluster.clone();
    r.revision = info.revision;
    r.encrypted = info.encrypted;
    r.snapshot_created = info.created.clone();
    r.rpo_seconds = time::OffsetDateTime::parse(
        &info.created,
        &time::format_description::well_known::Rfc3339,
    )
    .map(|c| (time::OffsetDateTime::now_utc() - c).whole_seconds())
    .unwrap_or(-1);
    let recorded = match bundle.objects() {
        Ok(o) => o,
        Err(e) => {
            r.problems.push(e.to_string());
            return r;
        }
    };
    r.objects_recorded = recorded.len();
    if recorded.is_empty() {
        r.problems.push(
            "the bundle's snapshot holds no namespace, deployment, service, configmap or secret"
                .into(),
        );
        return r;
    }
    let original: serde_json::Value = match std::fs::read_to_string(bundle.cluster_yaml())
        .map_err(|e| e.to_string())
        .and_then(|s| serde_norway::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            r.problems.push(format!("the bundle's cluster.yaml: {e}"));
            return r;
        }
    };
    let hosts = original["spec"]["hosts"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    r.hosts = hosts;
    let registry = !original["spec"]["registry"].is_null();
    let name = opts
        .lab_name
        .clone()
        .unwrap_or_else(|| lab_name(&info.cluster));
    r.lab = name.clone();

    let t = Instant::now();
    let up = (|| {
        // A lab left by an interrupted drill is replaced: down converges from any state.
        let _ = Lab::new(&name)?.down();
        Lab::up(&UpOptions {
            name: name.clone(),
            hosts: (hosts + address_offset(&original)) as u32,
            registry,
            extra_images: vec![],
            init: Default::default(),
            vm: false,
        })
    })()
    .map_err(|e| e.to_string());
    if r.step(p, "scratch lab up", t, up).is_some() {
        scratch(opts, &mut r, &bundle, &original, &recorded, &name, start);
    }

    let t = Instant::now();
    let down = Lab::new(&name)
        .and_then(|l| l.down())
        .map_err(|e| e.to_string());
    r.torn_down = r.step(p, "scratch lab down", t, down).is_some();
    r.passed = r.problems.is_empty() && r.torn_down;
    r
}

/// Everything that happens inside the scratch lab's network: cluster.yaml and state, init, restore, verify.
fn scratch(
    opts: &DrillOptions,
    r: &mut DrillReport,
    bundle: &Bundle,
    original: &serde_json::Value,
    recorded: &[ObjectRecord],
    name: &str,
    start: Instant,
) {
    let p = opts.progress;
    let t = Instant::now();
    let prepared = Lab::new(name)
        .map_err(|e| e.to_string())
        .and_then(|lab| prepare(original, &lab).map_err(|e| e.to_string()));
    let Some((cluster_yaml, hosts)) = r.step(p, "scratch cluster", t, prepared) else {
        return;
    };
    r.scratch_hosts = hosts;
    let ns = format!("/run/netns/kiln-lab-{name}");
    let entered = NetnsGuard::enter(Path::new(&ns)).map_err(|e| format!("{ns}: {e}"));
    let Some(guard) = r.step(p, "enter lab network", Instant::now(), entered) else {
        return;
    };
    // The bootstrap prints its phase lines on stdout: send them to stderr so stdout keeps only the report.
    let quiet = StdoutToStderr::new();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    match rt {
        Ok(rt) => {
            rt.block_on(in_lab(opts, r, bundle, recorded, &cluster_yaml, start));
            rt.shutdown_timeout(Duration::from_secs(5));
        }
        Err(e) => r.problems.push(format!("runtime: {e}")),
    }
    drop(quiet);
    drop(guard);
}

async fn in_lab(
    opts: &DrillOptions,
    r: &mut DrillReport,
    bundle: &Bundle,
    recorded: &[ObjectRecord],
    cluster_yaml: &Path,
    start: Instant,
) {
    let p = opts.progress;
    let ctx = match crate::config::load(cluster_yaml)
        .map_err(|e| e.to_string())
        .and_then(|c| {
            Context::new(
                c,
                Options {
                    wait_timeout: opts.wait_timeout,
                    ..Options::default()
                },
            )
            .map_err(|e| e.to_string())
        }) {
        Ok(c) => c,
        Err(e) => {
            r.problems.push(format!("scratch cluster.yaml: {e}"));
            return;
        }
    };
    // The same path as `kiln snapshot restore` onto new hosts: the bundle's identity seeds the state,
    // init bootstraps the scratch hosts, the bundle's data replaces the fresh store.
    let t = Instant::now();
    let seeded = super::new_hosts::seed_state(&ctx, bundle).map_err(|e| e.to_string());
    if r.step(p, "seed state", t, seeded).is_none() {
        return;
    }
    let rebuilt = {
        let mut report = |name: &str, started: Instant, res: &Result<(), String>| {
            r.step(p, name, started, res.clone());
        };
        super::new_hosts::rebuild(&ctx, bundle, &mut report).await
    };
    if rebuilt.is_err() {
        return;
    }
    let t = Instant::now();
    let verified = verify(&ctx, bundle.info.revision, recorded).await;
    let verified_ok = verified.is_ok();
    let problems = match verified {
        Ok(v) => v,
        Err(e) => vec![e.to_string()],
    };
    r.objects_verified = if verified_ok {
        recorded
            .iter()
            .filter(|o| {
                let (a, b) = (format!("store: {}:", o.id()), format!("api: {}:", o.id()));
                !problems
                    .iter()
                    .any(|p| p.starts_with(&a) || p.starts_with(&b))
            })
            .count()
    } else {
        0
    };
    let summary = if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{} mismatch(es)", problems.len()))
    };
    r.step(p, "verify", t, summary);
    r.problems.extend(problems);
    if r.problems.is_empty() {
        r.rto_seconds = Some(start.elapsed().as_secs_f64());
    }
}

/// Compare the restored cluster with the bundle's record: the store at the snapshot's revision holds the
/// same bytes under every recorded key, and the apiserver serves every recorded object with its UID.
async fn verify(
    ctx: &Context,
    revision: i64,
    recorded: &[ObjectRecord],
) -> Result<Vec<String>, SnapshotError> {
    let first = ctx.first_controller();
    let mut store = StoreClient::connect(ctx, first).await?;
    let found = manifest::collect(&mut store, revision).await?;
    let mut problems: Vec<String> = manifest::differences(recorded, &found)
        .into_iter()
        .map(|d| format!("store: {d}"))
        .collect();
    let client = crate::bootstrap::phases::wait::admin_client(ctx).await?;
    let live = api_objects(client)
        .await
        .map_err(|e| SnapshotError::Store {
            endpoint: "apiserver".into(),
            message: e.to_string(),
        })?;
    for want in recorded {
        match live.get(&want.id()) {
            None => problems.push(format!("api: {}: missing", want.id())),
            Some(uid) if !want.uid.is_empty() && *uid != want.uid => problems.push(format!(
                "api: {}: uid {uid} instead of {}",
                want.id(),
                want.uid
            )),
            Some(_) => {}
        }
    }
    Ok(problems)
}

/// id → uid of every object of the recorded kinds, as the apiserver lists them.
async fn api_objects(
    client: kube::Client,
) -> Result<std::collections::HashMap<String, String>, kube::Error> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
    let mut out = std::collections::HashMap::new();
    list::<Namespace>(&client, "Namespace", &mut out).await?;
    list::<Deployment>(&client, "Deployment", &mut out).await?;
    list::<Service>(&client, "Service", &mut out).await?;
    list::<ConfigMap>(&client, "ConfigMap", &mut out).await?;
    list::<Secret>(&client, "Secret", &mut out).await?;
    Ok(out)
}

async fn list<K>(
    client: &kube::Client,
    kind: &str,
    out: &mut std::collections::HashMap<String, String>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    use kube::ResourceExt;
    let api: kube::Api<K> = kube::Api::all(client.clone());
    for o in api.list(&kube::api::ListParams::default()).await?.items {
        let rec = ObjectRecord {
            kind: kind.into(),
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
            uid: String::new(),
            resource_version: String::new(),
            sha256: String::new(),
        };
        out.insert(rec.id(), o.uid().unwrap_or_default());
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("cluster.yaml: {0}")]
    Yaml(String),
}

/// Write the scratch cluster.yaml (in `<lab dir>/drill/`); its state directory is seeded from the bundle
/// later, by the shared `new_hosts::seed_state`.
fn prepare(
    original: &serde_json::Value,
    lab: &Lab,
) -> Result<(PathBuf, Vec<String>), PrepareError> {
    let l = lab.layout();
    let lab_yaml: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(l.cluster_yaml())?)
            .map_err(|e| PrepareError::Yaml(e.to_string()))?;
    let scratch = scratch_cluster(original, &lab_yaml)?;
    let dir = l.dir.join("drill");
    std::fs::create_dir_all(&dir)?;
    let yaml = serde_norway::to_string(&scratch).map_err(|e| PrepareError::Yaml(e.to_string()))?;
    let path = dir.join("cluster.yaml");
    kiln_pki::files::write_atomic(&path, yaml.as_bytes(), 0o600)
        .map_err(|e| PrepareError::Yaml(e.to_string()))?;
    let hosts = scratch["spec"]["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            format!(
                "{} at {}",
                h["name"].as_str().unwrap_or("?"),
                h["address"].as_str().unwrap_or("?")
            )
        })
        .collect();
    Ok((path, hosts))
}

/// How many lab hosts to leave idle at the start so that no scratch host gets an address the bundle's hosts
/// had: a bundle made on a lab would otherwise land on the very same addresses, and the drill would not
/// prove that a restore onto new addresses works.
fn address_offset(original: &serde_json::Value) -> usize {
    let old: Vec<&str> = original["spec"]["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|h| [h["address"].as_str(), h["nodeIP"].as_str()])
        .flatten()
        .collect();
    let n = original["spec"]["hosts"].as_array().map_or(0, Vec::len);
    (0..)
        .find(|off| (0..n).all(|i| !old.contains(&host_ip((i + off + 1) as u32).as_str())))
        .unwrap_or(0)
}

/// The bundle's cluster.yaml on the lab's hosts: bundle host i keeps its name and role and gets lab host
/// (i + offset)'s address and SSH settings; the endpoint becomes the first controller's new address; the
/// state directory is the default one beside the scratch file.
fn scratch_cluster(
    original: &serde_json::Value,
    lab: &serde_json::Value,
) -> Result<serde_json::Value, PrepareError> {
    let mut v = original.clone();
    let offset = address_offset(original);
    let lab_hosts = lab["spec"]["hosts"]
        .as_array()
        .ok_or_else(|| PrepareError::Yaml("the lab's cluster.yaml has no hosts".into()))?;
    let hosts = v["spec"]["hosts"]
        .as_array_mut()
        .ok_or_else(|| PrepareError::Yaml("the bundle's cluster.yaml has no hosts".into()))?;
    if hosts.len() + offset > lab_hosts.len() {
        return Err(PrepareError::Yaml(
            "fewer lab hosts than bundle hosts".into(),
        ));
    }
    let mut endpoint = None;
    for (i, h) in hosts.iter_mut().enumerate() {
        let o = h
            .as_object_mut()
            .ok_or_else(|| PrepareError::Yaml("a host is not a mapping".into()))?;
        let addr = host_ip((i + offset) as u32 + 1);
        o.insert("address".into(), addr.clone().into());
        o.insert("ssh".into(), lab_hosts[i + offset]["ssh"].clone());
        o.remove("nodeIP");
        if endpoint.is_none() && o["role"].as_str().unwrap_or("").contains("controller") {
            endpoint = Some(format!("{addr}:6443"));
        }
    }
    let spec = v["spec"]
        .as_object_mut()
        .ok_or_else(|| PrepareError::Yaml("no spec".into()))?;
    spec.insert(
        "knownHostsFile".into(),
        lab["spec"]["knownHostsFile"].clone(),
    );
    spec.remove("stateDir");
    // A bundle of a cluster on an external etcd (spec.store.external) is drilled on a scratch
    // kiln-store, which restores etcd's snapshot format: the drill checks the data, never the etcd
    // operator's restore, and must not reach the real etcd.
    if let Some(store) = spec.get_mut("store").and_then(|s| s.as_object_mut()) {
        store.remove("external");
    }
    match endpoint {
        Some(e) => {
            spec.insert("controlPlaneEndpoint".into(), e.into());
        }
        None => return Err(PrepareError::Yaml("no controller".into())),
    }
    Ok(v)
}

/// This thread (the main one, before the runtime's threads exist: they inherit it) in another network
/// namespace until dropped.
pub(crate) struct NetnsGuard {
    back: std::fs::File,
}

impl NetnsGuard {
    pub(crate) fn enter(ns: &Path) -> std::io::Result<NetnsGuard> {
        let back = std::fs::File::open("/proc/thread-self/ns/net")?;
        let target = std::fs::File::open(ns)?;
        nix::sched::setns(&target, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        Ok(NetnsGuard { back })
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Err(e) = nix::sched::setns(&self.back, nix::sched::CloneFlags::CLONE_NEWNET) {
            tracing::error!(error = %e, "cannot return to the original network namespace");
        }
    }
}

/// fd 1 pointed at fd 2 until dropped.
struct StdoutToStderr {
    saved: Option<std::os::fd::OwnedFd>,
}

impl StdoutToStderr {
    fn new() -> StdoutToStderr {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let stdout = std::io::stdout();
        let saved = nix::unistd::dup(&stdout).ok();
        // SAFETY: dup2 on the process's own standard descriptors, which stay open.
        unsafe {
            libc::dup2(std::io::stderr().as_raw_fd(), stdout.as_raw_fd());
        }
        StdoutToStderr { saved }
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if let Some(fd) = &self.saved {
            // SAFETY: as above; `fd` is our own duplicate of the original stdout.
            unsafe {
                libc::dup2(fd.as_raw_fd(), std::io::stdout().as_raw_fd());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_names_fit_the_lab_rules() {
        assert_eq!(lab_name("t-snap"), "drill-t-snap");
        let long = lab_name("production-cluster");
        assert!(long.starts_with("drill-") && long.len() == 12, "{long}");
        assert!(crate::lab::Lab::new(&long).is_ok());
    }

    #[test]
    fn the_scratch_cluster_keeps_names_and_takes_the_lab_addresses() {
        let original: serde_json::Value = serde_norway::from_str(
            "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: prod\nspec:\n  \
             controlPlaneEndpoint: 192.168.1.10:6443\n  stateDir: /srv/kiln\n  hosts:\n  \
             - name: cp\n    address: 192.168.1.10\n    role: controller\n    nodeIP: 192.168.1.10\n    ssh: {user: admin}\n  \
             - name: w1\n    address: 192.168.1.11\n    role: worker\n    ssh: {user: admin}\n",
        )
        .unwrap();
        let lab: serde_json::Value = serde_norway::from_str(
            "spec:\n  knownHostsFile: /tmp/kiln-lab/x/known_hosts\n  hosts:\n  \
             - {name: host1, ssh: {user: root, keyFile: /k}}\n  - {name: host2, ssh: {user: root, keyFile: /k}}\n",
        )
        .unwrap();
        let s = scratch_cluster(&original, &lab).unwrap();
        assert_eq!(s["metadata"]["name"], "prod");
        assert_eq!(s["spec"]["controlPlaneEndpoint"], "10.250.0.11:6443");
        assert!(s["spec"]["stateDir"].is_null());
        assert_eq!(s["spec"]["hosts"][0]["name"], "cp");
        assert_eq!(s["spec"]["hosts"][1]["address"], "10.250.0.12");
        assert_eq!(s["spec"]["hosts"][1]["ssh"]["user"], "root");
        assert!(s["spec"]["hosts"][0]["nodeIP"].is_null());
        assert_eq!(s["spec"]["knownHostsFile"], "/tmp/kiln-lab/x/known_hosts");
    }

    #[test]
    fn a_bundle_of_an_external_etcd_is_drilled_on_kiln_store() {
        let original: serde_json::Value = serde_norway::from_str(
            "metadata: {name: e}\nspec:\n  hosts:\n  - {name: cp, address: 192.168.1.10, role: controller}\n  \
             store:\n    backup: {schedule: '@daily'}\n    external: {endpoints: ['https://192.168.1.20:2379'], \
             caFile: ca, certFile: c, keyFile: k}\n",
        )
        .unwrap();
        let lab: serde_json::Value =
            serde_norway::from_str("spec:\n  hosts:\n  - {name: host1, ssh: {user: a}}\n").unwrap();
        let s = scratch_cluster(&original, &lab).unwrap();
        assert!(s["spec"]["store"]["external"].is_null(), "{s}");
        assert_eq!(s["spec"]["store"]["backup"]["schedule"], "@daily");
    }

    #[test]
    fn a_bundle_from_a_lab_lands_on_other_addresses() {
        let original: serde_json::Value = serde_norway::from_str(
            "metadata: {name: l}\nspec:\n  hosts:\n  - {name: host1, address: 10.250.0.11, role: controller}\n",
        )
        .unwrap();
        assert_eq!(address_offset(&original), 1);
        let lab: serde_json::Value = serde_norway::from_str(
            "spec:\n  hosts:\n  - {name: host1, ssh: {user: a}}\n  - {name: host2, ssh: {user: b}}\n",
        )
        .unwrap();
        let s = scratch_cluster(&original, &lab).unwrap();
        assert_eq!(s["spec"]["hosts"][0]["name"], "host1");
        assert_eq!(s["spec"]["hosts"][0]["address"], "10.250.0.12");
        assert_eq!(s["spec"]["hosts"][0]["ssh"]["user"], "b");
        assert_eq!(s["spec"]["controlPlaneEndpoint"], "10.250.0.12:6443");
    }
}
