//! etcd's Auth service. Served by hand rather than through etcd-client's generated trait:
//! that trait also requires AuthStatus, whose messages (and authpb.Permission) etcd-client does
//! not export, so those few messages are declared here with etcd's field numbers.
//!
//! Changes go through Raft like any write (`auth::command`); reads answer from the applied
//! state. Management calls need the root role once auth is enabled, except a user reading or
//! changing itself and reading a role it has (etcd's needAdminPermission).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use etcd_client::proto::{
    PbAuthDisableRequest, PbAuthDisableResponse, PbAuthEnableRequest, PbAuthEnableResponse,
    PbAuthRoleAddRequest, PbAuthRoleAddResponse, PbAuthRoleDeleteRequest, PbAuthRoleDeleteResponse,
    PbAuthRoleGetRequest, PbAuthRoleGrantPermissionRequest, PbAuthRoleGrantPermissionResponse,
    PbAuthRoleListRequest, PbAuthRoleListResponse, PbAuthRoleRevokePermissionRequest,
    PbAuthRoleRevokePermissionResponse, PbAuthUserAddRequest, PbAuthUserAddResponse,
    PbAuthUserChangePasswordRequest, PbAuthUserChangePasswordResponse, PbAuthUserDeleteRequest,
    PbAuthUserDeleteResponse, PbAuthUserGetRequest, PbAuthUserGetResponse,
    PbAuthUserGrantRoleRequest, PbAuthUserGrantRoleResponse, PbAuthUserListRequest,
    PbAuthUserListResponse, PbAuthUserRevokeRoleRequest, PbAuthUserRevokeRoleResponse,
    PbAuthenticateRequest, PbAuthenticateResponse, PbResponseHeader,
};
use tonic::codegen::{http, Body, BoxFuture, Service, StdError};
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};

use crate::auth::error::AuthError;
use crate::command::auth::{auth_command::Cmd, AuthApplied, AuthCommand, Authenticate};
use crate::command::{store_request::Op, store_response::Result as Res};
use crate::member::context::StoreContext;

#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthStatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<PbResponseHeader>,
    #[prost(bool, tag = "2")]
    pub enabled: bool,
    #[prost(uint64, tag = "3")]
    pub auth_revision: u64,
}

/// authpb.Permission.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Permission {
    #[prost(int32, tag = "1")]
    pub perm_type: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub range_end: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthRoleGetResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<PbResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub perm: Vec<Permission>,
}

#[derive(Clone)]
pub struct AuthService {
    ctx: Arc<StoreContext>,
}

impl AuthService {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }
}

impl NamedService for AuthService {
    const NAME: &'static str = "etcdserverpb.Auth";
}

/// One unary call's handler, run once.
struct Unary<F>(Option<F>);

impl<Req, Resp, F, Fut> UnaryService<Req> for Unary<F>
where
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Response<Resp>, Status>;

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        match self.0.take() {
            Some(f) => Box::pin(f(request)),
            None => Box::pin(async { Err(Status::internal("handler called twice")) }),
        }
    }
}

async fn unary<B, Req, Resp, F, Fut>(
    req: http::Request<B>,
    f: F,
) -> http::Response<tonic::body::Body>
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<Resp, Req>::default());
    grpc.unary(Unary(Some(f)), req).await
}

impl<B> Service<http::Request<B>> for AuthService
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let c = self.ctx.clone();
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        Box::pin(async move {
            Ok(match method.as_str() {
                "AuthEnable" => unary(req, |r| auth_enable(c, r)).await,
                "AuthDisable" => unary(req, |r| auth_disable(c, r)).await,
                "AuthStatus" => unary(req, |r| auth_status(c, r)).await,
                "Authenticate" => unary(req, |r| authenticate(c, r)).await,
                "UserAdd" => unary(req, |r| user_add(c, r)).await,
                "UserGet" => unary(req, |r| user_get(c, r)).await,
                "UserList" => unary(req, |r| user_list(c, r)).await,
                "UserDelete" => unary(req, |r| user_delete(c, r)).await,
                "UserChangePassword" => unary(req, |r| user_change_password(c, r)).await,
                "UserGrantRole" => unary(req, |r| user_grant_role(c, r)).await,
                "UserRevokeRole" => unary(req, |r| user_revoke_role(c, r)).await,
                "RoleAdd" => unary(req, |r| role_add(c, r)).await,
                "RoleGet" => unary(req, |r| role_get(c, r)).await,
                "RoleList" => unary(req, |r| role_list(c, r)).await,
                "RoleDelete" => unary(req, |r| role_delete(c, r)).await,
                "RoleGrantPermission" => unary(req, |r| role_grant_permission(c, r)).await,
                "RoleRevokePermission" => unary(req, |r| role_revoke_permission(c, r)).await,
                other => Status::unimplemented(format!(
                    "unknown method {other} for service etcdserverpb.Auth"
                ))
                .into_http(),
            })
        })
    }
}

type Answer<T> = Result<Response<T>, Status>;

fn header(c: &StoreContext) -> Option<PbResponseHeader> {
    Some(c.header(c.mvcc.revision()))
}

/// The caller, who must hold the root role while auth is enabled (unless `allowed` says the
/// call is about the caller itself).
fn admin<T>(
    c: &StoreContext,
    r: &Request<T>,
    allowed: impl FnOnce(&str) -> bool,
) -> Result<(), Status> {
    let user = c.auth.caller(r)?;
    if c.auth.state().enabled && !allowed(&user) {
        c.auth.check_admin(&user)?;
    }
    Ok(())
}

fn root<T>(c: &StoreContext, r: &Request<T>) -> Result<(), Status> {
    admin(c, r, |_| false)
}

async fn propose(c: &StoreContext, cmd: Cmd) -> Result<AuthApplied, Status> {
    match c.write(Op::Auth(AuthCommand { cmd: Some(cmd) })).await? {
        Res::Auth(applied) => Ok(applied),
        _ => Err(Status::internal(
            "auth command answered with something else",
        )),
    }
}

/// bcrypt is deliberately slow (tens of ms at cost 10): off the async workers.
async fn hash(c: &StoreContext, password: String) -> Result<String, Status> {
    let cost = c.auth.bcrypt_cost();
    tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(format!("hashing password: {e}")))
}

async fn auth_enable(
    c: Arc<StoreContext>,
    r: Request<PbAuthEnableRequest>,
) -> Answer<PbAuthEnableResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::Enable(r.into_inner())).await?;
    Ok(Response::new(PbAuthEnableResponse { header: header(&c) }))
}

async fn auth_disable(
    c: Arc<StoreContext>,
    r: Request<PbAuthDisableRequest>,
) -> Answer<PbAuthDisableResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::Disable(r.into_inner())).await?;
    Ok(Response::new(PbAuthDisableResponse { header: header(&c) }))
}

async fn auth_status(
    c: Arc<StoreContext>,
    r: Request<AuthStatusRequest>,
) -> Answer<AuthStatusResponse> {
    root(&c, &r)?;
    c.linearizable().await?;
    let state = c.auth.state();
    Ok(Response::new(AuthStatusResponse {
        header: header(&c),
        enabled: state.enabled,
        auth_revision: state.revision,
    }))
}

async fn authenticate(
    c: Arc<StoreContext>,
    r: Request<PbAuthenticateRequest>,
) -> Answer<PbAuthenticateResponse> {
    let r = r.into_inner();
    let state = c.auth.state();
    if !state.enabled {
        return Err(AuthError::AuthNotEnabled.into());
    }
    // An unknown user and a wrong password answer alike; a no-password user has its own
    // error (etcd's CheckPassword order).
    let hashed = match state.users.get(&r.name) {
        None => return Err(AuthError::AuthFailed.into()),
        Some(u) if u.no_password => return Err(AuthError::NoPasswordUser.into()),
        Some(u) => u.password.clone(),
    };
    let password = r.password;
    let matches = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hashed))
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .unwrap_or(false);
    if !matches {
        return Err(AuthError::AuthFailed.into());
    }
    let applied = propose(
        &c,
        Cmd::Authenticate(Authenticate {
            name: r.name.clone(),
            token: c.auth.tokens().command_token(),
            checked_revision: state.revision,
        }),
    )
    .await?;
    // Signed (JWT) at the auth revision the command applied at, as etcd's apply does.
    let token = c
        .auth
        .tokens()
        .issue(applied.token, &r.name, applied.auth_revision)?;
    Ok(Response::new(PbAuthenticateResponse {
        header: header(&c),
        token,
    }))
}

async fn user_add(
    c: Arc<StoreContext>,
    r: Request<PbAuthUserAddRequest>,
) -> Answer<PbAuthUserAddResponse> {
    root(&c, &r)?;
    let mut r = r.into_inner();
    if r.name.is_empty() {
        return Err(AuthError::UserEmpty.into());
    }
    let no_password = r.options.as_ref().is_some_and(|o| o.no_password);
    if !no_password {
        r.hashed_password = hash(&c, std::mem::take(&mut r.password)).await?;
    }
    r.password.clear();
    propose(&c, Cmd::UserAdd(r)).await?;
    Ok(Response::new(PbAuthUserAddResponse { header: header(&c) }))
}

async fn user_get(
    c: Arc<StoreContext>,
    r: Request<PbAuthUserGetRequest>,
) -> Answer<PbAuthUserGetResponse> {
    let name = r.get_ref().name.clone();
    admin(&c, &r, |me| me == name)?;
    let state = c.auth.state();
    let user = state.users.get(&name).ok_or(AuthError::UserNotFound)?;
    Ok(Response::new(PbAuthUserGetResponse {
        header: header(&c),
        roles: user.roles.clone(),
    }))
}

async fn user_list(
    c: Arc<StoreContext>,
    r: Request<PbAuthUserListRequest>,
) -> Answer<PbAuthUserListResponse> {
    root(&c, &r)?;
    Ok(Response::new(PbAuthUserListResponse {
        header: header(&c),
        users: c.auth.state().users.keys().cloned().collect(),
    }))
}

async fn user_delete(
    c: Arc<StoreContext>,
    r: Request<PbAuthUserDeleteRequest>,
) -> Answer<PbAuthUserDeleteResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::UserDelete(r.into_inner())).await?;
    Ok(Response::new(PbAuthUserDeleteResponse {
        header: header(&c),
    }))
}

async fn user_change_password(
    c: Arc<StoreContext>,
    r: Request<PbAuthUserChangePasswordRequest>,
) -> Answer<PbAuthUserChangePasswordResponse> {
    let name = r.get_ref().name.clone();
    admin(&c, &r, |me| me == name)?;
    let mut r = r.into_inner();
    if !c.auth.state().users.contains_key(&r.name) {
        return Err(AuthError::UserNotFound.into());
    }
    r.hashed_password = hash(&c, std::mem::take(&mut r.password)).await?;
    propose(&c, Cmd::UserChangePassword(r)).await?;
    Ok(Response::new(PbAuthUserChangePasswordResponse {
        header: header(&c),
    }))
}

async fn user_grant_role(
    c: Arc<StoreContext>,
    r: Request<PbAuthUserGrantRoleRequest>,
) -> Answer<PbAuthUserGrantRoleResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::UserGrantRole(r.into_inner())).await?;
    Ok(Response::new(PbAuthUserGrantRoleResponse {
        header: header(&c),
    }))
}

async fn user_revoke_role(
    c: Arc<StoreContext>,
    r: Request<PbAuthUserRevokeRoleRequest>,
) -> Answer<PbAuthUserRevokeRoleResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::UserRevokeRole(r.into_inner())).await?;
    Ok(Response::new(PbAuthUserRevokeRoleResponse {
        header: header(&c),
    }))
}

async fn role_add(
    c: Arc<StoreContext>,
    r: Request<PbAuthRoleAddRequest>,
) -> Answer<PbAuthRoleAddResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::RoleAdd(r.into_inner())).await?;
    Ok(Response::new(PbAuthRoleAddResponse { header: header(&c) }))
}

async fn role_get(
    c: Arc<StoreContext>,
    r: Request<PbAuthRoleGetRequest>,
) -> Answer<AuthRoleGetResponse> {
    let role = r.get_ref().role.clone();
    let state = c.auth.state();
    admin(&c, &r, |me| {
        state.users.get(me).is_some_and(|u| u.roles.contains(&role))
    })?;
    let found = state.roles.get(&role).ok_or(AuthError::RoleNotFound)?;
    Ok(Response::new(AuthRoleGetResponse {
        header: header(&c),
        perm: found
            .perms
            .iter()
            .map(|p| Permission {
                perm_type: p.perm_type,
                key: p.key.clone(),
                range_end: p.range_end.clone(),
            })
            .collect(),
    }))
}

async fn role_list(
    c: Arc<StoreContext>,
    r: Request<PbAuthRoleListRequest>,
) -> Answer<PbAuthRoleListResponse> {
    root(&c, &r)?;
    Ok(Response::new(PbAuthRoleListResponse {
        header: header(&c),
        roles: c.auth.state().roles.keys().cloned().collect(),
    }))
}

async fn role_delete(
    c: Arc<StoreContext>,
    r: Request<PbAuthRoleDeleteRequest>,
) -> Answer<PbAuthRoleDeleteResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::RoleDelete(r.into_inner())).await?;
    Ok(Response::new(PbAuthRoleDeleteResponse {
        header: header(&c),
    }))
}

async fn role_grant_permission(
    c: Arc<StoreContext>,
    r: Request<PbAuthRoleGrantPermissionRequest>,
) -> Answer<PbAuthRoleGrantPermissionResponse> {
    root(&c, &r)?;
    let r = r.into_inner();
    if r.perm.is_none() {
        return Err(AuthError::PermissionNotGiven.into());
    }
    propose(&c, Cmd::RoleGrantPermission(r)).await?;
    Ok(Response::new(PbAuthRoleGrantPermissionResponse {
        header: header(&c),
    }))
}

async fn role_revoke_permission(
    c: Arc<StoreContext>,
    r: Request<PbAuthRoleRevokePermissionRequest>,
) -> Answer<PbAuthRoleRevokePermissionResponse> {
    root(&c, &r)?;
    propose(&c, Cmd::RoleRevokePermission(r.into_inner())).await?;
    Ok(Response::new(PbAuthRoleRevokePermissionResponse {
        header: header(&c),
    }))
}
