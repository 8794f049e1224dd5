//! kiln-bench: load generators the benchmark scripts run against kiln and against its anchor alike, so
//! both sides see the same client, connections and workload. Each run prints one JSON line.

pub mod control_plane;
pub mod etcd_load;
pub mod pod_start;
pub mod stats;
