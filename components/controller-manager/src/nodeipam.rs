//! nodeipam: gives every node without one a spec.podCIDR (and podCIDRs) from --cluster-cidr. A
//! node's subnet returns to the pool when the node is deleted, since allocation only skips the
//! subnets of nodes that exist.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use serde_json::json;

use crate::cidr::{CidrError, CidrSet};
use crate::context::Context;

#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error(transparent)]
    Cidr(#[from] CidrError),
    #[error("setting podCIDR of node {node}: {source}")]
    Patch { node: String, source: kube::Error },
}

struct State {
    api: Api<Node>,
    nodes: Store<Node>,
    set: CidrSet,
    /// Subnets handed out whose node update the store has not shown yet.
    in_flight: Mutex<HashMap<String, String>>,
}

fn pod_cidr(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidr.as_deref())
        .filter(|c| !c.is_empty())
}

pub async fn run(ctx: Context) {
    if !ctx.options.allocate_node_cidrs {
        tracing::info!("nodeipam: --allocate-node-cidrs is off; not allocating");
        return;
    }
    let set = match CidrSet::new(&ctx.options.cluster_cidr, ctx.options.node_cidr_mask_size) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "nodeipam: bad --cluster-cidr / --node-cidr-mask-size");
            return;
        }
    };
    let api: Api<Node> = Api::all(ctx.client.clone());
    let controller = Controller::new(api.clone(), watcher::Config::default());
    let state = Arc::new(State {
        api,
        nodes: controller.store(),
        set,
        in_flight: Mutex::new(HashMap::new()),
    });
    controller
        .run(reconcile, error_policy, state)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(node: Arc<Node>, st: Arc<State>) -> Result<Action, IpamError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    if pod_cidr(&node).is_some() {
        st.in_flight.lock().expect("ipam").remove(&name);
        return Ok(Action::await_change());
    }
    let cidr = {
        let mut in_flight = st.in_flight.lock().expect("ipam");
        if let Some(c) = in_flight.get(&name) {
            c.clone()
        } else {
            let nodes = st.nodes.state();
            let used: Vec<String> = nodes
                .iter()
                .filter_map(|n| pod_cidr(n).map(str::to_string))
                .chain(in_flight.values().cloned())
                .collect();
            let cidr = st
                .set
                .allocate(used.iter().map(String::as_str))?
                .to_string();
            in_flight.insert(name.clone(), cidr.clone());
            cidr
        }
    };
    let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
    st.api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| IpamError::Patch {
            node: name.clone(),
            source,
        })?;
    tracing::info!(node = %name, %cidr, "allocated podCIDR");
    Ok(Action::await_change())
}

fn error_policy(node: Arc<Node>, err: &IpamError, st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "nodeipam");
    if let Some(name) = node.metadata.name.as_deref() {
        st.in_flight.lock().expect("ipam").remove(name);
    }
    Action::requeue(Duration::from_secs(2))
}
