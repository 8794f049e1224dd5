//! Building a kube-rs client from `--kubeconfig` (or the in-cluster environment when it is absent).

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {path}: {source}")]
    Read {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path}: {source}")]
    Config {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("no --kubeconfig and no in-cluster configuration: {0}")]
    Infer(kube::config::InferConfigError),
    #[error("building the API client: {0}")]
    Build(kube::Error),
}

/// A client for the API server named by the kubeconfig file, with its current context.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    kube::Client::try_from(config(kubeconfig).await?).map_err(ClientError::Build)
}

/// The client configuration [`client`] builds from: components that need a second client of their
/// own (leader election, on a thread of its own) build it from this.
pub async fn config(kubeconfig: Option<&Path>) -> Result<kube::Config, ClientError> {
    match kubeconfig {
        Some(path) => {
            let display = path.display().to_string();
            let kc =
                kube::config::Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
                    path: display.clone(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Config {
                    path: display,
                    source,
                })
        }
        None => kube::Config::infer().await.map_err(ClientError::Infer),
    }
}

/// `<hostname>_<random>`, like client-go's leader-election identity: unique per process, readable.
pub fn process_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string());
    format!("{host}_{:016x}", rand::random::<u64>())
}
