//! sig-api-machinery entries on CustomResourceDefinitions: create/delete, list, the status
//! sub-resource, defaulting on requests and from storage, discovery, and watching custom resources.
//! The CRDs are upstream's fixtures (apiextensions-apiserver test/integration/fixtures): random
//! `foo<5>a` kinds in `mygroup.example.com`, or the fixed `noxus` one for the watch.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams,
};
use rand::Rng;
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] Simple CustomResourceDefinition creating/deleting custom resource definition objects works [Conformance]",
        "custom-resource-definition",
        create_delete
    ),
    case!(
        "[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] Simple CustomResourceDefinition listing custom resource definition objects works [Conformance]",
        "custom-resource-definition",
        list
    ),
    case!(
        "[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] Simple CustomResourceDefinition getting/updating/patching custom resource definition status sub-resource works [Conformance]",
        "custom-resource-definition",
        status_subresource
    ),
    case!(
        "[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] custom resource defaulting for requests and from storage works [Conformance]",
        "custom-resource-definition",
        defaulting
    ),
    case!(
        "[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] should include custom resource definition resources in discovery documents [Conformance]",
        "custom-resource-definition",
        discovery
    ),
    case!(
        "[sig-api-machinery] CustomResourceDefinition Watch [Privileged:ClusterAdmin] CustomResourceDefinition Watch watch on custom resource definition objects [Conformance]",
        "crd-watch",
        watch
    ),
];

pub(super) const GROUP: &str = "mygroup.example.com";
/// Upstream's waits for discovery to show or drop a CRD's resource (30 s).
const DISCOVERY_WAIT: Duration = Duration::from_secs(30);
/// wait.ForeverTestTimeout.
const FOREVER: Duration = Duration::from_secs(30);

/// A random kind name as upstream's fixtures make it: `foo` + 5 random characters + `a` (so the
/// singular never ends in s).
fn random_kind() -> String {
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(5)
        .map(char::from)
        .collect();
    format!("foo{suffix}a")
}

/// A name with 5 random characters appended, as names.SimpleNameGenerator does.
pub(super) fn generate_name(base: &str) -> String {
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(5)
        .map(char::from)
        .collect();
    format!("{base}{suffix}")
}

/// fixtures.AllowAllSchema: any object.
pub(super) fn allow_all_schema() -> Value {
    json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}})
}

/// fixtures.NewRandomNameV1CustomResourceDefinition: cluster-scoped, one version v1beta1.
pub(super) fn random_crd() -> Value {
    let g = random_kind();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{g}s.{GROUP}")},
        "spec": {
            "group": GROUP,
            "versions": [{"name": "v1beta1", "served": true, "storage": true, "schema": allow_all_schema()}],
            "names": {"plural": format!("{g}s"), "singular": g, "kind": g, "listKind": format!("{g}List")},
            "scope": "Cluster",
        }
    })
}

/// fixtures.NewRandomNameMultipleVersionCustomResourceDefinition: v1beta1 served, v1 served and
/// stored, both with a status sub-resource; `schema` (a CustomResourceValidation) for both.
pub(super) fn random_multi_version_crd(schema: Value) -> Value {
    let g = random_kind();
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage,
               "subresources": {"status": {}}, "schema": schema})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{g}s.{GROUP}")},
        "spec": {
            "group": GROUP,
            "versions": [version("v1beta1", false), version("v1", true)],
            "names": {"plural": format!("{g}s"), "singular": g, "kind": g, "listKind": format!("{g}List")},
            "scope": "Cluster",
        }
    })
}

/// fixtures.NewNoxuV1CustomResourceDefinition (cluster-scoped).
fn noxu_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("noxus.{GROUP}")},
        "spec": {
            "group": GROUP,
            "versions": [{"name": "v1beta1", "served": true, "storage": true, "schema": allow_all_schema()}],
            "names": {
                "plural": "noxus", "singular": "nonenglishnoxu", "kind": "WishIHadChosenNoxu",
                "shortNames": ["foo", "bar", "abc", "def"], "listKind": "NoxuItemList",
                "categories": ["all"],
            },
            "scope": "Cluster",
        }
    })
}

/// fixtures.NewNoxuInstance (cluster-scoped: no namespace).
fn noxu_instance(name: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1beta1"),
        "kind": "WishIHadChosenNoxu",
        "metadata": {"name": name},
        "content": {"key": "value"},
        "num": {"num1": 9223372036854775807_i64, "num2": 1000000},
    })
}

/// What a case needs to reach a CRD's custom resources.
#[derive(Debug, Clone)]
pub(super) struct Crd {
    pub name: String,
    pub plural: String,
    pub kind: String,
    pub served: Vec<String>,
    /// The CRD as the create returned it.
    pub created: Value,
}

impl Crd {
    fn of(created: Value) -> Crd {
        let s = &created["spec"];
        Crd {
            name: created["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            plural: s["names"]["plural"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            kind: s["names"]["kind"].as_str().unwrap_or_default().to_string(),
            served: s["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["served"] == json!(true))
                .filter_map(|v| v["name"].as_str().map(String::from))
                .collect(),
            created,
        }
    }

    /// The CRD's API group (as created; [`GROUP`] when unknown).
    pub fn group(&self) -> &str {
        self.created["spec"]["group"].as_str().unwrap_or(GROUP)
    }

    /// The first version's resource (upstream's `Versions[0]`), cluster-scoped.
    pub fn resource(&self, version: &str) -> ApiResource {
        ApiResource {
            group: self.group().into(),
            version: version.into(),
            api_version: format!("{}/{version}", self.group()),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    pub fn api(&self, ctx: &Ctx, version: &str) -> Api<DynamicObject> {
        Api::all_with(ctx.client.clone(), &self.resource(version))
    }

    /// `/apis/<group>/<version>/<plural>`.
    pub fn path(&self, version: &str) -> String {
        format!("/apis/{}/{version}/{}", self.group(), self.plural)
    }
}

fn crds(ctx: &Ctx) -> Api<CustomResourceDefinition> {
    ctx.all()
}

/// GET a discovery document (or any path) as JSON.
pub(super) async fn get_json(ctx: &Ctx, path: &str) -> CaseResult<Value> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| CaseError::Failed(format!("building GET {path}: {e}")))?;
    Ok(ctx.client.request::<Value>(req).await?)
}

/// Whether /apis/<group>/<version> lists the CRD's plural (fixtures.existsInDiscoveryV1: a 404 is
/// "not yet").
async fn in_discovery(ctx: &Ctx, crd: &Crd, version: &str) -> CaseResult<bool> {
    match get_json(ctx, &format!("/apis/{}/{version}", crd.group())).await {
        Ok(list) => Ok(list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == json!(crd.plural))),
        Err(CaseError::Kube(kube::Error::Api(e))) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// fixtures.CreateNewV1CustomResourceDefinitionWatchUnsafe: create, then wait until every served
/// version lists the resource in discovery.
pub(super) async fn create_crd(ctx: &Ctx, crd: Value) -> CaseResult<Crd> {
    let obj: CustomResourceDefinition = from_json(crd)?;
    let created = crds(ctx).create(&PostParams::default(), &obj).await?;
    let crd = Crd::of(to_json(&created));
    for v in &crd.served {
        ctx.wait(
            &format!("{} in the discovery of {}/{v}", crd.plural, crd.group()),
            DISCOVERY_WAIT,
            || async {
                Ok(if in_discovery(ctx, &crd, v).await? {
                    Ok(())
                } else {
                    Err("not listed")
                })
            },
        )
        .await?;
    }
    Ok(crd)
}

/// fixtures.CreateNewV1CustomResourceDefinition: as `create_crd`, then create and delete an
/// instance and watch every served version from its resourceVersion: each MUST deliver DELETED
/// (upstream's check that watches from a just-returned resourceVersion work).
pub(super) async fn create_crd_watchable(ctx: &Ctx, crd: Value) -> CaseResult<Crd> {
    let crd = create_crd(ctx, crd).await?;
    let first = crd.served.first().cloned().unwrap_or_default();
    let api = crd.api(ctx, &first);
    let instance: DynamicObject = from_json(json!({
        "apiVersion": format!("{}/{first}", crd.group()), "kind": crd.kind,
        "metadata": {"name": "setup-instance"},
        "alpha": "foo_123", "beta": 10, "gamma": "bar", "delta": "hello", "epsilon": "foobar",
        "spec": {},
    }))?;
    let created = api.create(&PostParams::default(), &instance).await?;
    api.delete("setup-instance", &DeleteParams::default())
        .await?;
    let rv = created.metadata.resource_version.unwrap_or_default();
    for v in &crd.served {
        let mut w = crd
            .api(ctx, v)
            .watch(&WatchParams::default(), &rv)
            .await?
            .boxed();
        let ev = tokio::time::timeout(Duration::from_secs(5), w.try_next())
            .await
            .map_err(|_| CaseError::Failed(format!("watch of {v} from {rv}: no event in 5s")))??;
        must!(
            matches!(ev, Some(WatchEvent::Deleted(_))),
            "watch of {}/{v} from resourceVersion {rv}: want DELETED of setup-instance, got {ev:?}",
            crd.plural
        );
    }
    Ok(crd)
}

/// fixtures.DeleteV1CustomResourceDefinition: delete, then wait until no served version lists the
/// resource in discovery.
pub(super) async fn delete_crd(ctx: &Ctx, crd: &Crd) -> CaseResult {
    crds(ctx)
        .delete(&crd.name, &DeleteParams::default())
        .await?;
    wait_gone_from_discovery(ctx, crd).await
}

async fn wait_gone_from_discovery(ctx: &Ctx, crd: &Crd) -> CaseResult {
    for v in &crd.served {
        ctx.wait(
            &format!(
                "{} gone from the discovery of {}/{v}",
                crd.plural,
                crd.group()
            ),
            DISCOVERY_WAIT,
            || async {
                Ok(if in_discovery(ctx, crd, v).await? {
                    Err("still listed")
                } else {
                    Ok(())
                })
            },
        )
        .await?;
    }
    Ok(())
}

/// The case's result, but a failure to clean up fails a case that otherwise passed.
pub(super) fn finish(result: CaseResult, cleanup: CaseResult) -> CaseResult {
    result.and(cleanup)
}

/// CRD create: creating a random CRD MUST succeed (its resource appears in discovery); deleting it
/// MUST succeed (its resource leaves discovery).
async fn create_delete(ctx: &Ctx) -> CaseResult {
    let crd = create_crd(ctx, random_crd()).await?;
    delete_crd(ctx, &crd).await
}

/// CRD list: of 10 CRDs labelled with a run id and one not, a list by the label MUST return exactly
/// the 10, each with the spec it was created with; a delete-collection by the label MUST delete
/// them and only them.
async fn list(ctx: &Ctx) -> CaseResult {
    let run = generate_name("e2e-");
    let mut labelled = Vec::new();
    let mut result = async {
        for _ in 0..10 {
            let mut obj = random_crd();
            obj["metadata"]["labels"] = json!({"e2e-list-test-uuid": run});
            labelled.push(create_crd(ctx, obj).await?);
        }
        Ok(())
    }
    .await;
    let unlabelled = create_crd(ctx, random_crd()).await;
    if result.is_ok() {
        if let Ok(other) = &unlabelled {
            result = list_body(ctx, &run, &labelled, other).await;
        }
    }
    // Whatever happened: nothing of this run may stay behind.
    let selector = ListParams::default().labels(&format!("e2e-list-test-uuid={run}"));
    let _ = crds(ctx)
        .delete_collection(&DeleteParams::default(), &selector)
        .await;
    let cleanup = match unlabelled {
        Ok(other) => delete_crd(ctx, &other).await,
        Err(e) => Err(e),
    };
    finish(result, cleanup)
}

async fn list_body(ctx: &Ctx, run: &str, labelled: &[Crd], other: &Crd) -> CaseResult {
    let selector = ListParams::default().labels(&format!("e2e-list-test-uuid={run}"));
    let listed = crds(ctx).list(&selector).await?;
    must_eq!(
        listed.items.len(),
        labelled.len(),
        "CRDs listed by the label"
    );
    for item in &listed.items {
        let item = to_json(item);
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let Some(want) = labelled.iter().find(|c| c.name == name) else {
            return Err(CaseError::Failed(format!(
                "the list by label holds {name}, which this case did not label"
            )));
        };
        must_eq!(
            item["spec"],
            want.created["spec"],
            "the listed spec of {name}"
        );
    }
    crds(ctx)
        .delete_collection(&DeleteParams::default(), &selector)
        .await?;
    for c in labelled {
        wait_gone_from_discovery(ctx, c).await?;
    }
    crds(ctx).get(&other.name).await.map_err(|e| {
        CaseError::Failed(format!(
            "the unlabelled CRD {} after the delete-collection: {e}",
            other.name
        ))
    })?;
    Ok(())
}

/// Semantic equality of a CRD condition with one that sets only `message` (as upstream's
/// `CustomResourceDefinitionCondition{Message: ..}`): type and status empty, nothing else set.
fn is_bare_condition(c: &Value, message: &str) -> bool {
    let empty = |k: &str| match &c[k] {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        _ => false,
    };
    c["message"] == json!(message)
        && empty("type")
        && empty("status")
        && empty("reason")
        && empty("lastTransitionTime")
}

fn has_condition(crd: &Value, message: &str) -> bool {
    crd["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| is_bare_condition(c, message)))
}

/// CRD status sub-resource: a get of /status MUST carry the CRD's spec; an update of /status adding
/// a condition MUST return it; a JSON patch of /status setting the conditions MUST return the
/// patched one, and a later read MUST see it.
async fn status_subresource(ctx: &Ctx) -> CaseResult {
    let crd = create_crd(ctx, random_crd()).await?;
    let result = status_body(ctx, &crd).await;
    finish(result, delete_crd(ctx, &crd).await)
}

async fn status_body(ctx: &Ctx, crd: &Crd) -> CaseResult {
    let api = crds(ctx);
    let mut updated = None;
    for _ in 0..5 {
        let got = to_json(&api.get_status(&crd.name).await?);
        must_eq!(
            got["spec"],
            crd.created["spec"],
            "the spec read through /status"
        );
        let mut status = got.clone();
        let condition = json!({"type": "", "status": "", "message": "updated"});
        match status["status"]["conditions"].as_array_mut() {
            Some(cs) => cs.push(condition),
            None => status["status"]["conditions"] = json!([condition]),
        }
        let status: CustomResourceDefinition = from_json(status)?;
        match api
            .replace_status(&crd.name, &PostParams::default(), &status)
            .await
        {
            Ok(u) => {
                updated = Some(to_json(&u));
                break;
            }
            // retry.RetryOnConflict: the controllers write the status too.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let updated = updated.ok_or_else(|| {
        CaseError::Failed("updating the status conflicted 5 times in a row".into())
    })?;
    must!(
        has_condition(&updated, "updated"),
        "the status update's result lacks condition {{message: updated}}: {}",
        updated["status"]
    );
    let patch =
        br#"[{"op": "add", "path": "/status/conditions", "value": [{"message": "patched"}]}]"#;
    let req = http::Request::patch(format!(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}/status",
        crd.name
    ))
    .header(http::header::CONTENT_TYPE, "application/json-patch+json")
    .body(patch.to_vec())
    .map_err(|e| CaseError::Failed(format!("building the patch: {e}")))?;
    let patched: Value = ctx.client.request(req).await?;
    must!(
        has_condition(&patched, "patched"),
        "the status patch's result lacks condition {{message: patched}}: {}",
        patched["status"]
    );
    let read = to_json(&api.get_status(&crd.name).await?);
    must!(
        has_condition(&read, "patched"),
        "a read after the status patch lacks condition {{message: patched}}: {}",
        read["status"]
    );
    Ok(())
}

/// CRD defaulting: a CR stored before its CRD gained a default for `a` MUST read back with a = "A"
/// (defaulting from storage); a CR created after MUST come back with a = "A" (defaulting on the
/// request); after the default moves from `a` to `b` = "B", that CR MUST read back with b = "B"
/// and keep its stored a = "A".
async fn defaulting(ctx: &Ctx) -> CaseResult {
    let mut obj = random_crd();
    let props = &mut obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    *props = json!({"a": {"type": "string"}, "b": {"type": "string"}});
    let crd = create_crd(ctx, obj).await?;
    let result = defaulting_body(ctx, &crd).await;
    finish(result, delete_crd(ctx, &crd).await)
}

pub(super) async fn patch_crd(ctx: &Ctx, crd: &Crd, patch: Value) -> CaseResult {
    let req = http::Request::patch(format!(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}",
        crd.name
    ))
    .header(http::header::CONTENT_TYPE, "application/json-patch+json")
    .body(serde_json::to_vec(&patch).unwrap_or_default())
    .map_err(|e| CaseError::Failed(format!("building the patch: {e}")))?;
    ctx.client.request::<Value>(req).await?;
    Ok(())
}

async fn defaulting_body(ctx: &Ctx, crd: &Crd) -> CaseResult {
    let api = crd.api(ctx, "v1beta1");
    let bare = |name: &str| {
        from_json::<DynamicObject>(json!({
            "apiVersion": format!("{GROUP}/v1beta1"), "kind": crd.kind, "metadata": {"name": name},
        }))
    };
    let name1 = generate_name("cr-1");
    api.create(&PostParams::default(), &bare(&name1)?).await?;

    patch_crd(
        ctx,
        crd,
        json!([{"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/a/default", "value": "A"}]),
    )
    .await?;
    ctx.wait(
        &format!("{name1} (stored without a) read with a defaulted"),
        FOREVER,
        || async {
            let got = to_json(&api.get(&name1).await?);
            match &got["a"] {
                Value::Null => Ok(Err(format!("no a: {got}"))),
                a if a == "A" => Ok(Ok(())),
                a => Err(CaseError::Failed(format!("want a: \"A\", got a: {a}"))),
            }
        },
    )
    .await?;

    let name2 = generate_name("cr-2");
    let created = to_json(&api.create(&PostParams::default(), &bare(&name2)?).await?);
    must_eq!(
        created["a"],
        json!("A"),
        "a of {name2} as its create returned it"
    );

    patch_crd(
        ctx,
        crd,
        json!([
            {"op": "remove", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/a/default"},
            {"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/b/default", "value": "B"},
        ]),
    )
    .await?;
    ctx.wait(
        &format!("{name2} read with b defaulted and its stored a kept"),
        FOREVER,
        || async {
            let got = to_json(&api.get(&name2).await?);
            match &got["b"] {
                Value::Null => return Ok(Err(format!("no b: {got}"))),
                b if b == "B" => {}
                b => return Err(CaseError::Failed(format!("want b: \"B\", got b: {b}"))),
            }
            match &got["a"] {
                a if a == "A" => Ok(Ok(())),
                Value::Null => Err(CaseError::Failed(
                    "want a: \"A\" to be unchanged, but it was removed".into(),
                )),
                a => Err(CaseError::Failed(format!(
                    "want a: \"A\" to be unchanged, but it changed to {a}"
                ))),
            }
        },
    )
    .await
}

/// CRD discovery: /apis MUST list group apiextensions.k8s.io with version v1;
/// /apis/apiextensions.k8s.io MUST name the group and list v1; /apis/apiextensions.k8s.io/v1 MUST
/// have groupVersion apiextensions.k8s.io/v1 and list customresourcedefinitions.
async fn discovery(ctx: &Ctx) -> CaseResult {
    let has_v1 = |g: &Value| {
        g["versions"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["version"] == "v1"))
    };
    let apis = get_json(ctx, "/apis").await?;
    let group = apis["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["name"] == "apiextensions.k8s.io")
        .ok_or_else(|| {
            CaseError::Failed(
                "apiextensions.k8s.io API group not found in /apis discovery document".into(),
            )
        })?;
    must!(
        has_v1(group),
        "apiextensions.k8s.io/v1 API group version not found in /apis discovery document: {group}"
    );

    let group = get_json(ctx, "/apis/apiextensions.k8s.io").await?;
    must_eq!(
        group["name"],
        json!("apiextensions.k8s.io"),
        "the API group name in /apis/apiextensions.k8s.io"
    );
    must!(
        has_v1(&group),
        "apiextensions.k8s.io/v1 API group version not found in /apis/apiextensions.k8s.io discovery document: {group}"
    );

    let list = get_json(ctx, "/apis/apiextensions.k8s.io/v1").await?;
    must_eq!(
        list["groupVersion"],
        json!("apiextensions.k8s.io/v1"),
        "the groupVersion in /apis/apiextensions.k8s.io/v1"
    );
    must!(
        list["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|r| r["name"] == "customresourcedefinitions")),
        "customresourcedefinitions resource not found in /apis/apiextensions.k8s.io/v1 discovery document"
    );
    Ok(())
}

type CrStream = futures::stream::BoxStream<'static, kube::Result<WatchEvent<DynamicObject>>>;

/// CRD watch: two watches by name (name1, name2) on the noxu CRD's resource. Creating, patching
/// and deleting name1 MUST be seen as ADDED (the created object), MODIFIED, DELETED by watch A and
/// not by watch B; the same for name2 the other way round.
async fn watch(ctx: &Ctx) -> CaseResult {
    let crd = create_crd_watchable(ctx, noxu_crd()).await?;
    let result = watch_body(ctx, &crd).await;
    finish(result, delete_crd(ctx, &crd).await)
}

async fn watch_body(ctx: &Ctx, crd: &Crd) -> CaseResult {
    let api = crd.api(ctx, "v1beta1");
    let by_name = |name: &str| {
        WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290)
    };
    let mut wa: CrStream = api.watch(&by_name("name1"), "").await?.boxed();
    let mut wb: CrStream = api.watch(&by_name("name2"), "").await?.boxed();

    let a = instantiate(ctx, crd, "name1").await?;
    expect_event(&mut wa, "ADDED", Some(&a)).await?;
    expect_no_event(&mut wb, "ADDED").await?;
    let b = instantiate(ctx, crd, "name2").await?;
    expect_event(&mut wb, "ADDED", Some(&b)).await?;
    expect_no_event(&mut wa, "ADDED").await?;

    modify(ctx, crd, "name1").await?;
    expect_event(&mut wa, "MODIFIED", None).await?;
    expect_no_event(&mut wb, "MODIFIED").await?;
    modify(ctx, crd, "name2").await?;
    expect_event(&mut wb, "MODIFIED", None).await?;
    expect_no_event(&mut wa, "MODIFIED").await?;

    api.delete("name1", &DeleteParams::default()).await?;
    expect_event(&mut wa, "DELETED", None).await?;
    expect_no_event(&mut wb, "DELETED").await?;
    api.delete("name2", &DeleteParams::default()).await?;
    expect_event(&mut wb, "DELETED", None).await?;
    expect_no_event(&mut wa, "DELETED").await?;
    Ok(())
}

/// patchCustomResource: a JSON patch adding `/dummy`.
async fn modify(ctx: &Ctx, crd: &Crd, name: &str) -> CaseResult {
    let req = http::Request::patch(format!("{}/{name}", crd.path("v1beta1")))
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(br#"[{ "op": "add", "path": "/dummy", "value": "test" }]"#.to_vec())
        .map_err(|e| CaseError::Failed(format!("building the patch: {e}")))?;
    ctx.client.request::<Value>(req).await?;
    Ok(())
}

/// instantiateCustomResource: the created object MUST have a uid, and the CRD's apiVersion and kind.
async fn instantiate(ctx: &Ctx, crd: &Crd, name: &str) -> CaseResult<Value> {
    let api = crd.api(ctx, "v1beta1");
    let obj: DynamicObject = from_json(noxu_instance(name))?;
    let created = to_json(&api.create(&PostParams::default(), &obj).await?);
    must!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "missing uid: {created}"
    );
    must_eq!(
        created["apiVersion"],
        json!(format!("{GROUP}/v1beta1")),
        "apiVersion of the created {name}"
    );
    must_eq!(
        created["kind"],
        json!(crd.kind),
        "kind of the created {name}"
    );
    Ok(created)
}

fn event_of(ev: &WatchEvent<DynamicObject>) -> Option<(&'static str, Value)> {
    match ev {
        WatchEvent::Added(o) => Some(("ADDED", to_json(o))),
        WatchEvent::Modified(o) => Some(("MODIFIED", to_json(o))),
        WatchEvent::Deleted(o) => Some(("DELETED", to_json(o))),
        _ => None,
    }
}

/// expectEvent: within wait.ForeverTestTimeout an event of the type (equal to `object` when
/// given) MUST arrive; other events are skipped, as upstream's waitForEvent does.
async fn expect_event(w: &mut CrStream, kind: &str, object: Option<&Value>) -> CaseResult {
    let deadline = tokio::time::Instant::now() + FOREVER;
    let mut seen = Vec::new();
    loop {
        let next = tokio::time::timeout_at(deadline, w.try_next())
            .await
            .map_err(|_| {
                CaseError::Failed(format!(
                    "no {kind} event in {}s; saw {seen:?}",
                    FOREVER.as_secs()
                ))
            })??;
        let Some(ev) = next else {
            return Err(CaseError::Failed(format!(
                "the watch ended before {kind}; saw {seen:?}"
            )));
        };
        if let WatchEvent::Error(e) = &ev {
            return Err(CaseError::Failed(format!("watch error: {}", e.message)));
        }
        if let Some((t, o)) = event_of(&ev) {
            if t == kind && object.is_none_or(|want| *want == o) {
                return Ok(());
            }
            seen.push(format!("{t} {o}"));
        }
    }
}

/// expectNoEvent: no event of the type arrives for a while.
async fn expect_no_event(w: &mut CrStream, kind: &str) -> CaseResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(next) = tokio::time::timeout_at(deadline, w.try_next()).await {
        match next? {
            None => return Ok(()),
            Some(ev) => {
                if let Some((t, o)) = event_of(&ev) {
                    must!(t != kind, "unexpected {t} event: {o}");
                }
            }
        }
    }
    Ok(())
}
