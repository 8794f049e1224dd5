//! What admission reads from the server: the store and registry, which plugins run, PodSecurity's settings and
//! the webhook configurations. The HTTP layer builds one per request from its state
//! (`AppState::admission_context`), so admission takes only these and never imports the layer
//! above it.

use super::pod_security::PodSecurity;
use super::webhook::access::AccessChecker;
use super::webhook::Webhooks;
use super::Plugins;
use crate::registry::Registry;
use crate::storage::Store;

pub struct AdmissionContext<'a> {
    pub store: &'a Store,
    /// What is served (a policy's paramKind must be).
    pub registry: &'a Registry,
    pub plugins: Plugins,
    pub pod_security: &'a PodSecurity,
    pub webhooks: &'a Webhooks,
    /// The server's authorizer, for admission policies' `authorizer` checks.
    pub access: &'a dyn AccessChecker,
}
