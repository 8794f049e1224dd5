//! Phase storage-class: the default StorageClass `local-path` for the node-local provisioner every
//! kubelet runs (`kiln.io/local-path`, `storage.localPath` in cluster.yaml). Created when missing and
//! never changed afterwards: an operator may edit it (another reclaim policy, not the default any
//! more) or delete it, and a re-run of `kiln init` must not undo that — deleting it and re-running
//! init brings it back. With the provisioner disabled no class is made.

use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;

use super::wait::admin_client;
use super::Outcome;
use crate::bootstrap::{BootstrapError, Context};

pub const CLASS_NAME: &str = "local-path";
pub const PROVISIONER: &str = "kiln.io/local-path";
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// The class as the shared contract spells it.
pub fn desired_class() -> StorageClass {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": CLASS_NAME,
            "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
            "labels": {"app.kubernetes.io/managed-by": "kiln"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .expect("a valid StorageClass")
}

/// What the phase does given whether the class exists: pure, so the decision is tested without an API.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Disabled,
    Create,
    Keep,
}

pub fn step(enabled: bool, exists: bool) -> Step {
    match (enabled, exists) {
        (false, _) => Step::Disabled,
        (true, false) => Step::Create,
        (true, true) => Step::Keep,
    }
}

pub(super) async fn storage_class(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let fail = |e: String| BootstrapError::phase("storage-class", "local", e);
    let enabled = ctx.cluster.config.spec.storage.local_path.enabled;
    let api = match enabled {
        true => Some(kube::Api::<StorageClass>::all(admin_client(ctx).await?)),
        false => None,
    };
    let exists = match &api {
        Some(api) => api
            .get_opt(CLASS_NAME)
            .await
            .map_err(|e| fail(e.to_string()))?
            .is_some(),
        None => false,
    };
    match (step(enabled, exists), api) {
        (Step::Create, Some(api)) => {
            match api.create(&Default::default(), &desired_class()).await {
                Ok(_) => {}
                // Made meanwhile (another init): it exists, which is all this phase wants.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(fail(e.to_string())),
            }
            Ok(Outcome::Done(format!(
                "StorageClass {CLASS_NAME} created (default, {PROVISIONER})"
            )))
        }
        (Step::Keep, _) => Ok(Outcome::Skipped(format!(
            "StorageClass {CLASS_NAME} exists (left as it is)"
        ))),
        _ => Ok(Outcome::Skipped(
            "local-path provisioner disabled (storage.localPath.enabled: false): no StorageClass"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_is_the_contracts_default_local_path_class() {
        let c = serde_json::to_value(desired_class()).unwrap();
        assert_eq!(c["metadata"]["name"], "local-path");
        assert_eq!(
            c["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
            "true"
        );
        assert_eq!(c["provisioner"], "kiln.io/local-path");
        assert_eq!(c["reclaimPolicy"], "Delete");
        assert_eq!(c["volumeBindingMode"], "WaitForFirstConsumer");
    }

    #[test]
    fn an_existing_class_is_kept_and_a_disabled_provisioner_gets_none() {
        assert_eq!(step(true, false), Step::Create);
        assert_eq!(step(true, true), Step::Keep);
        assert_eq!(step(false, false), Step::Disabled);
        assert_eq!(step(false, true), Step::Disabled);
    }
}
