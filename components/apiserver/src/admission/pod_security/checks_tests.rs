//! Table-driven tests of every check: a pod (metadata + spec) and the violation upstream reports,
//! texts compared exactly.

use serde_json::{json, Value};

use super::api::{Level, LevelVersion, Version};
use super::baseline as b;
use super::checks::{evaluate, CheckFn, Violation};
use super::restricted as r;

struct Case {
    name: &'static str,
    check: CheckFn,
    meta: Value,
    spec: Value,
    /// None: allowed; Some((reason, detail)).
    want: Option<(&'static str, &'static str)>,
}

fn c(
    name: &'static str,
    check: CheckFn,
    spec: Value,
    want: Option<(&'static str, &'static str)>,
) -> Case {
    Case {
        name,
        check,
        meta: json!({}),
        spec,
        want,
    }
}

fn with_meta(mut case: Case, meta: Value) -> Case {
    case.meta = meta;
    case
}

fn run(cases: Vec<Case>) {
    for case in cases {
        let got = (case.check)(&case.meta, &case.spec);
        let want = case.want.map(|(reason, detail)| Violation {
            reason: reason.into(),
            detail: detail.into(),
        });
        assert_eq!(got, want, "case {}", case.name);
    }
}

fn sc(name: &str, security_context: Value) -> Value {
    json!({"name": name, "image": "i", "securityContext": security_context})
}

#[test]
fn baseline_host_and_privilege_checks() {
    run(vec![
        c("no host namespaces", b::host_namespaces, json!({"hostNetwork": false}), None),
        c(
            "all host namespaces",
            b::host_namespaces,
            json!({"hostNetwork": true, "hostPID": true, "hostIPC": true}),
            Some(("host namespaces", "hostNetwork=true, hostPID=true, hostIPC=true")),
        ),
        c(
            "privileged init and regular",
            b::privileged,
            json!({"initContainers": [sc("i", json!({"privileged": true}))],
                   "containers": [sc("a", json!({"privileged": false})), sc("b", json!({"privileged": true}))]}),
            Some(("privileged", "containers \"i\", \"b\" must not set securityContext.privileged=true")),
        ),
        c(
            "ephemeral privileged",
            b::privileged,
            json!({"ephemeralContainers": [sc("dbg", json!({"privileged": true}))]}),
            Some(("privileged", "container \"dbg\" must not set securityContext.privileged=true")),
        ),
        c(
            "baseline capabilities ok",
            b::capabilities,
            json!({"containers": [sc("a", json!({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"]}}))]}),
            None,
        ),
        c(
            "non-default capabilities",
            b::capabilities,
            json!({"containers": [
                sc("a", json!({"capabilities": {"add": ["SYS_ADMIN", "NET_RAW"]}})),
                sc("b", json!({"capabilities": {"add": ["NET_RAW", "CHOWN"]}}))]}),
            Some(("non-default capabilities",
                  "containers \"a\", \"b\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add")),
        ),
        c(
            "hostPath volumes",
            b::host_path_volumes,
            json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}]}),
            Some(("hostPath volumes", "volume \"h\"")),
        ),
        c(
            "host ports sorted as strings",
            b::host_ports,
            json!({"containers": [
                {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]},
                {"name": "b", "ports": [{"containerPort": 90, "hostPort": 10000}]}]}),
            Some(("hostPort", "containers \"a\", \"b\" use hostPorts 10000, 8080")),
        ),
        c(
            "one host port",
            b::host_ports,
            json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
            Some(("hostPort", "container \"a\" uses hostPort 80")),
        ),
        c(
            "probe and lifecycle hosts",
            b::host_probes_and_lifecycle,
            json!({"containers": [{"name": "a",
                "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}},
                "lifecycle": {"preStop": {"tcpSocket": {"host": "example.com", "port": 1}}}},
                {"name": "b", "readinessProbe": {"httpGet": {"port": 80}}}]}),
            Some(("probe or lifecycle host",
                  "container \"a\" uses probe or lifecycle hosts \"10.0.0.1\", \"example.com\"")),
        ),
        c(
            "windows hostProcess",
            b::windows_host_process,
            json!({"securityContext": {"windowsOptions": {"hostProcess": true}},
                   "containers": [sc("a", json!({"windowsOptions": {"hostProcess": true}})), sc("b", json!({}))]}),
            Some(("hostProcess", "pod and container \"a\" must not set securityContext.windowsOptions.hostProcess=true")),
        ),
    ]);
}

#[test]
fn baseline_profile_checks() {
    run(vec![
        c(
            "apparmor allowed types",
            b::app_armor_profile,
            json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                   "containers": [sc("a", json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}))]}),
            None,
        ),
        with_meta(
            c(
                "apparmor unconfined everywhere",
                b::app_armor_profile,
                json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
                       "containers": [sc("a", json!({"appArmorProfile": {"type": "Unconfined"}}))]}),
                Some(("forbidden AppArmor profiles",
                      "pod and container \"a\" and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/a=\"unconfined\"\"")),
            ),
            json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined",
                                   "container.apparmor.security.beta.kubernetes.io/b": "localhost/x"}}),
        ),
        with_meta(
            c(
                "apparmor annotations only (upstream's case)",
                b::app_armor_profile,
                json!({}),
                Some(("forbidden AppArmor profiles",
                      "annotations must not set AppArmor profile type to \"container.apparmor.security.beta.kubernetes.io/=\"bogus\"\", \"container.apparmor.security.beta.kubernetes.io/e=\"unconfined\"\", \"container.apparmor.security.beta.kubernetes.io/f=\"unknown\"\"")),
            ),
            json!({"annotations": {
                "container.apparmor.security.beta.kubernetes.io/": "bogus",
                "container.apparmor.security.beta.kubernetes.io/a": "",
                "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/c": "localhost/",
                "container.apparmor.security.beta.kubernetes.io/d": "localhost/foo",
                "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/f": "unknown"}}),
        ),
        c(
            "seLinux allowed",
            b::selinux_options_1_31,
            json!({"securityContext": {"seLinuxOptions": {"level": "s0:c1"}},
                   "containers": [sc("a", json!({"seLinuxOptions": {"type": "container_engine_t"}}))]}),
            None,
        ),
        c(
            "seLinux bad type, user and role",
            b::selinux_options_1_0,
            json!({"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u"}},
                   "containers": [sc("a", json!({"seLinuxOptions": {"type": "container_engine_t", "role": "r"}}))]}),
            Some(("seLinuxOptions",
                  "pod and container \"a\" set forbidden securityContext.seLinuxOptions: types \"container_engine_t\", \"spc_t\"; user may not be set; role may not be set")),
        ),
        c(
            "procMount unmasked",
            b::proc_mount,
            json!({"containers": [sc("a", json!({"procMount": "Unmasked"})), sc("b", json!({"procMount": "Default"}))]}),
            Some(("procMount", "container \"a\" must not set securityContext.procMount to \"Unmasked\"")),
        ),
        c(
            "procMount unmasked in a user namespace (1.35+ baseline)",
            b::proc_mount_unless_user_namespace,
            json!({"hostUsers": false, "containers": [sc("a", json!({"procMount": "Unmasked"}))]}),
            None,
        ),
        c(
            "seccomp unconfined",
            b::seccomp_profile,
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                   "containers": [sc("a", json!({"seccompProfile": {"type": "RuntimeDefault"}}))]}),
            Some(("seccompProfile", "pod must not set securityContext.seccompProfile.type to \"Unconfined\"")),
        ),
        c("seccomp unset is baseline", b::seccomp_profile, json!({"containers": [sc("a", json!({}))]}), None),
        with_meta(
            c(
                "seccomp annotations before 1.19",
                b::seccomp_annotations,
                json!({"containers": [sc("a", json!({}))]}),
                Some(("seccompProfile",
                      "forbidden annotations container.seccomp.security.alpha.kubernetes.io/a=\"unconfined\", seccomp.security.alpha.kubernetes.io/pod=\"unconfined\"")),
            ),
            json!({"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined",
                                   "container.seccomp.security.alpha.kubernetes.io/a": "unconfined"}}),
        ),
        c(
            "sysctls by version",
            b::sysctls_1_0,
            json!({"securityContext": {"sysctls": [
                {"name": "kernel.shm_rmid_forced", "value": "1"},
                {"name": "net.ipv4.ip_local_reserved_ports", "value": "1"},
                {"name": "kernel.msgmax", "value": "1"}]}}),
            Some(("forbidden sysctls", "net.ipv4.ip_local_reserved_ports, kernel.msgmax")),
        ),
        c(
            "sysctls 1.32",
            b::sysctls_1_32,
            json!({"securityContext": {"sysctls": [
                {"name": "net.ipv4.tcp_rmem", "value": "1"},
                {"name": "net.ipv4.ip_local_reserved_ports", "value": "1"}]}}),
            None,
        ),
    ]);
}

#[test]
fn restricted_checks() {
    run(vec![
        c(
            "allowPrivilegeEscalation unset or true",
            r::allow_privilege_escalation,
            json!({"containers": [sc("a", json!({})), sc("b", json!({"allowPrivilegeEscalation": true})),
                                  sc("c", json!({"allowPrivilegeEscalation": false}))]}),
            Some(("allowPrivilegeEscalation != false",
                  "containers \"a\", \"b\" must set securityContext.allowPrivilegeEscalation=false")),
        ),
        c(
            "capabilities drop ALL missing and bad add",
            r::capabilities,
            json!({"containers": [
                {"name": "a", "image": "i"},
                sc("b", json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "CHOWN"]}})),
                sc("c", json!({"capabilities": {"drop": ["NET_RAW"]}}))]}),
            Some(("unrestricted capabilities",
                  "containers \"a\", \"c\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"b\" must not include \"CHOWN\" in securityContext.capabilities.add")),
        ),
        c(
            "capabilities compliant",
            r::capabilities,
            json!({"containers": [sc("a", json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}))]}),
            None,
        ),
        c(
            "restricted volume types",
            r::volumes,
            json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "n", "nfs": {"server": "s", "path": "/"}},
                               {"name": "c", "configMap": {"name": "x"}}, {"name": "p", "persistentVolumeClaim": {"claimName": "x"}}]}),
            Some(("restricted volume types", "volumes \"h\", \"n\" use restricted volume types \"hostPath\", \"nfs\"")),
        ),
        c(
            "unknown volume type",
            r::volumes,
            json!({"volumes": [{"name": "x"}]}),
            Some(("restricted volume types", "volume \"x\" uses restricted volume type \"unknown\"")),
        ),
        c(
            "runAsNonRoot explicitly false",
            r::run_as_non_root,
            json!({"securityContext": {"runAsNonRoot": false}, "containers": [sc("a", json!({"runAsNonRoot": false}))]}),
            Some(("runAsNonRoot != true", "pod and container \"a\" must not set securityContext.runAsNonRoot=false")),
        ),
        c(
            "runAsNonRoot unset",
            r::run_as_non_root,
            json!({"containers": [sc("a", json!({})), sc("b", json!({"runAsNonRoot": true}))]}),
            Some(("runAsNonRoot != true", "pod or container \"a\" must set securityContext.runAsNonRoot=true")),
        ),
        c(
            "runAsNonRoot from the pod",
            r::run_as_non_root,
            json!({"securityContext": {"runAsNonRoot": true}, "containers": [sc("a", json!({}))]}),
            None,
        ),
        c(
            "runAsNonRoot relaxed in a user namespace (1.35+)",
            r::run_as_non_root_unless_user_namespace,
            json!({"hostUsers": false, "containers": [sc("a", json!({}))]}),
            None,
        ),
        c(
            "runAsUser 0",
            r::run_as_user,
            json!({"securityContext": {"runAsUser": 0}, "containers": [sc("a", json!({"runAsUser": 0})), sc("b", json!({"runAsUser": 1000}))]}),
            Some(("runAsUser=0", "pod and container \"a\" must not set runAsUser=0")),
        ),
        c(
            "seccomp required",
            r::seccomp_profile,
            json!({"containers": [sc("a", json!({})), sc("b", json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}))]}),
            Some(("seccompProfile",
                  "pod or container \"a\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"")),
        ),
        c(
            "seccomp explicit bad wins",
            r::seccomp_profile,
            json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                   "containers": [sc("a", json!({"seccompProfile": {"type": "Unconfined"}})), sc("b", json!({}))]}),
            Some(("seccompProfile", "container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\"")),
        ),
        c(
            "seccomp from the pod",
            r::seccomp_profile,
            json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}, "containers": [sc("a", json!({}))]}),
            None,
        ),
    ]);
}

/// The brief's example: a bare pod at restricted:latest, the whole message.
#[test]
fn a_bare_pod_at_restricted_reads_like_upstream() {
    let spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    let v = evaluate(
        LevelVersion {
            level: Level::Restricted,
            version: Version::Latest,
        },
        &json!({}),
        &spec,
    );
    assert_eq!(
        super::checks::details(&v),
        "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    // The same pod is baseline.
    let baseline = LevelVersion {
        level: Level::Baseline,
        version: Version::Latest,
    };
    assert!(evaluate(baseline, &json!({}), &spec).is_empty());
}
