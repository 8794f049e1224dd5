//! sig-api-machinery CustomResourcePublishOpenAPI entries: a CRD's structural schema MUST be
//! published in `/openapi/v2` under the definition `<reversed group>.<version>.<kind>` (and leave
//! it when the version or the CRD goes), kubectl MUST validate custom resources by it on create
//! and apply, and `kubectl explain` MUST describe them from it. The CRDs are upstream's
//! (test/utils/crd): namespaced, kind and plural `e2e-test-<namespace>-<5>-crd(s)`, group
//! `crd-publish-openapi-test-<suffix>.example.com`, the first version stored.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::crds::{create_crd, delete_crd, finish, generate_name, patch_crd, Crd};
use super::{case, Case};
use crate::ctx::Ctx;
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for CRD with validation schema [Conformance]",
        "crd-publish-openapi",
        with_validation_schema
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for CRD without validation schema [Conformance]",
        "crd-publish-openapi",
        without_validation_schema
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for CRD preserving unknown fields at the schema root [Conformance]",
        "crd-publish-openapi",
        unknown_at_root
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for CRD preserving unknown fields in an embedded object [Conformance]",
        "crd-publish-openapi",
        unknown_in_nested
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for multiple CRDs of different groups [Conformance]",
        "crd-publish-openapi",
        different_groups
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for multiple CRDs of same group but different versions [Conformance]",
        "crd-publish-openapi",
        different_versions
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for multiple CRDs of same group and version but different kinds [Conformance]",
        "crd-publish-openapi",
        different_kinds
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] updates the published spec when one version gets renamed [Conformance]",
        "crd-publish-openapi",
        version_renamed
    ),
    case!(
        "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] removes definition from spec when one version gets changed to not be served [Conformance]",
        "crd-publish-openapi",
        version_unserved
    ),
];

/// The framework's base name, the first part of every group.
const BASE: &str = "crd-publish-openapi";
/// waitForOpenAPISchema: every 500 ms for 60 s.
const OPENAPI_WAIT: Duration = Duration::from_secs(60);
const OPENAPI_POLL: Duration = Duration::from_millis(500);

/// Upstream's schemaFoo: objects, arrays, primitives, a required field, an enum and a pattern.
fn schema_foo() -> Value {
    json!({
        "description": "Foo CRD for Testing",
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "description": "Specification of Foo",
                "properties": {"bars": {
                    "description": "List of Bars and their specs.",
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"description": "Name of Bar.", "type": "string"},
                            "age": {"description": "Age of Bar.", "type": "string"},
                            "feeling": {"description": "Whether Bar is feeling great.", "type": "string",
                                        "enum": ["Great", "Down"]},
                            "bazs": {"description": "List of Bazs.", "items": {"type": "string"}, "type": "array"},
                        },
                    },
                }},
            },
            "status": {
                "description": "Status of Foo",
                "type": "object",
                "properties": {"bars": {
                    "description": "List of Bars and their statuses.",
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"description": "Name of Bar.", "type": "string"},
                            "available": {"description": "Whether the Bar is installed.", "type": "boolean"},
                            "quxType": {"description": "Indicates to external qux type.",
                                        "pattern": "in-tree|out-of-tree", "type": "string"},
                        },
                    },
                }},
            },
        },
    })
}

/// Upstream's Waldo shape (schemaWaldo, schemaPreserveRoot, schemaPreserveNested differ only in
/// the description and where x-kubernetes-preserve-unknown-fields sits).
fn waldo_like(description: &str, at_root: bool, in_spec: bool) -> Value {
    let mut spec = json!({
        "description": "Specification of Waldo",
        "type": "object",
        "properties": {"dummy": {"description": "Dummy property.", "type": "object"}},
    });
    if in_spec {
        spec["x-kubernetes-preserve-unknown-fields"] = json!(true);
    }
    let mut schema = json!({
        "description": description,
        "type": "object",
        "properties": {
            "spec": spec,
            "status": {
                "description": "Status of Waldo",
                "type": "object",
                "properties": {"bars": {
                    "description": "List of Bars and their statuses.",
                    "type": "array",
                    "items": {"type": "object"},
                }},
            },
        },
    });
    if at_root {
        schema["x-kubernetes-preserve-unknown-fields"] = json!(true);
    }
    schema
}

fn schema_waldo() -> Value {
    waldo_like("Waldo CRD for Testing", false, false)
}

fn schema_preserve_root() -> Value {
    waldo_like(
        "preserve-unknown-properties at root for Testing",
        true,
        false,
    )
}

fn schema_preserve_nested() -> Value {
    waldo_like(
        "preserve-unknown-properties in nested field for Testing",
        false,
        true,
    )
}

/// openapiutil.ToRESTFriendlyName("<group>/<version>/<kind>"): the group's parts reversed.
fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// What a published definition is checked against.
#[derive(Clone, Copy)]
enum Expect<'a> {
    /// Only that it exists.
    Exists,
    /// The schema, once the properties and extensions the server adds are dropped.
    Schema(&'a Value),
}

/// Drop what upstream's Go types cannot tell from absence (nulls, empty strings, lists and maps,
/// false flags that are not extensions), recursively: Semantic.DeepEqual's view of a schema.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalize(v)))
                .filter(|(k, v)| match v {
                    Value::Null => false,
                    Value::String(s) => !s.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    Value::Bool(b) => *b || k.starts_with("x-"),
                    _ => true,
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

/// dropDefaults: the published definition without the metadata, apiVersion and kind properties
/// and the GVK and selectable-fields extensions the server adds.
fn drop_defaults(def: &Value) -> Value {
    let mut d = def.clone();
    if let Some(props) = d.get_mut("properties").and_then(Value::as_object_mut) {
        for k in ["metadata", "apiVersion", "kind"] {
            props.remove(k);
        }
    }
    if let Some(m) = d.as_object_mut() {
        m.remove("x-kubernetes-group-version-kind");
        m.remove("x-kubernetes-selectable-fields");
    }
    normalize(&d)
}

/// Why the definition does not (yet) match, or None when it does.
fn definition_mismatch(doc: &Value, name: &str, expect: Expect) -> Option<String> {
    let Some(def) = doc["definitions"].get(name) else {
        return Some(format!("definitions[{name:?}] not found"));
    };
    match expect {
        Expect::Exists => None,
        Expect::Schema(want) => {
            let got = drop_defaults(def);
            (got != normalize(want))
                .then(|| format!("definitions[{name:?}] does not match; want {want}, got {got}"))
        }
    }
}

/// One GET of /openapi/v2 (JSON), with the ETag of the last answer: a 304 keeps `last`.
async fn fetch_openapi_v2(ctx: &Ctx, last: &mut Option<(String, Value)>) -> CaseResult<Value> {
    let mut req =
        http::Request::get("/openapi/v2").header(http::header::ACCEPT, "application/json");
    if let Some((etag, _)) = last.as_ref() {
        req = req.header(http::header::IF_NONE_MATCH, etag.as_str());
    }
    let req = req
        .body(kube::client::Body::empty())
        .map_err(|e| CaseError::Failed(format!("building GET /openapi/v2: {e}")))?;
    let resp = ctx.client.send(req).await?;
    let status = resp.status().as_u16();
    let etag = resp
        .headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    if status == 304 {
        if let Some((_, doc)) = last.as_ref() {
            return Ok(doc.clone());
        }
    }
    let bytes = resp.into_body().collect_bytes().await?;
    must!(
        status == 200,
        "GET /openapi/v2: unexpected response: {status} {}",
        String::from_utf8_lossy(&bytes)
    );
    let doc: Value = serde_json::from_slice(&bytes).map_err(|source| CaseError::Json {
        what: "/openapi/v2".into(),
        source,
    })?;
    if let Some(etag) = etag {
        *last = Some((etag, doc.clone()));
    }
    Ok(doc)
}

/// waitForOpenAPISchema: poll /openapi/v2 until `check` finds nothing wrong.
async fn wait_openapi(
    ctx: &Ctx,
    what: &str,
    check: impl Fn(&Value) -> Option<String>,
) -> CaseResult {
    let deadline = tokio::time::Instant::now() + OPENAPI_WAIT;
    let mut last = None;
    loop {
        let doc = fetch_openapi_v2(ctx, &mut last).await?;
        let Some(why) = check(&doc) else {
            return Ok(());
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(CaseError::Timeout {
                what: what.into(),
                after: OPENAPI_WAIT,
                last: why,
            });
        }
        tokio::time::sleep(OPENAPI_POLL).await;
    }
}

/// waitForDefinition: the CRD's version MUST be published (with the schema when one is given).
async fn wait_for_definition(
    ctx: &Ctx,
    crd: &Crd,
    version: &str,
    expect: Expect<'_>,
) -> CaseResult {
    let name = definition_name(crd.group(), version, &crd.kind);
    wait_openapi(
        ctx,
        &format!("definition {name} to be served with the right OpenAPI schema"),
        |doc| definition_mismatch(doc, &name, expect),
    )
    .await
}

/// waitForDefinitionCleanup: the CRD's version MUST leave /openapi/v2.
async fn wait_for_definition_cleanup(ctx: &Ctx, crd: &Crd, version: &str) -> CaseResult {
    let name = definition_name(crd.group(), version, &crd.kind);
    wait_openapi(
        ctx,
        &format!("definition {name} not to be served anymore"),
        |doc| {
            doc["definitions"]
                .get(&name)
                .map(|_| format!("definitions[{name:?}] still exists"))
        },
    )
    .await
}

/// The CRDs a case made (with every version name the spec lists), cleaned up whatever happens.
#[derive(Default)]
struct Made(Vec<(Crd, Vec<String>)>);

impl Made {
    /// setupCRDAndVerifySchema: make the CRD (`schema` None: x-kubernetes-preserve-unknown-fields
    /// at the root, as upstream's nil schema) and wait for each version's definition.
    async fn setup(
        &mut self,
        ctx: &Ctx,
        schema: Option<&Value>,
        expect: Expect<'_>,
        suffix: &str,
        versions: &[&str],
    ) -> CaseResult<Crd> {
        let group = format!("{BASE}-test-{suffix}.example.com");
        let name = generate_name(&format!("e2e-test-{}-", ctx.ns)) + "-crd";
        let openapi = schema.cloned().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        let crd_versions: Vec<Value> = versions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                json!({"name": v, "served": true, "storage": i == 0,
                       "schema": {"openAPIV3Schema": openapi}})
            })
            .collect();
        let crd = create_crd(
            ctx,
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{name}s.{group}")},
                "spec": {
                    "group": group,
                    "versions": crd_versions,
                    "names": {"plural": format!("{name}s"), "singular": name, "kind": name,
                              "listKind": format!("{name}List")},
                    "scope": "Namespaced",
                }
            }),
        )
        .await?;
        self.0.push((
            crd.clone(),
            versions.iter().map(|v| v.to_string()).collect(),
        ));
        for v in versions {
            wait_for_definition(ctx, &crd, v, expect).await?;
        }
        Ok(crd)
    }

    /// cleanupCRD for every CRD made so far: delete it (its resource leaves discovery), then
    /// every version's definition MUST leave /openapi/v2.
    async fn clean(&mut self, ctx: &Ctx) -> CaseResult {
        let mut result = Ok(());
        for (crd, versions) in std::mem::take(&mut self.0) {
            let one = async {
                delete_crd(ctx, &crd).await?;
                for v in &versions {
                    wait_for_definition_cleanup(ctx, &crd, v).await?;
                }
                Ok(())
            }
            .await;
            result = result.and(one);
        }
        result
    }

    /// Record a renamed (or unserved) version, so cleanup waits for the right names.
    fn update(&mut self, crd: &Crd, served: &[&str], versions: &[&str]) {
        for (c, vs) in &mut self.0 {
            if c.name == crd.name {
                c.served = served.iter().map(|v| v.to_string()).collect();
                *vs = versions.iter().map(|v| v.to_string()).collect();
            }
        }
    }
}

type Body = for<'a> fn(&'a Ctx, &'a mut Made) -> BoxFuture<'a, CaseResult>;

/// Run a case's body, then clean up every CRD it made: a failed cleanup fails the case.
async fn run(ctx: &Ctx, body: Body) -> CaseResult {
    let mut made = Made::default();
    let result = body(ctx, &mut made).await;
    finish(result, made.clean(ctx).await)
}

/// kubectl with `input` on stdin (upstream's RunKubectlInput): stdout, or the error with stderr.
async fn kubectl_input(ctx: &Ctx, input: &str, args: &[&str]) -> CaseResult<String> {
    let mut cmd = tokio::process::Command::new(&ctx.cluster.kubectl);
    if let Some(k) = &ctx.cluster.kubeconfig {
        cmd.arg("--kubeconfig").arg(k);
    }
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let io = |source| CaseError::Io {
        what: format!("running {}", ctx.cluster.kubectl),
        source,
    };
    let mut child = cmd.spawn().map_err(io)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).await.map_err(io)?;
    }
    let out = child.wait_with_output().await.map_err(io)?;
    if !out.status.success() {
        return Err(CaseError::Kubectl {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A custom resource as upstream's metaPattern writes it, then `rest` (raw JSON members).
fn cr_json(crd: &Crd, name: &str, rest: &str) -> String {
    let version = crd.served.first().map(String::as_str).unwrap_or_default();
    format!(
        r#"{{"kind":"{}","apiVersion":"{}/{version}","metadata":{{"name":"{name}"}},{rest}}}"#,
        crd.kind,
        crd.group()
    )
}

/// `kubectl create -f -` and `kubectl apply -f -` of the CR MUST each succeed (the CR deleted
/// after each).
async fn create_and_apply(ctx: &Ctx, crd: &Crd, name: &str, cr: &str) -> CaseResult {
    let ns = format!("--namespace={}", ctx.ns);
    for verb in ["create", "apply"] {
        kubectl_input(ctx, cr, &[&ns, verb, "-f", "-"])
            .await
            .map_err(|e| CaseError::Failed(format!("failed to {verb} CR {cr}: {e}")))?;
        ctx.kubectl(&[&ns, "delete", &crd.plural, name])
            .await
            .map_err(|e| CaseError::Failed(format!("failed to delete CR {name}: {e}")))?;
    }
    Ok(())
}

/// kubectl `verbs` of the CR MUST each fail with one of `wants` in the error.
async fn must_reject(ctx: &Ctx, cr: &str, verbs: &[&str], wants: &[&str]) -> CaseResult {
    let ns = format!("--namespace={}", ctx.ns);
    for verb in verbs {
        let got = kubectl_input(ctx, cr, &[&ns, verb, "-f", "-"]).await;
        let text = match &got {
            Ok(out) => format!("no error; stdout {out}"),
            Err(e) => e.to_string(),
        };
        must!(
            got.is_err() && wants.iter().any(|w| text.contains(w)),
            "kubectl {verb} of {cr}: want an error containing one of {wants:?}, got: {text}"
        );
    }
    Ok(())
}

/// verifyKubectlExplain: `kubectl explain <what>` MUST match the pattern.
async fn explain_matches(ctx: &Ctx, what: &str, pattern: &str) -> CaseResult {
    let out = ctx
        .kubectl(&["explain", what])
        .await
        .map_err(|e| CaseError::Failed(format!("failed to explain {what}: {e}")))?;
    let re = regex::Regex::new(pattern)
        .map_err(|e| CaseError::Failed(format!("pattern {pattern}: {e}")))?;
    must!(
        re.is_match(&out),
        "kubectl explain {what} result {{{out}}} doesn't match pattern {{{pattern}}}"
    );
    Ok(())
}

/// What each kubectl rejection of the validation-schema case sends and MUST be told.
const REJECTIONS: &[(&str, &[&str], &[&str])] = &[
    // A value outside the enum (create).
    (
        r#""spec":{"bars":[{"name":"test-bar", "feeling":"NonExistentValue"}]}"#,
        &["create"],
        &[r#"Unsupported value: "NonExistentValue""#],
    ),
    // An unknown property where the schema allows none.
    (
        r#""spec":{"foo":true}"#,
        &["create", "apply"],
        &[r#"unknown field "foo""#, r#"unknown field "spec.foo""#],
    ),
    // A required property missing.
    (
        r#""spec":{"bars":[{"age":"10"}]}"#,
        &["create", "apply"],
        &[
            r#"missing required field "name""#,
            "spec.bars[0].name: Required value",
        ],
    ),
];

/// What `kubectl explain` of the validation-schema CRD MUST say: (path after the plural, pattern).
const EXPLAINED: &[(&str, &str)] = &[
    (
        "",
        r"(?s)DESCRIPTION:.*Foo CRD for Testing.*FIELDS:.*apiVersion.*<string>.*APIVersion defines.*spec.*<Object>.*Specification of Foo",
    ),
    (
        ".metadata",
        r"(?s)DESCRIPTION:.*Standard object's metadata.*FIELDS:.*creationTimestamp.*<string>.*CreationTimestamp is a timestamp",
    ),
    (
        ".spec",
        r"(?s)DESCRIPTION:.*Specification of Foo.*FIELDS:.*bars.*<\[\]Object>.*List of Bars and their specs",
    ),
    (
        ".spec.bars",
        r"(?s)(FIELD|RESOURCE):.*bars.*<\[\]Object>.*DESCRIPTION:.*List of Bars and their specs.*FIELDS:.*bazs.*<\[\]string>.*List of Bazs.*name.*<string>.*Name of Bar",
    ),
];

/// With validation schema: the schemaFoo CRD's definition MUST be published as the schema;
/// kubectl create and apply of a valid CR MUST pass; a value outside the enum, an unknown
/// property and a missing required property MUST be rejected; `kubectl explain` MUST explain the
/// CR's properties and nested properties, and MUST fail with `field "bars2" does not exist` for
/// a property that does not exist.
async fn with_validation_schema(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| Box::pin(with_validation_schema_body(c, m))).await
}

async fn with_validation_schema_body(ctx: &Ctx, made: &mut Made) -> CaseResult {
    let schema = schema_foo();
    let crd = made
        .setup(ctx, Some(&schema), Expect::Schema(&schema), "foo", &["v1"])
        .await?;
    let valid = cr_json(&crd, "test-foo", r#""spec":{"bars":[{"name":"test-bar"}]}"#);
    create_and_apply(ctx, &crd, "test-foo", &valid).await?;
    for (rest, verbs, wants) in REJECTIONS {
        must_reject(ctx, &cr_json(&crd, "test-foo", rest), verbs, wants).await?;
    }
    for (path, pattern) in EXPLAINED {
        explain_matches(ctx, &format!("{}{path}", crd.plural), pattern).await?;
    }
    let missing = format!("{}.spec.bars2", crd.plural);
    let got = ctx.kubectl(&["explain", &missing]).await;
    let text = match &got {
        Ok(out) => format!("no error; stdout {out}"),
        Err(e) => e.to_string(),
    };
    must!(
        got.is_err() && text.contains(r#"field "bars2" does not exist"#),
        "kubectl explain {missing}: want an error containing `field \"bars2\" does not exist`, got: {text}"
    );
    Ok(())
}

/// The three CRDs that keep unknown fields: the schema (None: upstream's nil schema), whether
/// the published definition is compared (nil schema: with `type: object`), the group suffix, the
/// CR's members past metadata, and the explain pattern (`{kind}` replaced).
struct Unknown {
    schema: fn() -> Option<Value>,
    compare: bool,
    suffix: &'static str,
    rest: &'static str,
    explain: &'static str,
}

const WITHOUT_SCHEMA: Unknown = Unknown {
    schema: || None,
    compare: true,
    suffix: "empty",
    rest: r#""a":{"b":[{"c":"d"}]}"#,
    explain: r"(?s)DESCRIPTION:.*<empty>",
};

const AT_ROOT: Unknown = Unknown {
    schema: || Some(schema_preserve_root()),
    compare: false,
    suffix: "unknown-at-root",
    rest: r#""a":{"b":[{"c":"d"}]}"#,
    explain: r"(?s)KIND:.*{kind}",
};

const IN_NESTED: Unknown = Unknown {
    schema: || Some(schema_preserve_nested()),
    compare: false,
    suffix: "unknown-in-nested",
    rest: r#""spec":{"a":null,"b":[{"c":"d"}]}"#,
    explain: r"(?s)DESCRIPTION:.*preserve-unknown-properties in nested field for Testing",
};

/// A CRD keeping unknown fields: its definition MUST be published; kubectl create and apply of
/// a CR with unknown properties MUST pass; `kubectl explain` MUST match the pattern.
async fn unknown_fields(ctx: &Ctx, made: &mut Made, u: &Unknown) -> CaseResult {
    let schema = (u.schema)();
    let object = json!({"type": "object"});
    let expect = match (&schema, u.compare) {
        (_, false) => Expect::Exists,
        (Some(s), true) => Expect::Schema(s),
        (None, true) => Expect::Schema(&object),
    };
    let crd = made
        .setup(ctx, schema.as_ref(), expect, u.suffix, &["v1"])
        .await?;
    create_and_apply(ctx, &crd, "test-cr", &cr_json(&crd, "test-cr", u.rest)).await?;
    explain_matches(ctx, &crd.plural, &u.explain.replace("{kind}", &crd.kind)).await
}

/// x-kubernetes-preserve-unknown-fields in the top-level object (no schema): the definition MUST
/// be `type: object`; kubectl MUST accept unknown properties; explain MUST show a DESCRIPTION
/// stanza (`<empty>`).
async fn without_validation_schema(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| Box::pin(unknown_fields(c, m, &WITHOUT_SCHEMA))).await
}

/// x-kubernetes-preserve-unknown-fields at the schema root: kubectl MUST accept unknown
/// properties; explain MUST show the CR's KIND.
async fn unknown_at_root(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| Box::pin(unknown_fields(c, m, &AT_ROOT))).await
}

/// x-kubernetes-preserve-unknown-fields in an embedded object: kubectl MUST accept unknown
/// properties; explain MUST show the schema's description.
async fn unknown_in_nested(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| Box::pin(unknown_fields(c, m, &IN_NESTED))).await
}

/// One CRD of a pair: its schema, group suffix and (single) version.
type One = (fn() -> Value, &'static str, &'static str);

/// Two CRDs (Foo, then Waldo): both MUST be made with their definitions published; their groups
/// MUST be the same or differ as `same_group` says; each definition MUST then (still) be served
/// with its schema, Waldo's first.
async fn pair(ctx: &Ctx, made: &mut Made, first: One, second: One, same_group: bool) -> CaseResult {
    let mut made_pair = Vec::new();
    for (schema, suffix, version) in [first, second] {
        let s = schema();
        let crd = made
            .setup(ctx, Some(&s), Expect::Schema(&s), suffix, &[version])
            .await?;
        made_pair.push((crd, s, version));
    }
    let (f, w) = (&made_pair[0], &made_pair[1]);
    must_eq!(
        f.0.group() == w.0.group(),
        same_group,
        "CRDs of groups {} and {} being of the same group",
        f.0.group(),
        w.0.group()
    );
    for (crd, schema, version) in [w, f] {
        wait_for_definition(ctx, crd, version, Expect::Schema(schema)).await?;
    }
    Ok(())
}

/// Varying groups: a Foo CRD (v1) and a Waldo CRD (v1beta1) of different groups MUST both be
/// published.
async fn different_groups(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| {
        Box::pin(pair(
            c,
            m,
            (schema_foo, "foo", "v1"),
            (schema_waldo, "waldo", "v1beta1"),
            false,
        ))
    })
    .await
}

/// A multi-version Foo CRD: every version's definition MUST be published with the schema.
async fn multi_version(
    ctx: &Ctx,
    made: &mut Made,
    suffix: &str,
    versions: &[&str],
) -> CaseResult<Crd> {
    let schema = schema_foo();
    let crd = made
        .setup(
            ctx,
            Some(&schema),
            Expect::Schema(&schema),
            suffix,
            versions,
        )
        .await?;
    for v in versions.iter().rev() {
        wait_for_definition(ctx, &crd, v, Expect::Schema(&schema)).await?;
    }
    Ok(crd)
}

/// Varying versions: a CRD of versions v2 and v3 MUST have both published (and leave when
/// deleted); then a Foo CRD (v4) and a Waldo CRD (v5) of one group MUST both be published.
async fn different_versions(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| Box::pin(different_versions_body(c, m))).await
}

async fn different_versions_body(ctx: &Ctx, made: &mut Made) -> CaseResult {
    multi_version(ctx, made, "multi-ver", &["v2", "v3"]).await?;
    made.clean(ctx).await?;
    pair(
        ctx,
        made,
        (schema_foo, "common-group", "v4"),
        (schema_waldo, "common-group", "v5"),
        true,
    )
    .await
}

/// Varying kinds: a Foo CRD and a Waldo CRD of one group and version (v6) MUST both be published.
async fn different_kinds(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| {
        Box::pin(pair(
            c,
            m,
            (schema_foo, "common-group", "v6"),
            (schema_waldo, "common-group", "v6"),
            true,
        ))
    })
    .await
}

fn crds(ctx: &Ctx) -> Api<CustomResourceDefinition> {
    ctx.all()
}

/// Version rename: a CRD of versions v2 and v3 MUST have both published; after a JSON patch
/// renames v3 to v4, v4 MUST be published, v3 MUST leave, v2 MUST stay as it was.
async fn version_renamed(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| Box::pin(version_renamed_body(c, m))).await
}

async fn version_renamed_body(ctx: &Ctx, made: &mut Made) -> CaseResult {
    let crd = multi_version(ctx, made, "multi-ver", &["v2", "v3"]).await?;
    patch_crd(
        ctx,
        &crd,
        json!([
            {"op": "test", "path": "/spec/versions/1/name", "value": "v3"},
            {"op": "replace", "path": "/spec/versions/1/name", "value": "v4"},
        ]),
    )
    .await?;
    made.update(&crd, &["v2", "v4"], &["v2", "v4"]);
    let schema = schema_foo();
    wait_for_definition(ctx, &crd, "v4", Expect::Schema(&schema)).await?;
    wait_for_definition_cleanup(ctx, &crd, "v3").await?;
    wait_for_definition(ctx, &crd, "v2", Expect::Schema(&schema)).await
}

/// Stop serving a version: a CRD of versions v5 and v6alpha1 MUST have both published; after
/// an update marks v6alpha1 not served, its definition MUST leave and v5's MUST stay.
async fn version_unserved(ctx: &Ctx) -> CaseResult {
    run(ctx, |c, m| Box::pin(version_unserved_body(c, m))).await
}

async fn version_unserved_body(ctx: &Ctx, made: &mut Made) -> CaseResult {
    let crd = multi_version(ctx, made, "multi-to-single-ver", &["v5", "v6alpha1"]).await?;
    let mut current = crds(ctx).get(&crd.name).await?;
    must!(
        current.spec.versions.len() == 2,
        "{} has {} versions, want 2",
        crd.name,
        current.spec.versions.len()
    );
    current.spec.versions[1].served = false;
    crds(ctx)
        .replace(&crd.name, &PostParams::default(), &current)
        .await?;
    made.update(&crd, &["v5"], &["v5", "v6alpha1"]);
    wait_for_definition_cleanup(ctx, &crd, "v6alpha1").await?;
    let schema = schema_foo();
    wait_for_definition(ctx, &crd, "v5", Expect::Schema(&schema)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_names_reverse_the_group() {
        assert_eq!(
            definition_name("crd-publish-openapi-test-foo.example.com", "v1", "E2e"),
            "com.example.crd-publish-openapi-test-foo.v1.E2e"
        );
    }

    #[test]
    fn published_schema_matches_after_dropping_defaults() {
        let schema = schema_foo();
        let mut published = schema.clone();
        published["properties"]["metadata"] = json!({"$ref": "#/definitions/x"});
        published["properties"]["kind"] = json!({"type": "string"});
        published["x-kubernetes-group-version-kind"] = json!([{"group": "g"}]);
        assert_eq!(drop_defaults(&published), normalize(&schema));
        published["properties"]["spec"]["description"] = json!("other");
        assert!(definition_mismatch(
            &json!({"definitions": {"d": published}}),
            "d",
            Expect::Schema(&schema)
        )
        .is_some());
    }

    #[test]
    fn nil_schema_definition_is_type_object() {
        let def = json!({"type": "object", "properties": {"apiVersion": {"type": "string"}},
                         "x-kubernetes-group-version-kind": []});
        assert_eq!(drop_defaults(&def), json!({"type": "object"}));
    }
}
