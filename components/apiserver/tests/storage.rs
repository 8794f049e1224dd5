//! The storage API with the real kubectl: StorageClass / PersistentVolume / PersistentVolumeClaim
//! columns, validation and immutability errors as upstream words them, DefaultStorageClass and
//! StorageObjectInUseProtection admission, PersistentVolumeClaimResize, and a node's narrowed
//! right to create the local-path volumes of its own node (RBAC + NodeRestriction).

use std::collections::HashMap;

use kiln_testkit::Cluster;
use serde_json::Value;

const CLASSES: &str = "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-path
  annotations:
    storageclass.kubernetes.io/is-default-class: \"true\"
provisioner: kiln.io/local-path
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
provisioner: example.com/fast
allowVolumeExpansion: true
";

const VOLUME: &str = "apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-data
spec:
  capacity:
    storage: 5Gi
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  storageClassName: fast
  hostPath:
    path: /srv/data
";

const CLAIM: &str = "apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
";

const NO_MODES: &str = "apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bad
spec:
  resources:
    requests:
      storage: 1Gi
";

fn local_pv(name: &str, node: &str) -> String {
    format!(
        "apiVersion: v1
kind: PersistentVolume
metadata:
  name: {name}
  annotations:
    pv.kubernetes.io/provisioned-by: kiln.io/local-path
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  storageClassName: local-path
  persistentVolumeReclaimPolicy: Delete
  local:
    path: /var/lib/kiln/local-path/{name}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - key: kubernetes.io/hostname
          operator: In
          values: [{node}]
"
    )
}

fn yaml(c: &Cluster, name: &str, content: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

/// kubectl's table as (header cells, rows keyed by header): kubectl aligns every column at its
/// header's offset, so empty cells (REASON) and headers with spaces (ACCESS MODES) survive.
fn table(output: &str) -> (Vec<String>, Vec<HashMap<String, String>>) {
    let mut lines = output.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().expect("a header line");
    let mut starts = Vec::new();
    let mut names = Vec::new();
    let bytes = header.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b' ' && (i == 0 || header[..i].ends_with("  ")) {
            let end = header[i..].find("  ").map_or(header.len(), |e| i + e);
            starts.push(i);
            names.push(header[i..end].trim().to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    let rows = lines
        .map(|l| {
            let mut row = HashMap::new();
            for (k, name) in names.iter().enumerate() {
                let from = starts[k].min(l.len());
                let to = starts.get(k + 1).copied().unwrap_or(l.len()).min(l.len());
                row.insert(name.clone(), l[from..to].trim().to_string());
            }
            row
        })
        .collect();
    (names, rows)
}

async fn json(c: &Cluster, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl_ok(&full).await).expect("kubectl -o json")
}

async fn fails(c: &Cluster, kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let (ok, out, err) = c.kubectl(kubeconfig, args).await;
    assert!(!ok, "kubectl {args:?} should fail: {out}");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_objects_with_kubectl() {
    let c = Cluster::start().await;
    let admin = c.admin_kubeconfig.clone();

    // Discovery lists the group and the short names kubectl resolves.
    let resources = c
        .kubectl_ok(&["api-resources", "--api-group=storage.k8s.io", "-o", "wide"])
        .await;
    for kind in [
        "StorageClass",
        "CSIDriver",
        "CSINode",
        "VolumeAttachment",
        "CSIStorageCapacity",
    ] {
        assert!(resources.contains(kind), "{kind} in {resources}");
    }
    let core = c.kubectl_ok(&["api-resources", "--api-group="]).await;
    assert!(
        core.lines()
            .any(|l| l.starts_with("persistentvolumeclaims") && l.contains("pvc")),
        "{core}"
    );

    c.kubectl_ok(&["create", "-f", &yaml(&c, "classes.yaml", CLASSES)])
        .await;
    let (cols, rows) = table(&c.kubectl_ok(&["get", "sc"]).await);
    assert_eq!(
        cols,
        [
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "AGE"
        ]
    );
    let local = rows
        .iter()
        .find(|r| r["NAME"] == "local-path (default)")
        .expect("the default class is marked");
    assert_eq!(local["PROVISIONER"], "kiln.io/local-path");
    assert_eq!(local["RECLAIMPOLICY"], "Delete");
    assert_eq!(local["VOLUMEBINDINGMODE"], "WaitForFirstConsumer");
    assert_eq!(local["ALLOWVOLUMEEXPANSION"], "false");
    let fast = rows.iter().find(|r| r["NAME"] == "fast").unwrap();
    assert_eq!(fast["VOLUMEBINDINGMODE"], "Immediate", "defaulted");
    assert_eq!(fast["ALLOWVOLUMEEXPANSION"], "true");

    // A class's provisioner is fixed.
    let err = fails(
        &c,
        &admin,
        &[
            "patch",
            "sc",
            "fast",
            "--type=merge",
            "-p",
            r#"{"provisioner":"example.com/other"}"#,
        ],
    )
    .await;
    assert!(
        err.contains("provisioner: Forbidden: updates to provisioner are forbidden."),
        "{err}"
    );

    // A volume: defaults, its protection finalizer, columns.
    c.kubectl_ok(&["create", "-f", &yaml(&c, "pv.yaml", VOLUME)])
        .await;
    let pv = json(&c, &["get", "pv", "pv-data"]).await;
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(pv["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pv["status"]["phase"], "Pending");
    assert_eq!(
        pv["metadata"]["finalizers"],
        serde_json::json!(["kubernetes.io/pv-protection"])
    );
    let (cols, rows) = table(&c.kubectl_ok(&["get", "pv"]).await);
    assert_eq!(
        cols,
        [
            "NAME",
            "CAPACITY",
            "ACCESS MODES",
            "RECLAIM POLICY",
            "STATUS",
            "CLAIM",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "REASON",
            "AGE"
        ]
    );
    let r = &rows[0];
    assert_eq!(r["NAME"], "pv-data");
    assert_eq!(r["CAPACITY"], "5Gi");
    assert_eq!(r["ACCESS MODES"], "RWO,ROX");
    assert_eq!(r["RECLAIM POLICY"], "Retain");
    assert_eq!(r["STATUS"], "Pending");
    assert_eq!(r["CLAIM"], "");
    assert_eq!(r["STORAGECLASS"], "fast");
    assert_eq!(r["VOLUMEATTRIBUTESCLASS"], "<unset>");
    let (cols, _) = table(&c.kubectl_ok(&["get", "pv", "-o", "wide"]).await);
    assert_eq!(cols.last().map(String::as_str), Some("VOLUMEMODE"));

    // A claim without a class gets the default one, and its finalizer.
    c.kubectl_ok(&["create", "-f", &yaml(&c, "pvc.yaml", CLAIM)])
        .await;
    let pvc = json(&c, &["get", "pvc", "data"]).await;
    assert_eq!(pvc["spec"]["storageClassName"], "local-path");
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["status"]["phase"], "Pending");
    assert_eq!(
        pvc["metadata"]["finalizers"],
        serde_json::json!(["kubernetes.io/pvc-protection"])
    );
    let (cols, rows) = table(&c.kubectl_ok(&["get", "pvc"]).await);
    assert_eq!(
        cols,
        [
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "AGE"
        ]
    );
    assert_eq!(rows[0]["NAME"], "data");
    assert_eq!(rows[0]["STATUS"], "Pending");
    assert_eq!(rows[0]["VOLUME"], "");
    assert_eq!(rows[0]["STORAGECLASS"], "local-path");
    let all = c.kubectl_ok(&["get", "pv,pvc,sc"]).await;
    for name in [
        "persistentvolume/pv-data",
        "persistentvolumeclaim/data",
        "storageclass.storage.k8s.io/local-path (default)",
    ] {
        assert!(all.contains(name), "{name} in {all}");
    }

    // Validation and immutability, as upstream words them.
    let err = fails(
        &c,
        &admin,
        &["create", "-f", &yaml(&c, "bad.yaml", NO_MODES)],
    )
    .await;
    assert!(
        err.contains("The PersistentVolumeClaim \"bad\" is invalid: spec.accessModes: Required value: at least 1 access mode is required"),
        "{err}"
    );
    let err = fails(
        &c,
        &admin,
        &[
            "patch",
            "pvc",
            "data",
            "--type=merge",
            "-p",
            r#"{"spec":{"storageClassName":"fast"}}"#,
        ],
    )
    .await;
    assert!(
        err.contains("spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"),
        "{err}"
    );

    // Growing a bound claim needs an expandable class.
    c.kubectl_ok(&[
        "patch",
        "pvc",
        "data",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Bound","capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"]}}"#,
    ])
    .await;
    let err = fails(
        &c,
        &admin,
        &[
            "patch",
            "pvc",
            "data",
            "--type=merge",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
        ],
    )
    .await;
    assert!(
        err.contains("persistentvolumeclaims \"data\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"),
        "{err}"
    );

    // A node creates and deletes only local-path volumes pinned to itself.
    let node = c.node_kubeconfig.clone();
    let (ok, out, err) = c
        .kubectl(
            &node,
            &[
                "create",
                "-f",
                &yaml(&c, "own.yaml", &local_pv("pvc-own", "n1")),
            ],
        )
        .await;
    assert!(ok, "n1 creates its own local-path PV: {out} {err}");
    let err = fails(
        &c,
        &node,
        &[
            "create",
            "-f",
            &yaml(&c, "other.yaml", &local_pv("pvc-other", "n2")),
        ],
    )
    .await;
    assert!(
        err.contains("persistentvolumes \"pvc-other\" is forbidden: node \"n1\" can only create persistentvolumes provisioned by \"kiln.io/local-path\" with node affinity kubernetes.io/hostname In [n1]"),
        "{err}"
    );
    let err = fails(&c, &node, &["delete", "pv", "pv-data", "--wait=false"]).await;
    assert!(err.contains("forbidden"), "{err}");
    let err = fails(
        &c,
        &node,
        &["delete", "pvc", "data", "--wait=false", "-n", "default"],
    )
    .await;
    assert!(err.contains("forbidden"), "{err}");
    let (ok, out, err) = c.kubectl(&node, &["get", "pvc", "-A", "-o", "name"]).await;
    assert!(
        ok && out.contains("persistentvolumeclaim/data"),
        "{out} {err}"
    );
    let (ok, _, err) = c
        .kubectl(&node, &["delete", "pv", "pvc-own", "--wait=false"])
        .await;
    assert!(ok, "n1 deletes its own local-path PV: {err}");
    // The protection finalizer keeps it until the pv-protection controller lets go.
    let pv = json(&c, &["get", "pv", "pvc-own"]).await;
    assert!(pv["metadata"]["deletionTimestamp"].is_string());
}
