//! Phase bootstrap-token: before joining kubelets start, make sure there is a bootstrap token for them
//! (minted just in time, see [`Context::bootstrap_token`]) and report the CA pin they will verify.

use k8s_openapi::api::core::v1::Node;
use sha2::{Digest, Sha256};

use super::pki::pki_err;
use super::*;

/// `sha256:<hex>` of the cluster CA's public key, kubeadm's `--discovery-token-ca-cert-hash` form.
pub fn ca_cert_hash(ctx: &Context) -> Result<String, BootstrapError> {
    let path = ctx.pki_dir(&ctx.first_controller().name).join("ca.crt");
    let pem = kiln_pki::files::read_string(&path).map_err(pki_err)?;
    let spki = kiln_pki::expiry::spki_der(&pem, &path.display().to_string())
        .map_err(|e| BootstrapError::phase("bootstrap-token", "local", e.to_string()))?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(spki))))
}

pub(super) async fn bootstrap_token(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let workers: Vec<String> = ctx
        .cluster
        .config
        .workers()
        .filter(|h| !h.is_controller())
        .map(|h| h.name.clone())
        .collect();
    if workers.is_empty() {
        return Ok(Outcome::Skipped("no worker hosts to join".into()));
    }
    let client = wait::admin_client(ctx).await?;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let mut missing = vec![];
    for w in &workers {
        let node = nodes.get_opt(w).await.map_err(|e| {
            BootstrapError::phase("bootstrap-token", "local", format!("node {w}: {e}"))
        })?;
        if node.is_none() {
            missing.push(w.clone());
        }
    }
    if missing.is_empty() {
        return Ok(Outcome::Skipped("every worker has joined".into()));
    }
    let token = ctx.bootstrap_token().await?;
    let id = token.split('.').next().unwrap_or_default();
    Ok(Outcome::Done(format!(
        "token {id} (TTL {}m) for {}; CA pinned at {}",
        JOIN_TOKEN_TTL.whole_minutes(),
        missing.join(", "),
        ca_cert_hash(ctx)?
    )))
}
