//! sig-api-machinery FieldValidation entries: `fieldValidation=Strict` on typed objects (POST) and
//! on custom resources (server-side apply of YAML), as upstream's field_validation.go sends them.

use serde_json::{json, Value};

use super::crds::{
    allow_all_schema, create_crd_watchable, delete_crd, random_multi_version_crd, Crd, GROUP,
};
use super::{case, Case};
use crate::ctx::Ctx;
use crate::error::{CaseError, CaseResult};
use crate::must;

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] FieldValidation should detect unknown and duplicate fields of a typed object [Conformance]",
        "field-validation",
        typed_unknown_and_duplicate
    ),
    case!(
        "[sig-api-machinery] FieldValidation should detect unknown metadata fields of a typed object [Conformance]",
        "field-validation",
        typed_unknown_metadata
    ),
    case!(
        "[sig-api-machinery] FieldValidation should create/apply a valid CR for CRD with validation schema [Conformance]",
        "field-validation",
        valid_cr
    ),
    case!(
        "[sig-api-machinery] FieldValidation should create/apply a CR with unknown fields for CRD with no validation schema [Conformance]",
        "field-validation",
        cr_without_schema
    ),
    case!(
        "[sig-api-machinery] FieldValidation should create/apply an invalid CR with extra properties for CRD with validation schema [Conformance]",
        "field-validation",
        cr_extra_properties
    ),
    case!(
        "[sig-api-machinery] FieldValidation should detect unknown metadata fields in both the root and embedded object of a CR [Conformance]",
        "field-validation",
        cr_unknown_metadata
    ),
    case!(
        "[sig-api-machinery] FieldValidation should detect duplicates in a CR when preserving unknown fields [Conformance]",
        "field-validation",
        cr_duplicates
    ),
];

const MANAGER: &str = "field_validation_mgr";

/// What the server answered: code and body.
#[derive(Debug)]
pub(super) struct Reply {
    pub code: u16,
    pub body: String,
}

impl Reply {
    /// The Status message when the body is one, else the body.
    pub fn message(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v["message"].as_str().map(String::from))
            .unwrap_or_else(|| self.body.clone())
    }

    fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// A request with a raw body, whatever the answer (the cases read errors' texts).
pub(super) async fn raw(
    ctx: &Ctx,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &[u8],
) -> CaseResult<Reply> {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(kube::client::Body::from(body.to_vec()))
        .map_err(|e| CaseError::Failed(format!("building {method} {uri}: {e}")))?;
    let resp = ctx.client.send(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await?;
    Ok(Reply {
        code,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// A Deployment manifest as upstream writes it, `spec_extra` and `meta_extra` spliced in as raw
/// JSON text (so a key can appear twice).
fn deployment(meta_extra: &str, spec_extra: &str) -> String {
    format!(
        r#"{{
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {{
            "name": "my-dep",{meta_extra}
            "labels": {{"app": "nginx"}}
        }},
        "spec": {{{spec_extra}
            "selector": {{"matchLabels": {{"app": "nginx"}}}},
            "template": {{
                "metadata": {{"labels": {{"app": "nginx"}}}},
                "spec": {{"containers": [{{"name": "nginx", "image": "nginx:latest"}}]}}
            }}
        }}
    }}"#
    )
}

async fn post_deployment_strict(ctx: &Ctx, body: &str) -> CaseResult<Reply> {
    let uri = format!(
        "/apis/apps/v1/namespaces/{}/deployments?fieldManager={MANAGER}&fieldValidation=Strict",
        ctx.ns
    );
    raw(ctx, "POST", &uri, "application/json", body.as_bytes()).await
}

/// Typed object: a Deployment with an unknown spec field and spec.replicas twice MUST be refused,
/// the error naming both: `strict decoding error: unknown field "spec.unknownField", duplicate
/// field "spec.replicas"`.
async fn typed_unknown_and_duplicate(ctx: &Ctx) -> CaseResult {
    let body = deployment(
        "",
        r#"
            "unknownField": "foo",
            "replicas": 2,
            "replicas": 3,"#,
    );
    let reply = post_deployment_strict(ctx, &body).await?;
    let want = r#"strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas""#;
    must!(
        !reply.ok() && reply.message().contains(want),
        "want an error containing {want:?}, got {} {}",
        reply.code,
        reply.message()
    );
    Ok(())
}

/// Typed object, metadata: a Deployment with an unknown metadata field MUST be refused with
/// `strict decoding error: unknown field "metadata.unknownMeta"`.
async fn typed_unknown_metadata(ctx: &Ctx) -> CaseResult {
    let body = deployment(
        r#"
            "unknownMeta": "foo","#,
        "",
    );
    let reply = post_deployment_strict(ctx, &body).await?;
    let want = r#"strict decoding error: unknown field "metadata.unknownMeta""#;
    must!(
        !reply.ok() && reply.message().contains(want),
        "want an error containing {want:?}, got {} {}",
        reply.code,
        reply.message()
    );
    Ok(())
}

/// The ports list of upstream's schemas (a map list keyed by containerPort and protocol).
fn ports_schema() -> Value {
    json!({
        "type": "array",
        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
        "x-kubernetes-list-type": "map",
        "items": {
            "properties": {
                "containerPort": {"format": "int32", "type": "integer"},
                "hostIP": {"type": "string"},
                "hostPort": {"format": "int32", "type": "integer"},
                "name": {"type": "string"},
                "protocol": {"type": "string"},
            },
            "required": ["containerPort", "protocol"],
            "type": "object",
        }
    })
}

/// Upstream's CR schema: spec with foo, cronSpec and ports; `preserve` keeps unknown spec fields;
/// `template` adds an embedded resource whose metadata knows only `name`.
fn cr_schema(preserve: bool, template: bool) -> Value {
    let mut spec = json!({
        "type": "object",
        "properties": {
            "foo": {"type": "string"},
            "cronSpec": {"type": "string", "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$"},
            "ports": ports_schema(),
        }
    });
    if preserve {
        spec["x-kubernetes-preserve-unknown-fields"] = json!(true);
    }
    if template {
        spec["properties"]["template"] = json!({
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "properties": {
                "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                "spec": {"type": "object"},
            }
        });
    }
    json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}})
}

/// The YAML body upstream applies: apiVersion, kind, then `rest` (which starts at metadata's
/// fields), with upstream's leading newline so line numbers match its errors.
fn cr_yaml(crd: &Crd, meta: &str, rest: &str) -> String {
    format!(
        "\napiVersion: {GROUP}/v1beta1\nkind: {}\nmetadata:\n  name: mytest\n{meta}  finalizers:\n  - test-finalizer\n{rest}",
        crd.kind
    )
}

const PORTS_YAML: &str =
    "  cronSpec: \"* * * * */5\"\n  ports:\n  - name: x\n    containerPort: 80\n    protocol: TCP";

/// Server-side apply of `yaml` to `mytest` of the CRD's first version, with Strict validation.
async fn apply_strict(ctx: &Ctx, crd: &Crd, yaml: &str) -> CaseResult<Reply> {
    let uri = format!(
        "{}/mytest?fieldManager={MANAGER}&fieldValidation=Strict",
        crd.path("v1beta1")
    );
    raw(
        ctx,
        "PATCH",
        &uri,
        "application/apply-patch+yaml",
        yaml.as_bytes(),
    )
    .await
}

/// Make the CRD (upstream's CreateNewV1CustomResourceDefinition), apply `yaml(crd)` with Strict
/// validation, then drop the finalizer upstream's CR carries (it would hold the CRD's deletion)
/// and delete the CRD. Returns the apply's reply.
async fn apply_with_crd(
    ctx: &Ctx,
    schema: Value,
    yaml: impl Fn(&Crd) -> String,
) -> CaseResult<Reply> {
    let crd = create_crd_watchable(ctx, random_multi_version_crd(schema)).await?;
    let reply = apply_strict(ctx, &crd, &yaml(&crd)).await;
    let unfinalize = raw(
        ctx,
        "PATCH",
        &format!("{}/mytest", crd.path("v1beta1")),
        "application/merge-patch+json",
        br#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    let cleanup = match unfinalize {
        Ok(r) if r.ok() || r.code == 404 => delete_crd(ctx, &crd).await,
        Ok(r) => Err(CaseError::Failed(format!(
            "removing mytest's finalizer: {} {}",
            r.code,
            r.message()
        ))),
        Err(e) => Err(e),
    };
    let reply = reply?;
    cleanup?;
    Ok(reply)
}

/// The apply MUST succeed.
fn must_succeed(reply: &Reply) -> CaseResult {
    must!(
        reply.ok(),
        "the apply failed: {} {}",
        reply.code,
        reply.message()
    );
    Ok(())
}

/// The apply MUST fail with one of `wants` in its answer (upstream searches the raw body).
fn must_fail_with(reply: &Reply, wants: &[&str]) -> CaseResult {
    let text = format!("{}\n{}", reply.message(), reply.body);
    must!(
        !reply.ok() && wants.iter().any(|w| text.contains(w)),
        "want an error containing one of {wants:?}, got {} {}",
        reply.code,
        reply.message()
    );
    Ok(())
}

/// Valid CR: applying a CR that fits the CRD's schema, with Strict validation, MUST succeed.
async fn valid_cr(ctx: &Ctx) -> CaseResult {
    let reply = apply_with_crd(ctx, cr_schema(false, false), |crd| {
        cr_yaml(crd, "", &format!("spec:\n  foo: foo1\n{PORTS_YAML}"))
    })
    .await?;
    must_succeed(&reply)
}

/// No validation schema (preserve unknown fields): applying a CR with unknown fields, with Strict
/// validation, MUST succeed.
async fn cr_without_schema(ctx: &Ctx) -> CaseResult {
    let reply = apply_with_crd(ctx, allow_all_schema(), |crd| {
        cr_yaml(crd, "", &format!("spec:\n  unknown: uk1\n{PORTS_YAML}"))
    })
    .await?;
    must_succeed(&reply)
}

/// Extra properties: applying a CR with a root field the schema does not declare MUST fail with
/// `.unknownField: field not declared in schema`.
async fn cr_extra_properties(ctx: &Ctx) -> CaseResult {
    let reply = apply_with_crd(ctx, cr_schema(false, false), |crd| {
        cr_yaml(
            crd,
            "",
            &format!("unknownField: unknown\nspec:\n  foo: foo1\n{PORTS_YAML}"),
        )
    })
    .await?;
    must_fail_with(&reply, &[".unknownField: field not declared in schema"])
}

/// Unknown metadata: a CR with an unknown field in its metadata and in its embedded resource's
/// metadata MUST be refused, naming one of them as not declared in the schema.
async fn cr_unknown_metadata(ctx: &Ctx) -> CaseResult {
    let ns = ctx.ns.clone();
    let reply = apply_with_crd(ctx, cr_schema(true, true), move |crd| {
        cr_yaml(
            crd,
            "  unknownMeta: unknown\n",
            &format!(
                "spec:\n  template:\n    apiversion: foo/v1\n    kind: Sub\n    metadata:\n        unknownSubMeta: unknown\n        name: subobject\n        namespace: {ns}\n  foo: foo1\n{PORTS_YAML}"
            ),
        )
    })
    .await?;
    must_fail_with(
        &reply,
        &[
            ".spec.template.metadata.unknownSubMeta: field not declared in schema",
            ".metadata.unknownMeta: field not declared in schema",
        ],
    )
}

/// Duplicates: even where unknown fields are preserved, a CR whose YAML sets spec.foo twice MUST
/// be refused with `line 11: key "foo" already set in map`.
async fn cr_duplicates(ctx: &Ctx) -> CaseResult {
    let reply = apply_with_crd(ctx, cr_schema(true, false), |crd| {
        cr_yaml(
            crd,
            "",
            &format!("spec:\n  unknown: uk1\n  foo: foo1\n  foo: foo2\n{PORTS_YAML}"),
        )
    })
    .await?;
    must_fail_with(
        &reply,
        &[
            r#"line 11: key "foo" already set in map"#,
            r#"line 11: key \"foo\" already set in map"#,
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Crd {
        Crd {
            name: "fooa.mygroup.example.com".into(),
            plural: "fooas".into(),
            kind: "fooa".into(),
            served: vec!["v1beta1".into(), "v1".into()],
            created: Value::Null,
        }
    }

    /// Upstream's duplicate error names line 11: the YAML must put the second foo there.
    #[test]
    fn duplicate_foo_is_on_line_11() {
        let y = cr_yaml(
            &crd(),
            "",
            &format!("spec:\n  unknown: uk1\n  foo: foo1\n  foo: foo2\n{PORTS_YAML}"),
        );
        assert_eq!(y.lines().nth(10), Some("  foo: foo2"));
    }

    #[test]
    fn deployment_keeps_both_replicas() {
        let d = deployment("", r#""replicas": 2, "replicas": 3,"#);
        assert_eq!(d.matches("\"replicas\"").count(), 2);
        // Still JSON (serde_json keeps the last of a duplicated key).
        let v: Value = serde_json::from_str(&d).unwrap();
        assert_eq!(v["spec"]["replicas"], 3);
    }
}
