//! Pulling a container's image with the pod's image pull secrets, as upstream's kubelet does: the
//! Secrets named in `spec.imagePullSecrets` are read (those that cannot be are named in a
//! FailedToRetrieveImagePullSecret warning, and the pull goes on without them), the [`Keyring`] picks
//! the credentials matching the image, and PullImage is tried with each in turn until one works; with
//! none matching the pull is anonymous. Credentials never reach a log or an event.

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

use super::api::{CriApi, CriError};
use super::keyring::{Keyring, KeyringError, PullSecret};
use crate::pod_objects::PodObjects;

/// The pod-level warning for pull secrets that could not be read.
pub const REASON_FAILED_SECRET: &str = "FailedToRetrieveImagePullSecret";

#[derive(Debug, Clone, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Keyring(#[from] KeyringError),
    /// Every credential failed (or the anonymous pull did): upstream's aggregate of their errors.
    #[error("{}", aggregate(.0))]
    Pull(Vec<CriError>),
}

/// Upstream's error aggregate text: one error as itself, several (distinct) as `[a, b]`.
fn aggregate(errors: &[CriError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let m = e.to_string();
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// The pod's pull secrets that could be read, and the names of those that could not (missing, or
/// the API failed; without an API client, all of them). Entries without a name are ignored.
pub async fn fetch_secrets(
    pod: &Pod,
    objects: Option<&dyn PodObjects>,
) -> (Vec<PullSecret>, Vec<String>) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let names = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty());
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    for name in names {
        let got = match objects {
            Some(o) => o.secret_with_type(ns, name).await,
            None => Ok(None),
        };
        match got {
            Ok(Some((type_, data))) => found.push(PullSecret { type_, data }),
            Ok(None) => {
                tracing::info!(
                    namespace = ns,
                    secret = name,
                    "unable to retrieve pull secret, the image pull may not succeed: not found"
                );
                failed.push(name.to_string());
            }
            Err(e) => {
                tracing::info!(namespace = ns, secret = name, error = %e, "unable to retrieve pull secret, the image pull may not succeed");
                failed.push(name.to_string());
            }
        }
    }
    (found, failed)
}

/// Upstream's FailedToRetrieveImagePullSecret message.
pub fn failed_secrets_message(failed: &[String]) -> String {
    format!(
        "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
        failed.join(", ")
    )
}

/// Pulls `image` with the matching credentials of `secrets`, each in turn (the first that works
/// wins), or anonymously when none matches; returns the image ref.
pub async fn pull(
    cri: &dyn CriApi,
    image: &str,
    secrets: &[PullSecret],
    sandbox: &cri::PodSandboxConfig,
) -> Result<String, PullError> {
    let keyring = Keyring::from_secrets(secrets)?;
    let creds = keyring.lookup(image);
    if creds.is_empty() {
        tracing::debug!(%image, "pulling image without credentials");
        return cri
            .pull_image_with_auth(image, None, sandbox)
            .await
            .map_err(|e| PullError::Pull(vec![e]));
    }
    let mut errors = Vec::new();
    for (i, c) in creds.iter().enumerate() {
        tracing::debug!(%image, credential = i + 1, of = creds.len(), user = %c.username, "pulling image with credentials");
        match cri
            .pull_image_with_auth(image, Some(&c.auth_config()), sandbox)
            .await
        {
            Ok(r) => return Ok(r),
            Err(e) => errors.push(e),
        }
    }
    Err(PullError::Pull(errors))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::pod_objects::FakeObjects;
    use crate::runtime::cri::fake::FakeCri;
    use crate::runtime::cri::keyring::{KEY_DOCKER_CONFIG_JSON, TYPE_DOCKER_CONFIG_JSON};

    const IMG: &str = "10.250.0.1:5001/kiln/private:1";

    fn config(user: &str, password: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"auths": {
            "10.250.0.1:5001": {"username": user, "password": password}
        }}))
        .unwrap()
    }

    fn secret(user: &str, password: &str) -> PullSecret {
        PullSecret {
            type_: TYPE_DOCKER_CONFIG_JSON.into(),
            data: BTreeMap::from([(KEY_DOCKER_CONFIG_JSON.to_string(), config(user, password))]),
        }
    }

    fn pod(secrets: &[&str]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "apps", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": IMG}],
                     "imagePullSecrets": secrets.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn each_matching_credential_is_tried_until_one_works() {
        let fake = FakeCri::default();
        fake.st()
            .registry_auth
            .insert(IMG.into(), ("lab".into(), "right".into()));
        let sb = cri::PodSandboxConfig::default();
        // Anonymous: refused.
        let err = pull(&fake, IMG, &[], &sb).await.unwrap_err();
        assert!(err.to_string().contains("401 Unauthorized"), "{err}");
        // A wrong then a right credential: the second works.
        let r = pull(
            &fake,
            IMG,
            &[secret("lab", "wrong"), secret("lab", "right")],
            &sb,
        )
        .await
        .unwrap();
        assert_eq!(r, format!("sha256:{IMG}"));
        assert_eq!(
            fake.take_calls(),
            vec![
                format!("PullImage {IMG}"),
                format!("PullImage {IMG} auth=lab"),
                format!("PullImage {IMG} auth=lab"),
            ]
        );
        // Only wrong ones: both errors, aggregated as upstream (identical texts once).
        fake.st().images.clear();
        let err = pull(&fake, IMG, &[secret("lab", "a"), secret("lab", "b")], &sb)
            .await
            .unwrap_err();
        assert!(!err.to_string().starts_with('['), "{err}");
        // A credential for another registry: the pull is anonymous.
        let other = PullSecret {
            type_: TYPE_DOCKER_CONFIG_JSON.into(),
            data: BTreeMap::from([(
                KEY_DOCKER_CONFIG_JSON.to_string(),
                br#"{"auths": {"other.example": {"username": "x", "password": "y"}}}"#.to_vec(),
            )]),
        };
        fake.take_calls();
        let _ = pull(&fake, IMG, &[other], &sb).await;
        assert_eq!(fake.take_calls(), vec![format!("PullImage {IMG}")]);
    }

    #[test]
    fn several_distinct_errors_are_bracketed() {
        let e = |m: &str| CriError::Call {
            op: "PullImage",
            code: tonic::Code::Unknown,
            message: m.into(),
        };
        assert_eq!(
            PullError::Pull(vec![e("a"), e("b"), e("a")]).to_string(),
            "[CRI PullImage: Unknown: a, CRI PullImage: Unknown: b]"
        );
        assert_eq!(
            PullError::Pull(vec![e("a"), e("a")]).to_string(),
            "CRI PullImage: Unknown: a"
        );
    }

    #[tokio::test]
    async fn secrets_are_read_by_name_and_missing_ones_named() {
        let objects = FakeObjects::default();
        objects.put_typed_secret(
            "apps",
            "regcred",
            TYPE_DOCKER_CONFIG_JSON,
            &[(
                KEY_DOCKER_CONFIG_JSON,
                &String::from_utf8(config("u", "p")).unwrap(),
            )],
        );
        let (found, failed) = fetch_secrets(&pod(&["regcred", "", "gone"]), Some(&objects)).await;
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].type_, TYPE_DOCKER_CONFIG_JSON);
        assert_eq!(failed, vec!["gone"]);
        assert_eq!(
            failed_secrets_message(&["a".into(), "b".into()]),
            "Unable to retrieve some image pull secrets (a, b); attempting to pull the image may not succeed."
        );
        // Without an API client none can be read.
        let (found, failed) = fetch_secrets(&pod(&["regcred"]), None).await;
        assert!(found.is_empty());
        assert_eq!(failed, vec!["regcred"]);
        let (found, failed) = fetch_secrets(&pod(&[]), None).await;
        assert!(found.is_empty() && failed.is_empty());
    }
}
