//! kiln-apiserver: the Kubernetes API over the etcd v3 API, so real kubectl and kube-rs just work.
//!
//! Layout: `storage` (etcd), `registry` (one generic registry; per-kind strategy as data),
//! `handlers` (HTTP: CRUD, watch, discovery, Table), `auth` + `tls` (client certs, authorizer),
//! `status` (metav1.Status errors), `server` (start/stop, in-process for tests).

pub mod admission;
pub mod aggregator;
pub mod allocator;
pub mod audit;
pub mod auth;
pub mod bootstrap;
pub mod cel;
pub mod compaction;
pub mod config;
pub mod crd;
pub mod custom_resource;
pub mod encryption;
pub mod fieldmanager;
pub mod flowcontrol;
pub mod handlers;
pub mod impersonation;
pub mod kubelet_client;
pub mod list_keys;
pub mod metrics;
pub mod openapi_schemas;
pub mod patch;
pub mod policy_status;
pub mod protobuf;
pub mod rbac;
pub mod registry;
pub mod request;
pub mod request_body;
pub mod request_path;
pub mod resource_metrics;
pub mod selectors;
pub mod server;
pub mod state;
pub mod status;
pub mod storage;
pub mod storage_status;
pub mod stream_translator;
#[cfg(test)]
mod test_support;
pub mod tls;
pub mod tokens;
pub mod warnings;
pub mod websocket_accept;

pub use config::Options;
pub use server::{start, RunningServer, ServerError};
