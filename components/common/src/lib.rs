//! Code kiln's components share, so that no component imports another, and the part of it the CLI needs.
//!
//! Always built (light: no kube, no axum): `store_snapshot` (kiln-store snapshots without rocksdb) and
//! `duration` (Go-style duration flags). The component kit, behind the `kit` feature (see Cargo.toml):
//! `client` (a kube-rs client from `--kubeconfig`), `leader_election` (a coordination.k8s.io Lease),
//! `events` (core/v1 Events like client-go's recorder), `serving` (health and metrics endpoints) and
//! `node_matching` (node selectors and taint tolerations, as the scheduler and the daemonset and
//! node lifecycle controllers need them). Behind the `cron` feature: `cron` (CronJob schedules and
//! time zones as upstream reads them), shared by the API server's validation and the cronjob
//! controller. Behind `quota`: `quantity` (resource.Quantity parsed exactly and printed canonically)
//! and `quota` (what an object counts against a ResourceQuota), shared by the API server's
//! ResourceQuota admission and the controller-manager's resourcequota controller, so both count
//! alike. Behind `tls`: `any_server_cert` (a rustls verifier that accepts any server certificate,
//! where upstream skips verification on purpose).

#[cfg(feature = "tls")]
pub mod any_server_cert;
pub mod bbolt;
pub mod duration;
pub mod etcd_db;
pub mod store_snapshot;
pub mod version;

#[cfg(feature = "kit")]
pub mod client;
#[cfg(feature = "cron")]
pub mod cron;
#[cfg(feature = "kit")]
pub mod events;
#[cfg(feature = "kit")]
pub mod leader_election;
#[cfg(feature = "kit")]
pub mod node_matching;
#[cfg(feature = "quota")]
pub mod quantity;
#[cfg(feature = "quota")]
pub mod quota;
#[cfg(feature = "kit")]
pub mod serving;
