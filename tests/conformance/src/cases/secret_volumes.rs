//! sig-storage Secret volume entries (secrets_volume.go): the same pods as the ConfigMap volume
//! entries, over Secrets ([`super::configmap_volumes`] holds the shared scripts). Each case restates
//! the entry's MUSTs in its doc comment.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::configmap_volumes::{consume, optional_script, two_volumes, Consume, Kind, Optional};
use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::CaseResult;

pub const CASES: &[Case] = &[
    case!(
        "[sig-storage] Secrets should be consumable from pods in volume [NodeConformance] [Conformance]",
        "secrets",
        plain
    ),
    case!(
        "[sig-storage] Secrets should be consumable from pods in volume with defaultMode set [LinuxOnly] [NodeConformance] [Conformance]",
        "secrets",
        default_mode
    ),
    case!(
        "[sig-storage] Secrets should be consumable from pods in volume as non-root with defaultMode and fsGroup set [LinuxOnly] [NodeConformance] [Conformance]",
        "secrets",
        non_root_fs_group
    ),
    case!(
        "[sig-storage] Secrets should be consumable from pods in volume with mappings [NodeConformance] [Conformance]",
        "secrets",
        mapped
    ),
    case!(
        "[sig-storage] Secrets should be consumable from pods in volume with mappings and Item Mode set [LinuxOnly] [NodeConformance] [Conformance]",
        "secrets",
        mapped_item_mode
    ),
    case!(
        "[sig-storage] Secrets should be able to mount in a volume regardless of a different secret existing with same name in different namespace [NodeConformance] [Conformance]",
        "secrets",
        same_name_elsewhere
    ),
    case!(
        "[sig-storage] Secrets should be consumable in multiple volumes in a pod [NodeConformance] [Conformance]",
        "secrets",
        multiple_volumes
    ),
    case!(
        "[sig-storage] Secrets optional updates should be reflected in volume [NodeConformance] [Conformance]",
        "secrets",
        optional_updates
    ),
];

/// A Secret variant of [`consume`]: `(runAsUser 1000, fsGroup, mode, mapped)`.
fn secret(non_root: bool, fs_group: Option<i64>, mode: Option<u32>, mapped: bool) -> Consume {
    Consume {
        kind: Kind::Secret,
        non_root,
        fs_group,
        mode,
        mapped,
        object: if mapped {
            "secret-test-map"
        } else {
            "secret-test"
        },
    }
}

/// Secrets Volume, default: the pod MUST read data-1 from the volume and its mode MUST be
/// -rw-r--r--.
async fn plain(ctx: &Ctx) -> CaseResult {
    consume(ctx, secret(false, None, None, false)).await
}

/// Secrets Volume, volume mode 0400: with defaultMode 0400 the pod MUST read the secret and its mode
/// MUST be -r--------.
async fn default_mode(ctx: &Ctx) -> CaseResult {
    consume(ctx, secret(false, None, Some(0o400), false)).await
}

/// Secrets Volume, volume mode 0440, fsGroup 1001 and uid 1000: run as uid 1000 with fsGroup 1001 and
/// defaultMode 0440, the pod MUST read the secret and its mode MUST be -r--r-----.
async fn non_root_fs_group(ctx: &Ctx) -> CaseResult {
    consume(ctx, secret(true, Some(1001), Some(0o440), false)).await
}

/// Secrets Volume, mapping: data-1 mapped to new-path-data-1 MUST be read there, with mode
/// -rw-r--r--.
async fn mapped(ctx: &Ctx) -> CaseResult {
    consume(ctx, secret(false, None, None, true)).await
}

/// Secrets Volume, mapping, volume mode 0400: the mapped item with mode 0400 MUST be read, and its
/// mode MUST be the item's (upstream's test checks 0400, -r--------).
async fn mapped_item_mode(ctx: &Ctx) -> CaseResult {
    consume(ctx, secret(false, None, Some(0o400), true)).await
}

/// Secrets Volume, volume mode default, secret with same name in different namespace: a Secret of the
/// same name but other data exists in a second namespace; the pod MUST read only its own namespace's
/// secret (value-1), with mode -rw-r--r--.
async fn same_name_elsewhere(ctx: &Ctx) -> CaseResult {
    let namespaces: Api<Namespace> = ctx.all();
    let other = format!(
        "secret-namespace-{}",
        ctx.ns.rsplit('-').next().unwrap_or("x")
    );
    let ns: Namespace = from_json(json!({
        "metadata": {"name": other, "labels": {"e2e-framework": "secret-namespace", "e2e-run": "kiln-conformance"}}
    }))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    let result = async {
        Kind::Secret
            .create_in(
                ctx,
                &other,
                "secret-test",
                &[(
                    "this_should_not_match_content_of_other_secret",
                    "similarly_this_should_not_match_content_of_other_secret\n",
                )],
            )
            .await?;
        consume(ctx, secret(false, None, None, false)).await
    }
    .await;
    let _ = namespaces.delete(&other, &DeleteParams::background()).await;
    result
}

/// Secrets Volume, mapping multiple volume paths: one Secret in two volumes of a pod: the pod MUST
/// read it from the first mount, with mode -rw-r--r--.
async fn multiple_volumes(ctx: &Ctx) -> CaseResult {
    two_volumes(ctx, Kind::Secret, "secret-test", true).await
}

/// Secrets Volume, create, update and delete: see [`optional_script`].
async fn optional_updates(ctx: &Ctx) -> CaseResult {
    optional_script(
        ctx,
        &Optional {
            kind: Kind::Secret,
            base: "/etc/secret-volumes",
            pod: "pod-secrets",
            objects: ["s-test-opt-del", "s-test-opt-upd", "s-test-opt-create"],
            volumes: ["deletes-volume", "updates-volume", "creates-volume"],
            containers: [
                "dels-volume-test",
                "upds-volume-test",
                "creates-volume-test",
            ],
        },
    )
    .await
}
