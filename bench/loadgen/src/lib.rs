//! kiln-bench: load generators the benchmark scripts run against kiln and against its anchor alike, so
//! both sides see the same client, connections and workload. Each run prints one JSON line.

pub mod apiserver_load;
pub mod control_plane;
pub mod crd_load;
pub mod cri_floor;
pub mod dns_load;
pub mod dns_wire;
pub mod dns_zone;
pub mod etcd_load;
pub mod harness;
pub mod pod_start;
pub mod proxy_sync;
pub mod stats;
pub mod store_floor;
pub mod workloads;
