//! sig-scheduling entries (test/e2e/scheduling): the PriorityClass API. Each case restates the
//! entry's MUSTs in its doc comment.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[case!(
    "[sig-scheduling] SchedulerPreemption [Serial] PriorityClass endpoints verify PriorityClass endpoints can be operated with different HTTP methods [Conformance]",
    "sched-preemption-path",
    priority_class_endpoints
)];

fn rv(pc: &PriorityClass) -> u64 {
    pc.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Scheduler, PriorityClass endpoints: with classes p1 (1) and p2 (2), a patch and an update of the
/// immutable value MUST fail; a patch and an update of the description MUST succeed; the list MUST
/// succeed; each class MUST keep its value, show the new description and a newer resourceVersion.
async fn priority_class_endpoints(ctx: &Ctx) -> CaseResult {
    let api: Api<PriorityClass> = ctx.all();
    let label = format!("e2e={}", ctx.ns);
    let mut created = Vec::new();
    for (name, value) in [("p1", 1), ("p2", 2)] {
        let pc: PriorityClass = from_json(json!({
            "metadata": {"name": name, "labels": {"e2e": ctx.ns}}, "value": value,
        }))?;
        created.push(match api.create(&PostParams::default(), &pc).await {
            Ok(pc) => pc,
            // Upstream tolerates classes left by an earlier run.
            Err(kube::Error::Api(e)) if e.code == 409 => api.get(name).await?,
            Err(e) => return Err(e.into()),
        });
    }
    let result = async {
        let pp = PatchParams::default();
        let patched = api
            .patch(
                "p1",
                &pp,
                &Patch::Strategic(json!({"value": created[0].value * 10})),
            )
            .await;
        must!(patched.is_err(), "patching the immutable value succeeded");
        let mut copy = created[1].clone();
        copy.value *= 10;
        must!(
            api.replace("p2", &PostParams::default(), &copy)
                .await
                .is_err(),
            "updating the immutable value succeeded"
        );
        let desc = "updated description";
        api.patch("p1", &pp, &Patch::Strategic(json!({"description": desc})))
            .await?;
        let mut copy = created[1].clone();
        copy.description = Some(desc.to_string());
        api.replace("p2", &PostParams::default(), &copy).await?;
        api.list(&ListParams::default()).await?;
        for pc in &created {
            let name = pc.metadata.name.clone().unwrap_or_default();
            let live = api.get(&name).await?;
            must_eq!(live.value, pc.value, "{name}'s value");
            must_eq!(
                live.description.as_deref(),
                Some(desc),
                "{name}'s description"
            );
            must!(
                rv(&live) > rv(pc),
                "{name}'s resourceVersion {} is not newer than {}",
                rv(&live),
                rv(pc)
            );
        }
        Ok(())
    }
    .await;
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await?;
    result
}
