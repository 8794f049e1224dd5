//! Member and cluster IDs, derived like etcd's (hash of peer URLs and the cluster token) and
//! pinned in the data dir at first start, so a data dir always belongs to one member of one
//! cluster.

use std::collections::BTreeMap;

use rocksdb::{WriteBatch, DB};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::command::MemberNode;
use crate::config::{Config, ConfigError};
use crate::storage::db::{self, CF_RAFT_META};

const KEY_IDENTITY: &[u8] = b"identity";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub name: String,
    pub member_id: u64,
    pub cluster_id: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("rocksdb: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("stored identity is unreadable: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error("data dir belongs to member {stored:?}, not --name {flag:?}")]
    OtherMember { stored: String, flag: String },
}

fn hash_u64(parts: &[&[u8]]) -> u64 {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
        h.update([0]);
    }
    let digest = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    // Never 0: etcd treats 0 as "no member".
    u64::from_be_bytes(b).max(1)
}

pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let joined = urls.join("");
    hash_u64(&[joined.as_bytes(), token.as_bytes()])
}

pub fn cluster_id(member_ids: &[u64], token: &str) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_be_bytes()).collect();
    hash_u64(&[&bytes, token.as_bytes()])
}

/// The initial members from the flags, keyed by member ID.
pub fn initial_members(config: &Config) -> Result<BTreeMap<u64, MemberNode>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, peer_urls) in config.initial_members()? {
        let id = member_id(&peer_urls, &config.initial_cluster_token);
        // Every founding member must initialize Raft with the very same membership, so no
        // member-specific detail goes in here: client URLs are published after start.
        out.insert(
            id,
            MemberNode {
                name,
                peer_urls,
                client_urls: Vec::new(),
            },
        );
    }
    Ok(out)
}

/// Reads this member's identity from the data dir, if it has one.
pub fn load(db: &DB, config: &Config) -> Result<Option<Identity>, IdentityError> {
    let cf = db::cf(db, CF_RAFT_META);
    let Some(bytes) = db.get_cf(cf, KEY_IDENTITY)? else {
        return Ok(None);
    };
    let stored: Identity = serde_json::from_slice(&bytes)?;
    if stored.name != config.name {
        return Err(IdentityError::OtherMember {
            stored: stored.name,
            flag: config.name.clone(),
        });
    }
    Ok(Some(stored))
}

/// The identity of a founding member of a new cluster, from the flags alone (every founding
/// member computes the same cluster ID).
pub fn for_new_cluster(config: &Config) -> Result<Identity, IdentityError> {
    let members = initial_members(config)?;
    let ids: Vec<u64> = members.keys().copied().collect();
    Ok(Identity {
        name: config.name.clone(),
        member_id: member_id(
            &config.initial_advertise_peer_urls,
            &config.initial_cluster_token,
        ),
        cluster_id: cluster_id(&ids, &config.initial_cluster_token),
    })
}

/// Pins `identity` in the data dir (synced).
pub fn save(db: &DB, identity: &Identity) -> Result<(), IdentityError> {
    let cf = db::cf(db, CF_RAFT_META);
    let mut batch = WriteBatch::default();
    batch.put_cf(cf, KEY_IDENTITY, serde_json::to_vec(identity)?);
    db.write_opt(batch, &db::sync_write())?;
    Ok(())
}
