//! sig-storage Subpath "Atomic writer volumes" entries (storage/subpath.go, testsuites/subpath.go):
//! one file of a secret, configMap, downwardAPI or projected volume mounted by subPath, read by
//! agnhost's mounttest. The entries differ only in data ([`ENTRIES`]). Each restates its MUSTs.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use rand::Rng;
use serde_json::{json, Value};

use super::configmap_volumes::{content_line, merge, mounttest, volume_pod, Kind};
use super::{case, Case};
use crate::ctx::{describe_status, Ctx, POD_START};
use crate::error::CaseResult;

pub const CASES: &[Case] = &[
    case!(
        "[sig-storage] Subpath Atomic writer volumes should support subpaths with secret pod [Conformance]",
        "subpath",
        secret
    ),
    case!(
        "[sig-storage] Subpath Atomic writer volumes should support subpaths with configmap pod [Conformance]",
        "subpath",
        configmap
    ),
    case!(
        "[sig-storage] Subpath Atomic writer volumes should support subpaths with configmap pod with mountPath of existing file [Conformance]",
        "subpath",
        configmap_existing_file
    ),
    case!(
        "[sig-storage] Subpath Atomic writer volumes should support subpaths with downward pod [Conformance]",
        "subpath",
        downward
    ),
    case!(
        "[sig-storage] Subpath Atomic writer volumes should support subpaths with projected pod [Conformance]",
        "subpath",
        projected
    ),
];

/// upstream's volumePath: where the subPath is mounted.
const VOLUME_PATH: &str = "/test-volume";
/// upstream's retryDuration: how long mounttest reads the file.
const RETRY_SECS: u32 = 20;

/// One entry: the volume (by upstream's type word), the subPath into it, where the container mounts it
/// (None: /test-volume) and what the file MUST hold (None: the pod's own name).
struct Entry {
    volume_type: &'static str,
    sub_path: &'static str,
    source: fn() -> Value,
    mount_path: Option<&'static str>,
    contents: Option<&'static str>,
}

const ENTRIES: [Entry; 5] = [
    Entry {
        volume_type: "secret",
        sub_path: "secret-key",
        source: || Kind::Secret.source("my-secret", json!({})),
        mount_path: None,
        contents: Some("secret-value"),
    },
    Entry {
        volume_type: "configmap",
        sub_path: "configmap-key",
        source: || Kind::ConfigMap.source("my-configmap", json!({})),
        mount_path: None,
        contents: Some("configmap-value"),
    },
    Entry {
        volume_type: "configmap",
        sub_path: "configmap-key",
        source: || Kind::ConfigMap.source("my-configmap", json!({})),
        mount_path: Some("/etc/resolv.conf"),
        contents: Some("configmap-value"),
    },
    Entry {
        volume_type: "downwardAPI",
        sub_path: "downward/podname",
        source: || {
            json!({"downwardAPI": {"items": [{"path": "downward/podname",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}]}})
        },
        mount_path: None,
        contents: None,
    },
    Entry {
        volume_type: "projected",
        sub_path: "projected/configmap-key",
        source: || {
            json!({"projected": {"sources": [{"configMap": {"name": "my-configmap",
                "items": [{"path": "projected/configmap-key", "key": "configmap-key"}]}}]}})
        },
        mount_path: None,
        contents: Some("configmap-value"),
    },
];

/// SubPath: reading content from a secret volume: a container MUST read the secret's key through a
/// subPath mount of the volume.
async fn secret(ctx: &Ctx) -> CaseResult {
    run(ctx, &ENTRIES[0]).await
}

/// SubPath: reading content from a configmap volume: a container MUST read the ConfigMap's key
/// through a subPath mount of the volume.
async fn configmap(ctx: &Ctx) -> CaseResult {
    run(ctx, &ENTRIES[1]).await
}

/// SubPath: reading content from a configmap volume, mountPath a specific (existing) file: the subPath
/// mounted over /etc/resolv.conf MUST show the ConfigMap's key there.
async fn configmap_existing_file(ctx: &Ctx) -> CaseResult {
    run(ctx, &ENTRIES[2]).await
}

/// SubPath: reading content from a downwardAPI volume: a container MUST read its pod's name through a
/// subPath mount of the volume's downward/podname.
async fn downward(ctx: &Ctx) -> CaseResult {
    run(ctx, &ENTRIES[3]).await
}

/// SubPath: reading content from a projected volume: a container MUST read the projected ConfigMap
/// key through a subPath mount of the volume.
async fn projected(ctx: &Ctx) -> CaseResult {
    run(ctx, &ENTRIES[4]).await
}

/// Upstream's generateSuffixForPodName: non-alphanumerics to '-', four random characters, lower case.
fn suffix(volume_type: &str) -> String {
    let word: String = volume_type
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let tail: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(4)
        .map(char::from)
        .collect();
    format!("{word}-{tail}").to_lowercase()
}

/// The Atomic writer volumes' BeforeEach (my-secret, my-configmap), then SubpathTestPod as
/// TestBasicSubpath[File] runs it (its unused containers removed): one mounttest container reading the
/// subPath-mounted file in a loop. The pod MUST succeed with the expected contents in its log, and MUST
/// then be deleted.
async fn run(ctx: &Ctx, e: &Entry) -> CaseResult {
    Kind::Secret
        .create(ctx, "my-secret", &[("secret-key", "secret-value")])
        .await?;
    Kind::ConfigMap
        .create(ctx, "my-configmap", &[("configmap-key", "configmap-value")])
        .await?;
    let suffix = suffix(e.volume_type);
    let name = format!("pod-subpath-test-{suffix}");
    let file = e.mount_path.unwrap_or(VOLUME_PATH);
    let container = format!("test-container-subpath-{suffix}");
    let mut reader = mounttest(
        ctx,
        &container,
        &[
            format!("--file_content_in_loop={file}"),
            format!("--retry_time={RETRY_SECS}"),
        ],
        json!([
            {"name": "test-volume", "mountPath": file, "subPath": e.sub_path},
            {"name": "liveness-probe-volume", "mountPath": "/probe-volume"},
        ]),
    );
    reader["securityContext"] = json!({"privileged": false});
    let pod = volume_pod(
        &name,
        json!([
            merge(json!({"name": "test-volume"}), (e.source)()),
            {"name": "liveness-probe-volume", "emptyDir": {}},
        ]),
        vec![reader],
        json!({"seLinuxOptions": {"level": "s0:c0,c1"}}),
    )?;
    let contents = e
        .contents
        .map(str::to_string)
        .unwrap_or_else(|| name.clone());
    ctx.expect_output(&pod, &container, &[&content_line(file, &contents)])
        .await?;

    // DeletePodWithWait: the pod MUST go.
    let pods: Api<Pod> = ctx.api();
    pods.delete(&name, &DeleteParams::default()).await?;
    ctx.wait(
        &format!("pod {name} deleted"),
        POD_START + Duration::from_secs(RETRY_SECS.into()),
        || async {
            Ok(match pods.get_opt(&name).await? {
                None => Ok(()),
                Some(p) => Err(describe_status(&p)),
            })
        },
    )
    .await
}
