//! root-ca-cert-publisher: the `kube-root-ca.crt` ConfigMap (key `ca.crt`) in every active
//! namespace, so pods can verify the apiserver; put back when deleted or edited. The bundle is
//! --root-ca-file, or else the CA this process itself trusts for the apiserver (upstream's
//! fallback).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::context::Context;
use crate::serviceaccount::active;

pub const NAME: &str = "kube-root-ca.crt";
pub const KEY: &str = "ca.crt";
const DESCRIPTION_KEY: &str = "kubernetes.io/description";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

#[derive(Debug, thiserror::Error)]
pub enum RootCaError {
    #[error("reading --root-ca-file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("no --root-ca-file and no CA in the client configuration: {0}")]
    NoCa(String),
    #[error("publishing {namespace}/kube-root-ca.crt: {source}")]
    Publish {
        namespace: String,
        source: kube::Error,
    },
}

/// The ConfigMap as it should be.
pub fn desired(ca: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            annotations: Some(BTreeMap::from([(
                DESCRIPTION_KEY.to_string(),
                DESCRIPTION.to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(KEY.to_string(), ca.to_string())])),
        ..Default::default()
    }
}

/// The corrected ConfigMap when the existing one differs (data exactly `ca.crt`, the description
/// annotation present); None when it is right. Other metadata is kept.
pub fn corrected(existing: &ConfigMap, ca: &str) -> Option<ConfigMap> {
    let want = desired(ca);
    let annotated = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTION_KEY))
        .is_some_and(|d| d == DESCRIPTION);
    if existing.data == want.data && existing.binary_data.is_none() && annotated {
        return None;
    }
    let mut out = existing.clone();
    out.data = want.data;
    out.binary_data = None;
    out.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DESCRIPTION_KEY.into(), DESCRIPTION.into());
    Some(out)
}

fn pem_certificates(ders: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for der in ders {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// --root-ca-file, else the CA of this process's client configuration.
async fn root_ca(ctx: &Context) -> Result<String, RootCaError> {
    if let Some(path) = &ctx.options.root_ca_file {
        return std::fs::read_to_string(path).map_err(|source| RootCaError::Read {
            path: path.display().to_string(),
            source,
        });
    }
    let config = match &ctx.options.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| RootCaError::NoCa(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| RootCaError::NoCa(e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| RootCaError::NoCa(e.to_string()))?,
    };
    match config.root_cert {
        Some(ders) if !ders.is_empty() => Ok(pem_certificates(&ders)),
        _ => Err(RootCaError::NoCa("the kubeconfig names no CA".into())),
    }
}

struct State {
    ctx: Context,
    ca: String,
}

pub async fn run(ctx: Context) {
    let ca = match root_ca(&ctx).await {
        Ok(ca) => ca,
        Err(e) => {
            tracing::error!(error = %e, "root-ca-cert-publisher: nothing to publish");
            return;
        }
    };
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let maps: Api<ConfigMap> = Api::all(ctx.client.clone());
    Controller::new(namespaces, watcher::Config::default())
        .watches(
            maps,
            watcher::Config::default().fields(&format!("metadata.name={NAME}")),
            |cm| {
                cm.metadata
                    .namespace
                    .map(|ns| ObjectRef::<Namespace>::new(&ns))
            },
        )
        .run(reconcile, error_policy, Arc::new(State { ctx, ca }))
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ns: Arc<Namespace>, st: Arc<State>) -> Result<Action, RootCaError> {
    if !active(&ns) {
        return Ok(Action::await_change());
    }
    let name = ns.metadata.name.clone().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(st.ctx.client.clone(), &name);
    let err = |source| RootCaError::Publish {
        namespace: name.clone(),
        source,
    };
    let result = match api.get_opt(NAME).await.map_err(err)? {
        None => api.create(&PostParams::default(), &desired(&st.ca)).await,
        Some(existing) => match corrected(&existing, &st.ca) {
            None => return Ok(Action::await_change()),
            Some(fixed) => api.replace(NAME, &PostParams::default(), &fixed).await,
        },
    };
    match result {
        Ok(_) => tracing::info!(namespace = %name, "published kube-root-ca.crt"),
        // A concurrent write (we look again on its event) or a namespace that began terminating.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 403 || e.code == 404 => {}
        Err(e) => return Err(err(e)),
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Namespace>, err: &RootCaError, _: Arc<State>) -> Action {
    tracing::warn!(error = %err, "root-ca-cert-publisher");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edited_maps_are_corrected() {
        let ca = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
        let good = desired(ca);
        assert!(corrected(&good, ca).is_none());
        let mut edited = good.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert("ca.crt".into(), "tampered".into());
        edited
            .data
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        edited.metadata.labels = Some(BTreeMap::from([("keep".into(), "me".into())]));
        let fixed = corrected(&edited, ca).unwrap();
        assert_eq!(fixed.data, good.data);
        assert_eq!(fixed.metadata.labels, edited.metadata.labels);
        assert!(corrected(&fixed, ca).is_none());
    }

    #[test]
    fn der_to_pem() {
        let pem = pem_certificates(&[vec![0u8; 60]]);
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert_eq!(pem.lines().nth(1).unwrap().len(), 64);
        assert!(pem.ends_with("-----END CERTIFICATE-----\n"));
    }
}
