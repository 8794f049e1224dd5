//! The rotation's [`Effects`] on a real cluster: the configuration installed on a controller through
//! the bootstrapper's install path (only when it differs) and its API server manifest re-rendered, whose
//! `kiln.dev/config-hash` then differs, so the kubelet restarts kiln-apiserver; the wait for that mirror
//! pod to carry the new hash and be Ready, then for the host's own /readyz; the store read (etcd v3,
//! the operator's store client certificate) that says which key sealed each Secret; and the replace of
//! a Secret with itself through the API.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::GetOptions;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};

use super::keys::Sealed;
use super::steps::{Effects, Rewritten};
use crate::bootstrap::host_files::{install_files, staged, Install};
use crate::bootstrap::phases::apiserver_config::{
    encryption_config_path, remote_encryption_config,
};
use crate::bootstrap::phases::external_etcd::StoreAccess;
use crate::bootstrap::phases::push::control_plane_context;
use crate::bootstrap::phases::MANIFESTS;
use crate::bootstrap::Context;

const MANIFEST: &str = "kiln-apiserver.yaml";
const CONFIG_HASH: &str = "kiln.dev/config-hash";
const SECRETS: &str = "/registry/secrets/";

pub struct ClusterEffects<'a> {
    pub ctx: &'a Context,
}

/// The config hash annotation of a rendered manifest.
fn config_hash(manifest: &str) -> Option<String> {
    let v: serde_json::Value = serde_norway::from_str(manifest).ok()?;
    v["metadata"]["annotations"][CONFIG_HASH]
        .as_str()
        .map(str::to_string)
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The end of the key range of every key under `prefix` (etcd's `--prefix`; the prefix ends in `/`).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// Every Secret's key and what sealed it, read from one store endpoint in pages at one revision
/// (a single answer with every Secret could pass the client's 4 MiB message limit). Only each value's
/// prefix is looked at; the values are dropped page by page.
async fn census_at(access: &StoreAccess) -> Result<Vec<(String, Sealed)>, String> {
    const PAGE: i64 = 500;
    let mut client = access
        .connect(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    let end = prefix_end(SECRETS);
    let mut from = SECRETS.as_bytes().to_vec();
    let mut revision = 0;
    let mut out = vec![];
    loop {
        let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let r = client
            .get(from.clone(), Some(opts))
            .await
            .map_err(|e| format!("{}: {e}", access.endpoint))?;
        if revision == 0 {
            revision = r.header().map(|h| h.revision()).unwrap_or(0);
        }
        for kv in r.kvs() {
            out.push((
                String::from_utf8_lossy(kv.key()).into_owned(),
                Sealed::of(kv.value()),
            ));
        }
        match r.kvs().last() {
            Some(last) if r.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok(out),
        }
    }
}

impl ClusterEffects<'_> {
    /// Try `f` until it answers Ok or the wait timeout passes; the error is the last answer.
    async fn poll<F, Fut>(&self, what: &str, mut f: F) -> Result<(), String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let start = Instant::now();
        loop {
            match f().await {
                Ok(()) => return Ok(()),
                Err(e) if start.elapsed() > self.ctx.opts.wait_timeout => {
                    return Err(format!(
                        "{what} not within {}s (last: {e})",
                        self.ctx.opts.wait_timeout.as_secs()
                    ))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    async fn admin(&self) -> Result<kube::Client, String> {
        crate::bootstrap::phases::wait::admin_client(self.ctx)
            .await
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Effects for ClusterEffects<'_> {
    async fn roll_out(&self, host: &str) -> Result<String, String> {
        let ctx = self.ctx;
        let start = Instant::now();
        let t = ctx.transport(host).await.map_err(|e| e.to_string())?;
        let present = t
            .run(&format!("ls {MANIFESTS} 2>/dev/null; true"))
            .await
            .map_err(|e| e.to_string())?;
        if !present.lines().any(|l| l.trim() == MANIFEST) {
            return Ok(format!(
                "no {MANIFESTS}/{MANIFEST}: not part of the control plane yet (it gets the configuration when it joins)"
            ));
        }
        let config = Install {
            local: encryption_config_path(ctx),
            remote: remote_encryption_config(),
            mode: 0o600,
        };
        let installed = install_files(ctx, host, &[config])
            .await
            .map_err(|e| e.to_string())?;
        // The same render as init's control-plane phase, so a later init converges.
        let manifest = staged(
            ctx,
            host,
            MANIFEST,
            &control_plane_context(ctx, host),
            format!("{MANIFESTS}/{MANIFEST}"),
            0o600,
        )
        .map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(&manifest.local).map_err(|e| e.to_string())?;
        let want = config_hash(&text)
            .ok_or_else(|| format!("the rendered {MANIFEST} has no {CONFIG_HASH} annotation"))?;
        let rewritten = install_files(ctx, host, &[manifest])
            .await
            .map_err(|e| e.to_string())?;
        let pod = format!("kiln-apiserver-{host}");
        let admin = self.admin().await?;
        let pods: Api<Pod> = Api::namespaced(admin, "kube-system");
        self.poll(&format!("{pod} Ready with config hash {want}"), || {
            let (pods, pod, want) = (pods.clone(), pod.clone(), want.clone());
            async move {
                let p = pods
                    .get_opt(&pod)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no mirror pod {pod} yet"))?;
                let have = p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(CONFIG_HASH))
                    .cloned()
                    .unwrap_or_default();
                match (have == want, ready(&p)) {
                    (true, true) => Ok(()),
                    (same, r) => Err(format!("hash {have:?} (want {want:?}) {same}, ready {r}")),
                }
            }
        })
        .await?;
        let client = crate::bootstrap::phases::wait::host_admin_client(self.ctx, host).await?;
        self.poll("/readyz", || {
            crate::bootstrap::phases::wait::readyz(client.clone())
        })
        .await?;
        Ok(format!(
            "{}; /readyz ok after {:.1}s",
            match (installed.is_empty(), rewritten.is_empty()) {
                (true, true) => "already had this configuration",
                (_, false) => "configuration installed, kiln-apiserver restarted",
                (false, true) => "configuration installed",
            },
            start.elapsed().as_secs_f64()
        ))
    }

    async fn census(&self) -> Result<Vec<(String, Sealed)>, String> {
        let mut last = String::from("no store endpoint");
        for access in StoreAccess::for_cluster(self.ctx) {
            match census_at(&access).await {
                Ok(c) => return Ok(c),
                Err(e) => {
                    tracing::warn!(store = %access.name, error = %e, "store not answering, trying the next");
                    last = e;
                }
            }
        }
        Err(format!("reading the Secrets from the store: {last}"))
    }

    async fn rewrite(&self, namespace: &str, name: &str) -> Result<Rewritten, String> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.admin().await?,
            namespace,
            &ApiResource::erase::<Secret>(&()),
        );
        // The object as read (resourceVersion included), as `kubectl get -o json | kubectl replace`
        // sends it; a conflict means someone wrote it meanwhile: read it again.
        for _ in 0..5 {
            let Some(obj) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
                return Ok(Rewritten::Gone);
            };
            match api.replace(name, &PostParams::default(), &obj).await {
                Ok(_) => return Ok(Rewritten::Replaced),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Rewritten::Gone),
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("five conflicts in a row".into())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_config_hash_comes_from_the_rendered_manifest() {
        let m = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kiln-apiserver\n  annotations:\n    kiln.dev/config-hash: \"abc\"\n";
        assert_eq!(super::config_hash(m).as_deref(), Some("abc"));
        assert_eq!(super::config_hash("kind: Pod\n"), None);
    }

    #[test]
    fn the_secrets_range_ends_like_etcdctl_prefix() {
        assert_eq!(
            super::prefix_end("/registry/secrets/"),
            b"/registry/secrets0"
        );
    }
}
