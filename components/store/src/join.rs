//! Joining a running cluster (`--initial-cluster-state existing`): ask the members named in
//! --initial-cluster for the cluster ID and find ourselves, by peer URLs, among the members
//! that `etcdctl member add` registered, as etcd does.

use std::time::Duration;

use crate::config::Config;
use crate::identity::Identity;
use crate::peer::client::PeerClients;
use crate::peer::{ClusterInfo, PeerRequest};

const ASK_TIMEOUT: Duration = Duration::from_secs(3);
const ROUNDS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("--initial-cluster-state=existing but --initial-cluster names no other member to ask")]
    NoPeers,
    #[error("no member of the existing cluster answered: {0}")]
    Unreachable(String),
    #[error("the cluster has no member with peer URLs {0}; add it first (etcdctl member add)")]
    NotAdded(String),
}

fn same_urls(a: &[String], b: &[String]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}

pub async fn discover(config: &Config, peers: &PeerClients) -> Result<Identity, JoinError> {
    let others: Vec<(String, Vec<String>)> = config
        .initial_members()?
        .into_iter()
        .filter(|(name, urls)| {
            *name != config.name && !same_urls(urls, &config.initial_advertise_peer_urls)
        })
        .collect();
    if others.is_empty() {
        return Err(JoinError::NoPeers);
    }
    let mut last = String::new();
    for round in 0..ROUNDS {
        for (name, urls) in &others {
            match peers
                .call::<ClusterInfo>(urls, PeerRequest::ClusterInfo, ASK_TIMEOUT)
                .await
            {
                Ok(info) => {
                    let me = info.members.iter().find(|(_, n)| {
                        same_urls(&n.peer_urls, &config.initial_advertise_peer_urls)
                    });
                    return match me {
                        Some((id, _)) => Ok(Identity {
                            name: config.name.clone(),
                            member_id: *id,
                            cluster_id: info.cluster_id,
                        }),
                        None => Err(JoinError::NotAdded(
                            config.initial_advertise_peer_urls.join(","),
                        )),
                    };
                }
                Err(e) => {
                    tracing::warn!(member = %name, error = %e, round, "asking for cluster info");
                    last = e.to_string();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(JoinError::Unreachable(last))
}
