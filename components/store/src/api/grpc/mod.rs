//! The etcd v3 gRPC API, implemented on the server traits etcd-client generates
//! (`etcd_client::proto::Pb*Service`), and the server side of the peer transport (`peer`).
//! Thin adapters over `member::context::StoreContext`: its `ForwardError`s, and etcd's and its auth's
//! errors, become `tonic::Status` in one place (`status`).

pub mod auth;
pub mod cluster;
pub mod kv;
pub mod lease;
pub mod maintenance;
pub mod peer;
pub mod status;
pub mod watch;

use std::sync::Arc;

use etcd_client::proto::{
    PbClusterServer, PbKvServer, PbLeaseServer, PbMaintenanceServer, PbWatchServer,
};

use crate::member::context::StoreContext;

/// All etcd services on one context, ready to mount on a tonic server.
pub fn routes(ctx: Arc<StoreContext>) -> tonic::service::Routes {
    let mut builder = tonic::service::Routes::builder();
    builder
        .add_service(PbKvServer::new(kv::KvService::new(ctx.clone())))
        .add_service(PbWatchServer::new(watch::WatchService::new(ctx.clone())))
        .add_service(PbLeaseServer::new(lease::LeaseService::new(ctx.clone())))
        .add_service(PbClusterServer::new(cluster::ClusterService::new(
            ctx.clone(),
        )))
        .add_service(PbMaintenanceServer::new(
            maintenance::MaintenanceService::new(ctx.clone()),
        ))
        .add_service(auth::AuthService::new(ctx));
    builder.routes()
}
