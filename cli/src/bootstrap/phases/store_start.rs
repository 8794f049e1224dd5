//! How each controller's store member first started: `--initial-cluster` and `--initial-cluster-state`,
//! recorded in `<stateDir>/store-members/<host>.json`. The store reads both flags only at its first
//! start (later starts load the identity pinned in its data dir), so a member's manifest keeps the
//! values it started with: growing cluster.yaml must not rewrite (and so restart) the running members,
//! and a member that joined a running cluster must never be rendered as a founder of a new one.
//!
//! Founders (the controllers `init` starts together) are recorded on init's first render; a member
//! added by `kiln join --control-plane` is recorded with state `existing` and the member list it
//! joined. A restore (new cluster token, every member a founder again) and a full reset clear the
//! records.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::pki::pki_err;
use crate::bootstrap::{BootstrapError, Context};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreStart {
    pub initial_cluster: String,
    /// `new` (a founder) or `existing` (joined a running cluster).
    pub state: String,
}

pub const NEW: &str = "new";
pub const EXISTING: &str = "existing";

fn dir(ctx: &Context) -> PathBuf {
    ctx.state_dir.join("store-members")
}

fn path(ctx: &Context, host: &str) -> PathBuf {
    dir(ctx).join(format!("{host}.json"))
}

/// The store's peer URL of a controller.
pub fn peer_url(h: &crate::config::Host) -> String {
    let ip = h.node_address();
    if ip.contains(':') {
        format!("https://[{ip}]:2380")
    } else {
        format!("https://{ip}:2380")
    }
}

/// What `init` renders for a cluster started from scratch: every controller of cluster.yaml, `new`.
pub fn founders(ctx: &Context) -> StoreStart {
    StoreStart {
        initial_cluster: ctx
            .cluster
            .config
            .controllers()
            .map(|c| format!("{}={}", c.name, peer_url(c)))
            .collect::<Vec<_>>()
            .join(","),
        state: NEW.into(),
    }
}

pub fn load(ctx: &Context, host: &str) -> Option<StoreStart> {
    let text = std::fs::read_to_string(path(ctx, host)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The flags `host`'s store manifest is rendered with: its record, else the founders' flags.
pub fn for_host(ctx: &Context, host: &str) -> StoreStart {
    load(ctx, host).unwrap_or_else(|| founders(ctx))
}

pub fn save(ctx: &Context, host: &str, s: &StoreStart) -> Result<(), BootstrapError> {
    let d = dir(ctx);
    std::fs::create_dir_all(&d).map_err(|source| BootstrapError::Io {
        what: "creating",
        path: d.clone(),
        source,
    })?;
    let json = serde_json::to_vec_pretty(s).expect("plain struct serialises");
    kiln_pki::files::write_atomic(&path(ctx, host), &json, 0o600).map_err(pki_err)
}

pub fn forget(ctx: &Context, host: &str) {
    let _ = std::fs::remove_file(path(ctx, host));
}

/// Forget every record (a restore made every member a founder of a new cluster; a full reset).
pub fn forget_all(ctx: &Context) {
    let _ = std::fs::remove_dir_all(dir(ctx));
}

/// Controllers of cluster.yaml that have no record while others do: listed after the cluster was
/// started, so `init` must not start them as founders of a new store (split brain); they join.
pub fn unrecorded_controllers(ctx: &Context) -> Vec<String> {
    let all: Vec<&crate::config::Host> = ctx.cluster.config.controllers().collect();
    if !all.iter().any(|c| path(ctx, &c.name).exists()) {
        return vec![];
    }
    all.iter()
        .filter(|c| !path(ctx, &c.name).exists())
        .map(|c| c.name.clone())
        .collect()
}

/// The hint every refusal to start a controller as a founder ends with.
pub fn join_hint(ctx: &Context) -> String {
    format!(
        "run `kiln join --control-plane -f {}` to add it to the running control plane",
        ctx.cluster.path.display()
    )
}

/// Before rendering `host`'s store manifest in `init`: founders are recorded on the first render; a
/// controller added to cluster.yaml later is refused (it must join).
pub fn ensure_recorded(ctx: &Context, host: &str) -> Result<(), BootstrapError> {
    if path(ctx, host).exists() {
        return Ok(());
    }
    if !unrecorded_controllers(ctx).is_empty() {
        return Err(BootstrapError::phase(
            "control-plane",
            host,
            format!(
                "{host} is a controller in {} that is not part of the running control plane; {}",
                ctx.cluster.path.display(),
                join_hint(ctx)
            ),
        ));
    }
    if ctx.plan.is_some() {
        return Ok(());
    }
    // The first render of a new cluster: every controller is a founder with the same flags (hosts of
    // one init phase may get here in parallel; they all write the same content).
    let f = founders(ctx);
    for c in ctx.cluster.config.controllers() {
        if !path(ctx, &c.name).exists() {
            save(ctx, &c.name, &f)?;
        }
    }
    Ok(())
}

/// A cluster made before records existed: record its running voters as founders of what they are
/// now (for the common case — nobody joined by hand — exactly the flags init rendered for them).
pub fn adopt_voters(ctx: &Context, voters: &[(String, String)]) -> Result<(), BootstrapError> {
    if ctx
        .cluster
        .config
        .controllers()
        .any(|c| path(ctx, &c.name).exists())
        || voters.is_empty()
    {
        return Ok(());
    }
    let s = StoreStart {
        initial_cluster: voters
            .iter()
            .map(|(n, u)| format!("{n}={u}"))
            .collect::<Vec<_>>()
            .join(","),
        state: NEW.into(),
    };
    for (name, _) in voters {
        if ctx.cluster.config.host(name).is_some() {
            save(ctx, name, &s)?;
        }
    }
    Ok(())
}
