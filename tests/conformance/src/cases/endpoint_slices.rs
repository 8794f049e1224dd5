//! sig-network EndpointSlice and EndpointSliceMirroring entries, written from upstream's
//! test/e2e/network/endpointslice.go and endpointslicemirroring.go: the API's own Service's
//! Endpoints and EndpointSlice, the controller following a Service's selector and pods, the
//! discovery.k8s.io/v1 API's operations, and the mirroring of a selector-less Service's custom
//! Endpoints into EndpointSlices.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::api_ops::{group_discovery, update_with_retry};
use super::services_network::{create_service, expect_endpoints};
use super::{case, Case};
use crate::ctx::{by_label, from_json, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-network] EndpointSlice should have Endpoints and EndpointSlices pointing to API Server [Conformance]",
        "endpointslice",
        pointing_to_api_server
    ),
    case!(
        "[sig-network] EndpointSlice should create and delete Endpoints and EndpointSlices for a Service with a selector specified [Conformance]",
        "endpointslice",
        create_and_delete_for_selector
    ),
    case!(
        "[sig-network] EndpointSlice should create Endpoints and EndpointSlices for Pods matching a Service [Conformance]",
        "endpointslice",
        for_pods_matching
    ),
    case!(
        "[sig-network] EndpointSlice should support creating EndpointSlice API operations [Conformance]",
        "endpointslice",
        api_operations
    ),
    case!(
        "[sig-network] EndpointSliceMirroring should mirror a custom Endpoints resource through create update and delete [Conformance]",
        "endpointslicemirroring",
        mirroring
    ),
];

const GROUP: &str = "discovery.k8s.io";
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const MIRRORING_CONTROLLER: &str = "endpointslicemirroring-controller.k8s.io";
/// How long the controllers may take (upstream polls 2 s for up to 12-30 s; kiln's lab is loaded).
const CONTROLLER_WAIT: Duration = Duration::from_secs(90);

/// Every entry here starts with discovery: the group, its v1 version and the endpointslices resource.
async fn discovery(ctx: &Ctx) -> CaseResult {
    group_discovery(ctx, GROUP, "v1", &["endpointslices"]).await
}

/// EndpointSlice API (API server): the `kubernetes` Service in `default` MUST have Endpoints and an
/// EndpointSlice, the slice with as many ports and endpoints as the Endpoints' subset has.
async fn pointing_to_api_server(ctx: &Ctx) -> CaseResult {
    discovery(ctx).await?;
    let svc = Api::<Service>::namespaced(ctx.client.clone(), "default")
        .get_opt("kubernetes")
        .await?;
    must!(svc.is_some(), "no Service default/kubernetes");
    let ep = Api::<Endpoints>::namespaced(ctx.client.clone(), "default")
        .get("kubernetes")
        .await?;
    let subset = ep.subsets.unwrap_or_default().into_iter().next();
    let Some(subset) = subset else {
        return Err(CaseError::Failed(
            "Endpoints default/kubernetes has no subsets".into(),
        ));
    };
    let slice = Api::<EndpointSlice>::namespaced(ctx.client.clone(), "default")
        .get("kubernetes")
        .await?;
    must_eq!(
        slice.ports.as_ref().map_or(0, Vec::len),
        subset.ports.as_ref().map_or(0, Vec::len),
        "ports of EndpointSlice default/kubernetes vs the Endpoints' subset"
    );
    must_eq!(
        slice.endpoints.len(),
        subset.addresses.as_ref().map_or(0, Vec::len),
        "endpoints of EndpointSlice default/kubernetes vs the Endpoints' addresses"
    );
    Ok(())
}

/// The Service's EndpointSlices (by the service-name label).
async fn slices_of(ctx: &Ctx, svc: &str) -> CaseResult<Vec<EndpointSlice>> {
    Ok(ctx
        .api::<EndpointSlice>()
        .list(&by_label(SERVICE_NAME_LABEL, svc))
        .await?
        .items)
}

/// EndpointSlice API (selector): a Service with a selector matching no pod MUST get Endpoints (no
/// subsets) and an EndpointSlice (no endpoints); once the Service is deleted both MUST go.
async fn create_and_delete_for_selector(ctx: &Ctx) -> CaseResult {
    discovery(ctx).await?;
    let name = "example-empty-selector";
    create_service(
        ctx,
        json!({"metadata": {"name": name}, "spec": {"selector": {"does-not-match-anything": "endpoints-and-endpoint-slices"},
            "ports": [{"name": "example", "port": 80, "protocol": "TCP"}]}}),
    )
    .await?;
    let eps = ctx.api::<Endpoints>();
    let ep = ctx
        .wait(&format!("Endpoints {name}"), CONTROLLER_WAIT, || async {
            Ok(eps.get_opt(name).await?.ok_or("none yet"))
        })
        .await?;
    must!(
        ep.subsets.as_ref().is_none_or(Vec::is_empty),
        "Endpoints {name} MUST have no subsets: {:?}",
        ep.subsets
    );
    let slices = ctx
        .wait(
            &format!("EndpointSlices of {name}"),
            CONTROLLER_WAIT,
            || async {
                let s = slices_of(ctx, name).await?;
                Ok(if s.is_empty() { Err("none yet") } else { Ok(s) })
            },
        )
        .await?;
    for s in &slices {
        must!(
            s.endpoints.is_empty(),
            "EndpointSlice {} MUST have no endpoints: {:?}",
            s.name_any(),
            s.endpoints
        );
    }
    ctx.api::<Service>()
        .delete(name, &DeleteParams::default())
        .await?;
    ctx.wait(
        &format!("Endpoints and EndpointSlices of {name} gone"),
        CONTROLLER_WAIT,
        || async {
            let ep = eps.get_opt(name).await?;
            let s = slices_of(ctx, name).await?;
            Ok(if ep.is_none() && s.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "Endpoints present: {}, {} EndpointSlices",
                    ep.is_some(),
                    s.len()
                ))
            })
        },
    )
    .await
}

/// A pause pod with labels and one named container port.
async fn labelled_pod(ctx: &Ctx, name: &str, labels: Value, port: i32) -> CaseResult {
    ctx.create_pod(&from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "container1",
            "image": ctx.images().pause(),
            "ports": [{"name": "example-name", "containerPort": port, "protocol": "TCP"}]}]},
    }))?)
    .await?;
    ctx.wait_ready(name).await?;
    Ok(())
}

/// A Service of the pods entry: name, selector, targetPort, the endpoints it MUST get.
type ServiceCase<'a> = (&'a str, Value, Value, &'a [(&'a str, &'a [i32])]);

/// EndpointSlice API (pods): for pod1 (port example-name 3000) and pod2 (example-name 3001), a
/// Service selecting pod1 by a named target port MUST get pod1:3000; one selecting both by the
/// name, pod1:3000 and pod2:3001; one selecting both by the number 3000, both at 3000 — in
/// Endpoints and EndpointSlices alike.
async fn for_pods_matching(ctx: &Ctx) -> CaseResult {
    discovery(ctx).await?;
    labelled_pod(ctx, "pod1", json!({"pod1": "on", "shared12": "on"}), 3000).await?;
    labelled_pod(ctx, "pod2", json!({"pod2": "on", "shared12": "on"}), 3001).await?;
    let services: [ServiceCase; 3] = [
        (
            "example-int-port",
            json!({"pod1": "on"}),
            json!("example-name"),
            &[("pod1", &[3000])],
        ),
        (
            "example-named-port",
            json!({"shared12": "on"}),
            json!("example-name"),
            &[("pod1", &[3000]), ("pod2", &[3001])],
        ),
        (
            "example-no-match",
            json!({"shared12": "on"}),
            json!(3000),
            &[("pod1", &[3000]), ("pod2", &[3000])],
        ),
    ];
    for (name, selector, target, _) in &services {
        create_service(
            ctx,
            json!({"metadata": {"name": name}, "spec": {"selector": selector,
                "ports": [{"name": "example", "port": 80, "protocol": "TCP", "targetPort": target}]}}),
        )
        .await?;
    }
    for (name, _, _, want) in &services {
        expect_endpoints(ctx, name, want).await?;
        for s in slices_of(ctx, name).await? {
            must_eq!(
                s.labels().get(MANAGED_BY).map(String::as_str),
                Some("endpointslice-controller.k8s.io"),
                "managed-by label of EndpointSlice {}",
                s.name_any()
            );
        }
    }
    Ok(())
}

fn example_slice(ctx: &Ctx) -> CaseResult<EndpointSlice> {
    from_json(json!({
        "metadata": {"generateName": "e2e-example-ing", "labels": {"special-label": ctx.ns}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["1.2.3.4", "5.6.7.8"]}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }))
}

/// EndpointSlice API (operations): endpointslices MUST support create, get, list (namespace and
/// cluster), watch, patch, update, delete and deletecollection.
async fn api_operations(ctx: &Ctx) -> CaseResult {
    discovery(ctx).await?;
    let slices = ctx.api::<EndpointSlice>();
    let lp = ListParams::default().labels(&format!("special-label={}", ctx.ns));
    let pp = PostParams::default();
    slices.create(&pp, &example_slice(ctx)?).await?;
    slices.create(&pp, &example_slice(ctx)?).await?;
    let created = slices.create(&pp, &example_slice(ctx)?).await?;
    let name = created.name_any();
    must_eq!(
        slices.get(&name).await?.uid(),
        created.uid(),
        "the UID read back"
    );
    let list = slices.list(&lp).await?;
    must_eq!(list.items.len(), 3, "slices listed in the namespace");
    let all: Api<EndpointSlice> = Api::all(ctx.client.clone());
    must_eq!(
        all.list(&lp).await?.items.len(),
        3,
        "slices listed in all namespaces"
    );
    let rv = list.metadata.resource_version.unwrap_or_default();
    let wp = WatchParams::default().labels(lp.label_selector.as_deref().unwrap_or(""));
    let mut watch = slices.watch(&wp, &rv).await?.boxed();

    let patched = slices
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await?;
    must_eq!(
        patched.annotations().get("patched").map(String::as_str),
        Some("true"),
        "patched annotation"
    );
    let updated = update_with_retry(&slices, &name, false, |s| {
        s.annotations_mut().insert("updated".into(), "true".into());
    })
    .await?;
    must_eq!(
        updated.annotations().get("updated").map(String::as_str),
        Some("true"),
        "updated annotation"
    );
    let seen = tokio::time::timeout(CONTROLLER_WAIT, async {
        while let Some(ev) = watch.try_next().await? {
            if let WatchEvent::Modified(s) = ev {
                if to_json(&s).pointer("/metadata/annotations/patched") == Some(&json!("true")) {
                    return Ok::<bool, CaseError>(true);
                }
            }
        }
        Ok(false)
    })
    .await
    .map_err(|_| CaseError::Failed("no MODIFIED watch event for the patch".into()))??;
    must!(seen, "the watch ended before the patch was seen");

    slices.delete(&name, &DeleteParams::default()).await?;
    must!(
        slices.get_opt(&name).await?.is_none(),
        "slice {name} still there after delete"
    );
    must_eq!(
        slices.list(&lp).await?.items.len(),
        2,
        "slices left after one delete"
    );
    slices
        .delete_collection(&DeleteParams::default(), &lp)
        .await?;
    must_eq!(
        slices.list(&lp).await?.items.len(),
        0,
        "slices left after deletecollection"
    );
    Ok(())
}

/// The mirrored EndpointSlices of `svc`: labelled with the Service's name and managed by the
/// mirroring controller.
async fn mirrored(ctx: &Ctx, svc: &str) -> CaseResult<Vec<EndpointSlice>> {
    Ok(ctx
        .api::<EndpointSlice>()
        .list(&ListParams::default().labels(&format!(
            "{SERVICE_NAME_LABEL}={svc},{MANAGED_BY}={MIRRORING_CONTROLLER}"
        )))
        .await?
        .items)
}

/// Wait for exactly one mirrored slice holding `ip` at `port`.
async fn expect_mirrored(ctx: &Ctx, svc: &str, ip: &str, port: i32) -> CaseResult {
    ctx.wait(
        &format!("one EndpointSlice mirroring {svc} with {ip}:{port}"),
        CONTROLLER_WAIT,
        || async {
            let s = mirrored(ctx, svc).await?;
            let got: Vec<(Value, Value)> = s
                .iter()
                .map(|s| {
                    let j = to_json(s);
                    (
                        j.pointer("/endpoints/0/addresses/0")
                            .cloned()
                            .unwrap_or_default(),
                        j.pointer("/ports/0/port").cloned().unwrap_or_default(),
                    )
                })
                .collect();
            Ok(if got == [(json!(ip), json!(port))] {
                Ok(())
            } else {
                Err(format!("mirrored slices hold {got:?}"))
            })
        },
    )
    .await
}

/// EndpointSlice Mirroring: for a Service without selector, a custom Endpoints object MUST be
/// mirrored into one EndpointSlice (managed by the mirroring controller); an update of the
/// Endpoints MUST be mirrored; their deletion MUST remove the mirrored slice.
async fn mirroring(ctx: &Ctx) -> CaseResult {
    discovery(ctx).await?;
    let name = "example-custom-endpoints";
    create_service(
        ctx,
        json!({"metadata": {"name": name}, "spec": {"ports": [{"name": "example", "port": 80, "protocol": "TCP"}]}}),
    )
    .await?;
    let eps = ctx.api::<Endpoints>();
    let ep: Endpoints = from_json(json!({
        "metadata": {"name": name},
        "subsets": [{"addresses": [{"ip": "10.1.2.3"}],
            "ports": [{"name": "example", "port": 9000, "protocol": "TCP"}]}],
    }))?;
    eps.create(&PostParams::default(), &ep).await?;
    expect_mirrored(ctx, name, "10.1.2.3", 9000).await?;
    eps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"subsets": [{"addresses": [{"ip": "10.2.3.4"}],
            "ports": [{"name": "example", "port": 9001, "protocol": "TCP"}]}]})),
    )
    .await?;
    expect_mirrored(ctx, name, "10.2.3.4", 9001).await?;
    eps.delete(name, &DeleteParams::default()).await?;
    ctx.wait(
        &format!("the mirrored slices of {name} gone"),
        CONTROLLER_WAIT,
        || async {
            let n = mirrored(ctx, name).await?.len();
            Ok(if n == 0 {
                Ok(())
            } else {
                Err(format!("{n} left"))
            })
        },
    )
    .await
}
