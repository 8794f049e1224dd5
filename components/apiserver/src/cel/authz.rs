//! Kubernetes' CEL authz library (k8s.io/apiserver/pkg/cel/library/authz.go) for admission
//! policies: `authorizer.group(g).resource(r).subresource(s).namespace(n).name(x).check(verb)`,
//! `authorizer.path(p).check(verb)`, `authorizer.serviceAccount(ns, name)` (the same checks as
//! that service account) and `authorizer.requestResource` (the request's own resource), each
//! check a Decision with `allowed()`, `reason()`, `errored()` and `error()`.
//!
//! Evaluation is synchronous and authorization is not: a check asks an `AccessDecisions` for an
//! answer it already has; when it has none, the query is recorded there and the expression fails
//! with `PENDING`, so the caller resolves the recorded queries and evaluates again.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use ::cel::common::traits::Indexer;
use ::cel::common::types::{CelBool, CelString, Type, STRING_TYPE};
use ::cel::common::value::{CowVal, StaticVal, Val};
use ::cel::{DeclarationError, Env, ExecutionError};

/// The marker of a check whose decision is not known yet.
pub const PENDING: &str = "authorization decision pending";

static AUTHORIZER: Type = Type::new_unspecified_type("kubernetes.authorization.Authorizer");
static GROUP_CHECK: Type = Type::new_unspecified_type("kubernetes.authorization.GroupCheck");
static RESOURCE_CHECK: Type = Type::new_unspecified_type("kubernetes.authorization.ResourceCheck");
static PATH_CHECK: Type = Type::new_unspecified_type("kubernetes.authorization.PathCheck");
static DECISION: Type = Type::new_unspecified_type("kubernetes.authorization.Decision");

/// What a check asks: may `user` (in `groups`) do `verb` on the target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessQuery {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    pub target: AccessTarget,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum AccessTarget {
    Resource {
        group: String,
        resource: String,
        subresource: String,
        namespace: String,
        name: String,
    },
    Path(String),
    #[default]
    None,
}

/// Decisions known so far (an error is an authorizer failure, `errored()`); `None` records the
/// query as wanted.
pub trait AccessDecisions: Send + Sync + Debug {
    fn decision(&self, query: &AccessQuery) -> Option<Result<bool, String>>;
}

/// The `authorizer` variable: whose checks, and the request's resource.
#[derive(Debug, Clone)]
pub struct AuthorizerVal {
    decisions: Arc<dyn AccessDecisions>,
    user: String,
    groups: Vec<String>,
    request: AccessTarget,
}

impl AuthorizerVal {
    pub fn new(
        decisions: Arc<dyn AccessDecisions>,
        user: &str,
        groups: &[String],
        request: AccessTarget,
    ) -> Self {
        AuthorizerVal {
            decisions,
            user: user.to_string(),
            groups: groups.to_vec(),
            request,
        }
    }
}

#[derive(Debug, Clone)]
struct GroupCheck {
    authz: AuthorizerVal,
    group: String,
}

#[derive(Debug, Clone)]
struct ResourceCheck {
    authz: AuthorizerVal,
    target: AccessTarget,
}

#[derive(Debug, Clone)]
struct PathCheck {
    authz: AuthorizerVal,
    path: String,
}

#[derive(Debug, Clone)]
struct Decision {
    allowed: bool,
    error: Option<String>,
}

macro_rules! opaque_val {
    ($t:ty, $ty:expr) => {
        impl Val for $t {
            fn get_type(&self) -> &Type {
                &$ty
            }
            fn cel_type() -> &'static Type {
                &$ty
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
        }
        impl StaticVal for $t {}
    };
}

opaque_val!(GroupCheck, GROUP_CHECK);
opaque_val!(PathCheck, PATH_CHECK);
opaque_val!(ResourceCheck, RESOURCE_CHECK);
opaque_val!(Decision, DECISION);

impl Val for AuthorizerVal {
    fn get_type(&self) -> &Type {
        &AUTHORIZER
    }
    fn cel_type() -> &'static Type {
        &AUTHORIZER
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
    /// `authorizer.requestResource`.
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}
impl StaticVal for AuthorizerVal {}

impl Indexer for AuthorizerVal {
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match field.downcast_ref::<CelString>().map(CelString::inner) {
            Some("requestResource") => Ok(CowVal::owned(ResourceCheck {
                authz: self.clone(),
                target: self.request.clone(),
            })),
            _ => Err(ExecutionError::no_such_key("requestResource")),
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let s = || STRING_TYPE;
    env.add_member_overload(
        "group",
        "authorizer_group",
        AUTHORIZER.to_owned(),
        vec![s()],
        group,
    )?;
    env.add_member_overload(
        "serviceAccount",
        "authorizer_serviceaccount",
        AUTHORIZER.to_owned(),
        vec![s(), s()],
        service_account,
    )?;
    env.add_member_overload(
        "path",
        "authorizer_path",
        AUTHORIZER.to_owned(),
        vec![s()],
        path,
    )?;
    env.add_member_overload(
        "resource",
        "groupcheck_resource",
        GROUP_CHECK.to_owned(),
        vec![s()],
        resource,
    )?;
    env.add_member_overload(
        "subresource",
        "resourcecheck_subresource",
        RESOURCE_CHECK.to_owned(),
        vec![s()],
        subresource,
    )?;
    env.add_member_overload(
        "namespace",
        "resourcecheck_namespace",
        RESOURCE_CHECK.to_owned(),
        vec![s()],
        namespace,
    )?;
    env.add_member_overload(
        "name",
        "resourcecheck_name",
        RESOURCE_CHECK.to_owned(),
        vec![s()],
        name,
    )?;
    env.add_member_overload(
        "check",
        "resourcecheck_check",
        RESOURCE_CHECK.to_owned(),
        vec![s()],
        resource_check,
    )?;
    env.add_member_overload(
        "check",
        "pathcheck_check",
        PATH_CHECK.to_owned(),
        vec![s()],
        path_check,
    )?;
    env.add_member_overload(
        "allowed",
        "decision_allowed",
        DECISION.to_owned(),
        vec![],
        allowed,
    )?;
    env.add_member_overload(
        "errored",
        "decision_errored",
        DECISION.to_owned(),
        vec![],
        errored,
    )?;
    env.add_member_overload(
        "reason",
        "decision_reason",
        DECISION.to_owned(),
        vec![],
        reason,
    )?;
    env.add_member_overload(
        "error",
        "decision_error",
        DECISION.to_owned(),
        vec![],
        error,
    )?;
    Ok(())
}

fn target<'a, T: StaticVal>(
    args: &'a [CowVal<'_, '_>],
    function: &str,
) -> Result<&'a T, ExecutionError> {
    args.first()
        .and_then(|a| a.as_any())
        .and_then(|a| a.downcast_ref::<T>())
        .ok_or_else(|| ExecutionError::function_error(function, "unexpected receiver"))
}

fn string_arg(args: &[CowVal<'_, '_>], i: usize, function: &str) -> Result<String, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelString>())
        .map(|s| s.inner().to_string())
        .ok_or_else(|| ExecutionError::function_error(function, "expected a string argument"))
}

fn group<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let authz = target::<AuthorizerVal>(&args, "group")?.clone();
    let group = string_arg(&args, 1, "group")?;
    Ok(CowVal::owned(GroupCheck { authz, group }))
}

/// Checks as the service account: upstream's serviceaccount.UserInfo (its two groups).
fn service_account<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let authz = target::<AuthorizerVal>(&args, "serviceAccount")?;
    let namespace = string_arg(&args, 1, "serviceAccount")?;
    let name = string_arg(&args, 2, "serviceAccount")?;
    Ok(CowVal::owned(AuthorizerVal {
        decisions: Arc::clone(&authz.decisions),
        user: format!("system:serviceaccount:{namespace}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
        ],
        request: authz.request.clone(),
    }))
}

fn path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let authz = target::<AuthorizerVal>(&args, "path")?.clone();
    let path = string_arg(&args, 1, "path")?;
    Ok(CowVal::owned(PathCheck { authz, path }))
}

fn resource<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let g = target::<GroupCheck>(&args, "resource")?;
    let resource = string_arg(&args, 1, "resource")?;
    Ok(CowVal::owned(ResourceCheck {
        authz: g.authz.clone(),
        target: AccessTarget::Resource {
            group: g.group.clone(),
            resource,
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
        },
    }))
}

/// A copy of the receiving ResourceCheck with one attribute set.
fn with_attribute<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut check = target::<ResourceCheck>(&args, function)?.clone();
    let value = string_arg(&args, 1, function)?;
    if let AccessTarget::Resource {
        subresource,
        namespace,
        name,
        ..
    } = &mut check.target
    {
        match function {
            "subresource" => *subresource = value,
            "namespace" => *namespace = value,
            _ => *name = value,
        }
    }
    Ok(CowVal::owned(check))
}

fn subresource<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    with_attribute(args, "subresource")
}

fn namespace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    with_attribute(args, "namespace")
}

fn name<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    with_attribute(args, "name")
}

fn decide<'b, 'v>(
    authz: &AuthorizerVal,
    verb: String,
    target: AccessTarget,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let query = AccessQuery {
        user: authz.user.clone(),
        groups: authz.groups.clone(),
        verb,
        target,
    };
    match authz.decisions.decision(&query) {
        None => Err(ExecutionError::function_error("check", PENDING)),
        Some(Ok(allowed)) => Ok(CowVal::owned(Decision {
            allowed,
            error: None,
        })),
        Some(Err(e)) => Ok(CowVal::owned(Decision {
            allowed: false,
            error: Some(e),
        })),
    }
}

fn resource_check<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let check = target::<ResourceCheck>(&args, "check")?;
    let verb = string_arg(&args, 1, "check")?;
    decide(&check.authz, verb, check.target.clone())
}

fn path_check<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let check = target::<PathCheck>(&args, "check")?;
    let verb = string_arg(&args, 1, "check")?;
    decide(&check.authz, verb, AccessTarget::Path(check.path.clone()))
}

fn allowed<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let d = target::<Decision>(&args, "allowed")?;
    Ok(CowVal::owned(CelBool::from(d.allowed)))
}

fn errored<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let d = target::<Decision>(&args, "errored")?;
    Ok(CowVal::owned(CelBool::from(d.error.is_some())))
}

/// kiln's RBAC gives no reason text (upstream's names the granting binding when allowed).
fn reason<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    target::<Decision>(&args, "reason")?;
    Ok(CowVal::owned(CelString::from(String::new())))
}

fn error<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let d = target::<Decision>(&args, "error")?;
    Ok(CowVal::owned(CelString::from(
        d.error.clone().unwrap_or_default(),
    )))
}
