//! Helpers shared by the kubelet's integration tests.
#![allow(dead_code)]

pub mod fake_runtime;
pub mod lab;

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

/// Polls `f` until it returns Some, at most `secs` seconds (bounded wait, not a timing assertion).
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    kiln_testkit::eventually_within(Duration::from_secs(secs), what, f).await
}

/// True when the process is gone (or a zombie nobody reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

pub fn pod_yaml(name: &str, restart_policy: &str, script: &str, grace: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\nspec:\n  hostNetwork: true\n  restartPolicy: {restart_policy}\n  terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: main\n    image: ignored\n    command: [/bin/sh, -c]\n    args: [{script:?}]\n    env:\n    - name: GREETING\n      value: hi\n    - name: MY_NODE\n      valueFrom:\n        fieldRef:\n          fieldPath: spec.nodeName\n"
    )
}

pub fn pod(name: &str, uid: &str, restart_policy: &str, script: &str, grace: u32) -> Pod {
    let mut p: Pod =
        serde_norway::from_str(&pod_yaml(name, restart_policy, script, grace)).unwrap();
    p.metadata.uid = Some(uid.to_string());
    p
}
