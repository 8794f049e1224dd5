//! The server's shared state: the store, the registry and every component a request may need. It
//! sits just below `handlers` (HTTP) and above the components it bundles, which take only the parts
//! they use, never the whole state.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::context::AdmissionContext;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::storage::Store;

pub struct AppState {
    pub store: Store,
    pub registry: Registry,
    pub metrics: Metrics,
    /// `host:port` clients should use, for /api's serverAddressByClientCIDRs.
    pub advertise: String,
    pub bookmark_interval: Duration,
    pub allocator: crate::allocator::ServiceAllocator,
    pub authorizer: crate::rbac::Authorizer,
    pub tokens: crate::tokens::TokenAuthenticator,
    pub kubelet: crate::kubelet_client::KubeletClient,
    /// Namespaces that just became Terminating, for the cleanup worker (`handlers/namespaces.rs`).
    pub terminating: tokio::sync::mpsc::UnboundedSender<String>,
    pub admission: crate::admission::Plugins,
    /// PodSecurity's switch, defaults and exemptions (`--admission-control-config-file`).
    pub pod_security: crate::admission::pod_security::PodSecurity,
    /// Seats for requests in flight (429 beyond them).
    pub limits: crate::flowcontrol::limiter::Limits,
    /// Admission webhook configurations, kept current by a store watch.
    pub webhooks: crate::admission::webhook::Webhooks,
    /// Service-backed APIServices (the aggregation layer), kept current by its controller.
    pub aggregator: crate::aggregator::Aggregator,
    /// The kubelets' summaries behind metrics.k8s.io (`resource_metrics`).
    pub resource_metrics: crate::resource_metrics::Cache,
}

pub type Shared = Arc<AppState>;

impl AppState {
    /// The parts admission reads, for one request.
    pub fn admission_context(&self) -> AdmissionContext<'_> {
        AdmissionContext {
            store: &self.store,
            registry: &self.registry,
            plugins: self.admission,
            pod_security: &self.pod_security,
            webhooks: &self.webhooks,
            access: &self.authorizer,
        }
    }
}
