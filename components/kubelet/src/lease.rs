//! The node's heartbeat: a coordination.k8s.io/v1 Lease in kube-node-lease, renewed every 10 s.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;

pub const LEASE_NAMESPACE: &str = "kube-node-lease";

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("renewing lease {namespace}/{name}: {source}")]
    Renew {
        namespace: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub fn node_owner(node_name: &str, node_uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.into(),
        uid: node_uid.into(),
        controller: None,
        block_owner_deletion: None,
    }
}

/// Creates the lease or renews it (GET + PUT, so the server's resourceVersion guards a concurrent writer).
pub async fn renew(
    client: &Client,
    node_name: &str,
    node_uid: &str,
    duration_seconds: i32,
) -> Result<Lease, LeaseError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let err = |source| LeaseError::Renew {
        namespace: LEASE_NAMESPACE,
        name: node_name.to_string(),
        source,
    };
    let now = MicroTime(Timestamp::now());
    match api.get_opt(node_name).await.map_err(err)? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(node_name.into());
            spec.lease_duration_seconds = Some(duration_seconds);
            spec.renew_time = Some(now);
            api.replace(node_name, &PostParams::default(), &lease)
                .await
                .map_err(err)
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(node_name.into()),
                    namespace: Some(LEASE_NAMESPACE.into()),
                    owner_references: Some(vec![node_owner(node_name, node_uid)]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(node_name.into()),
                    lease_duration_seconds: Some(duration_seconds),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &lease)
                .await
                .map_err(err)
        }
    }
}
