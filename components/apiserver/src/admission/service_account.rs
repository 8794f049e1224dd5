//! ServiceAccount admission: a pod without `serviceAccountName` runs as `default`; a pod whose
//! ServiceAccount does not exist is refused (controllers retry until the serviceaccount controller
//! has made it); unless the pod or its ServiceAccount opts out (`automountServiceAccountToken:
//! false`), a projected `kube-api-access-<suffix>` volume (token, ca.crt, namespace) is added and
//! mounted read-only in every container; a pod naming no imagePullSecrets gets its ServiceAccount's.
//! Mirror pods are left alone, as upstream.

use serde_json::{json, Value};

use super::node_restriction::MIRROR_ANNOTATION;

pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// Upstream's token lifetime for this volume (an hour and a bit, recognisably admission-made).
pub const TOKEN_SECONDS: i64 = 3607;

pub fn is_mirror(pod: &Value) -> bool {
    pod["metadata"]["annotations"]
        .get(MIRROR_ANNOTATION)
        .is_some()
}

/// Sets the default ServiceAccount name (and the deprecated `serviceAccount` alias); returns the name.
pub fn default_name(pod: &mut Value) -> String {
    let name = pod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_SERVICE_ACCOUNT)
        .to_string();
    pod["spec"]["serviceAccountName"] = json!(name);
    pod["spec"]["serviceAccount"] = json!(name);
    name
}

/// The pod's own setting wins over its ServiceAccount's; both unset = mount.
pub fn should_automount(pod: &Value, sa: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// The projected volume upstream's admission adds.
pub fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
}

/// Adds the token volume (named `kube-api-access-<suffix>`) and its mount in every container and
/// init container that has nothing at the token path yet. A pod that already has such a volume, or
/// where every container mounts something there, is left as it is.
pub fn mount_token(pod: &mut Value, suffix: &str) {
    let has_mount = |c: &Value| {
        c["volumeMounts"].as_array().is_some_and(|ms| {
            ms.iter().any(|m| {
                m["mountPath"].as_str().map(|p| p.trim_end_matches('/')) == Some(TOKEN_MOUNT_PATH)
            })
        })
    };
    let spec = &mut pod["spec"];
    let existing = spec["volumes"].as_array().and_then(|vs| {
        vs.iter()
            .filter_map(|v| v["name"].as_str())
            .find(|n| n.starts_with(VOLUME_PREFIX))
            .map(str::to_string)
    });
    let needs: bool = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().cloned().unwrap_or_default())
        .any(|c| !has_mount(&c));
    if !needs {
        return;
    }
    let volume = match existing {
        Some(n) => n,
        None => {
            let name = format!("{VOLUME_PREFIX}{suffix}");
            if !spec["volumes"].is_array() {
                spec["volumes"] = json!([]);
            }
            if let Some(vs) = spec["volumes"].as_array_mut() {
                vs.push(token_volume(&name));
            }
            name
        }
    };
    for k in ["containers", "initContainers"] {
        let Some(cs) = spec[k].as_array_mut() else {
            continue;
        };
        for c in cs.iter_mut().filter(|c| !has_mount(c)) {
            if !c["volumeMounts"].is_array() {
                c["volumeMounts"] = json!([]);
            }
            if let Some(ms) = c["volumeMounts"].as_array_mut() {
                ms.push(json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}));
            }
        }
    }
}

/// A pod that names no imagePullSecrets gets its ServiceAccount's (upstream's admission copies them;
/// the kubelet pulls with them).
pub fn copy_image_pull_secrets(pod: &mut Value, sa: &Value) {
    let has_own = pod["spec"]["imagePullSecrets"]
        .as_array()
        .is_some_and(|a| !a.is_empty());
    let Some(from_sa) = sa["imagePullSecrets"].as_array().filter(|a| !a.is_empty()) else {
        return;
    };
    if has_own {
        return;
    }
    let refs: Vec<Value> = from_sa
        .iter()
        .map(|r| json!({"name": r["name"].as_str().unwrap_or_default()}))
        .collect();
    pod["spec"]["imagePullSecrets"] = Value::Array(refs);
}

/// Upstream's refusal when the ServiceAccount is missing (403, so clients retry later).
pub fn lookup_failed(namespace: &str, name: &str) -> String {
    format!(
        "error looking up service account {namespace}/{name}: serviceaccount {name:?} not found"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "image": "x"}],
            "containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "d", "mountPath": "/d"}]},
                           {"name": "b", "image": "x"}]}})
    }

    #[test]
    fn defaults_the_name_and_mounts_the_token_everywhere() {
        let mut p = pod();
        assert_eq!(default_name(&mut p), "default");
        assert_eq!(p["spec"]["serviceAccount"], "default");
        mount_token(&mut p, "abcde");
        let vols = p["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 1);
        assert_eq!(vols[0]["name"], "kube-api-access-abcde");
        assert_eq!(
            vols[0]["projected"]["sources"][0]["serviceAccountToken"]["path"],
            "token"
        );
        for c in ["containers", "initContainers"] {
            for ctr in p["spec"][c].as_array().unwrap() {
                let ms = ctr["volumeMounts"].as_array().unwrap();
                let m = ms
                    .iter()
                    .find(|m| m["mountPath"] == TOKEN_MOUNT_PATH)
                    .unwrap();
                assert_eq!(m["name"], "kube-api-access-abcde");
                assert_eq!(m["readOnly"], true);
            }
        }
        // Idempotent: a second pass adds nothing.
        let before = p.clone();
        mount_token(&mut p, "zzzzz");
        assert_eq!(p, before);
    }

    #[test]
    fn the_service_account_s_pull_secrets_go_to_pods_without_their_own() {
        let sa = json!({"imagePullSecrets": [{"name": "regcred"}, {"name": "other"}]});
        let mut p = pod();
        copy_image_pull_secrets(&mut p, &sa);
        assert_eq!(
            p["spec"]["imagePullSecrets"],
            json!([{"name": "regcred"}, {"name": "other"}])
        );
        // The pod's own list wins; a ServiceAccount without any adds nothing.
        let mut p = pod();
        p["spec"]["imagePullSecrets"] = json!([{"name": "mine"}]);
        copy_image_pull_secrets(&mut p, &sa);
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "mine"}]));
        let mut p = pod();
        copy_image_pull_secrets(&mut p, &json!({}));
        assert!(p["spec"].get("imagePullSecrets").is_none());
    }

    #[test]
    fn opting_out_and_explicit_names() {
        let mut p = pod();
        p["spec"]["serviceAccountName"] = json!("builder");
        assert_eq!(default_name(&mut p), "builder");
        let sa = json!({"metadata": {"name": "builder"}, "automountServiceAccountToken": false});
        assert!(!should_automount(&p, &sa));
        p["spec"]["automountServiceAccountToken"] = json!(true);
        assert!(should_automount(&p, &sa));
        assert!(should_automount(&pod(), &json!({})));
        assert_eq!(
            lookup_failed("ns", "builder"),
            "error looking up service account ns/builder: serviceaccount \"builder\" not found"
        );
    }
}
