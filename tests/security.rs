//! Issue #25 on a real containerd: securityContext enforcement and private registry pulls, on one
//! 2-host lab (host1 the controller, host2 the worker) with real kubectl.
//! - securityContext: `drop: [ALL]` + `add: [NET_BIND_SERVICE]` is exactly what the container's PID 1
//!   holds (CapEff), `seccompProfile: RuntimeDefault` filters it (Seccomp: 2),
//!   `allowPrivilegeEscalation: false` sets NoNewPrivs, while a pod without a securityContext has none
//!   of these; runAsNonRoot with the (root) busybox image is a CreateContainerConfigError with upstream's
//!   message and `Failed` event; a Localhost profile that is not on the node fails the container.
//! - private registry: a second `docker-registry` on the lab gateway (port 5001, htpasswd auth) holds an
//!   image pushed with credentials; a pod without a pull secret stays in ErrImagePull / ImagePullBackOff,
//!   one with a `kubernetes.io/dockerconfigjson` secret runs, so does one whose ServiceAccount lists the
//!   secret (admission copies it into the pod), and a missing secret is warned about.
//! - QoS: `status.qosClass` of a Guaranteed, a Burstable and a BestEffort pod, their pod cgroups'
//!   values as upstream writes them, and the Guaranteed one OOMKilled past its memory limit,
//!   restarted, with `Reason: OOMKilled` and `Exit Code: 137` in `kubectl describe`.
//! - node allocatable: cluster.yaml's systemReserved and kubeReserved come off the node's allocatable
//!   and bound the `kubepods` cgroup.
//! - the kubelet's KubeletConfiguration: cluster.yaml's `kubelet.allowedUnsafeSysctls: [kernel.shm*]`
//!   reaches the kubelet only through `/etc/kiln/kubelet-config.yaml` (`--config`), and a pod setting
//!   kernel.shmmni runs while kernel.msgmax stays forbidden; the node's `status.features` and a
//!   container's `status.containerStatuses[].user` are left out, as upstream's kubelet leaves them, when
//!   the runtime (containerd 1.x) does not report them.
//!
//! The lab is `t-security`, or `$KILN_TEST_LAB` when set.

use std::process::{Child, Command, Stdio};

use kiln_tests::{ok, run, stdout, Cluster, TestLab};

const BUSYBOX: &str = "10.250.0.1:5000/kiln/busybox:1";
/// The authenticated registry: on the lab gateway only, beside the lab's own registry.
const PRIVATE_ADDR: &str = "10.250.0.1:5001";
const PRIVATE_IMAGE: &str = "10.250.0.1:5001/kiln/private:1";
const USER: &str = "puller";
const PASSWORD: &str = "lab-only-password";

/// The second registry, stopped with the test (it runs in place of its `ip netns exec`).
struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An htpasswd line with a bcrypt hash (the only kind the registry takes), by Python's crypt (the
/// system's libxcrypt does bcrypt), so the test needs no extra package.
fn htpasswd_line(user: &str, password: &str) -> String {
    let hash = ok(Command::new("python3").args([
        "-W",
        "ignore",
        "-c",
        "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
        password,
    ]));
    assert!(hash.starts_with("$2"), "not a bcrypt hash: {hash}");
    format!("{user}:{hash}\n")
}

fn start_private_registry(lab: &TestLab) -> Registry {
    let dir = lab.dir.join("private-registry");
    std::fs::create_dir_all(dir.join("storage")).unwrap();
    let htpasswd = dir.join("htpasswd");
    std::fs::write(&htpasswd, htpasswd_line(USER, PASSWORD)).unwrap();
    let cfg = dir.join("config.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nlog: {{ level: warn, accesslog: {{ disabled: true }} }}\nstorage:\n  \
             filesystem: {{ rootdirectory: {} }}\nhttp:\n  addr: {PRIVATE_ADDR}\nauth:\n  htpasswd:\n    \
             realm: kiln-lab\n    path: {}\n",
            dir.join("storage").display(),
            htpasswd.display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("registry.log")).unwrap();
    let child = lab
        .in_lab(&["docker-registry", "serve", cfg.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting docker-registry");
    let reg = Registry(child);
    // Up when it answers; anonymous access is refused (401), which is the point.
    for _ in 0..100 {
        let o = run(&mut lab.in_lab(&[
            "busybox",
            "wget",
            "-q",
            "-O-",
            &format!("http://{PRIVATE_ADDR}/v2/"),
        ]));
        if String::from_utf8_lossy(&o.stderr).contains("401") {
            return reg;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!(
        "the private registry did not come up: {}",
        std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
    );
}

/// Every host pulls from the private registry over plain HTTP, as they do from the lab's own
/// (containerd reads its certs.d hosts.toml at each pull).
fn trust_private_registry(lab: &TestLab) {
    let hosts_toml = format!(
        "server = \"http://{PRIVATE_ADDR}\"\n[host.\"http://{PRIVATE_ADDR}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    );
    for n in 1..=lab.hosts {
        lab.ssh_ok(
            &format!("host{n}"),
            &format!(
                "mkdir -p /etc/containerd/certs.d/{PRIVATE_ADDR} && printf '%s' '{hosts_toml}' > /etc/containerd/certs.d/{PRIVATE_ADDR}/hosts.toml"
            ),
        );
    }
}

fn push_private_image(lab: &TestLab) {
    let creds = format!("{USER}:{PASSWORD}");
    ok(&mut lab.in_lab(&[
        "skopeo",
        "copy",
        "-q",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--dest-creds",
        &creds,
        &format!("docker://{BUSYBOX}"),
        &format!("docker://{PRIVATE_IMAGE}"),
    ]));
    // The registry really wants the password: an anonymous copy fails.
    let o = run(&mut lab.in_lab(&[
        "skopeo",
        "inspect",
        "--tls-verify=false",
        &format!("docker://{PRIVATE_IMAGE}"),
    ]));
    assert!(!o.status.success(), "anonymous inspect must be refused");
}

fn apply(c: &Cluster, manifest: &str) {
    let file = c.lab.dir.join("security-manifest.yaml");
    std::fs::write(&file, manifest).unwrap();
    let o = run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "apply",
        "-f",
        file.to_str().unwrap(),
    ]));
    assert!(
        o.status.success(),
        "apply failed: {}\n{manifest}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn pod(name: &str, image: &str, pod_extra: &str, container_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n{pod_extra}  \
         containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: Always\n    \
         command: [sh, -c, 'cat /proc/1/status; sleep 3600']\n{container_extra}"
    )
}

fn jsonpath(c: &Cluster, what: &str, path: &str) -> String {
    c.try_kubectl(&["get", what, "-o", &format!("jsonpath={path}")])
        .unwrap_or_default()
}

/// Waits for the pod's container to be waiting with `reason`; returns its message.
fn wait_waiting(c: &Cluster, pod: &str, reason: &str) -> String {
    c.wait(&format!("{pod} waiting with {reason}"), 120, || {
        let got = jsonpath(
            c,
            &format!("pod/{pod}"),
            "{.status.containerStatuses[0].state.waiting.reason}|{.status.containerStatuses[0].state.waiting.message}",
        );
        match got.split_once('|') {
            Some((r, m)) if r == reason => Ok(m.to_string()),
            _ => Err(got),
        }
    })
}

fn wait_running(c: &Cluster, pod: &str) {
    c.wait(&format!("{pod} running"), 120, || {
        let s = jsonpath(
            c,
            &format!("pod/{pod}"),
            "{.status.containerStatuses[0].state}",
        );
        if s.contains("running") {
            Ok(())
        } else {
            Err(s)
        }
    });
}

/// The `Field:\tvalue` lines PID 1 printed from /proc/1/status.
fn proc_status(c: &Cluster, pod: &str) -> std::collections::HashMap<String, String> {
    wait_running(c, pod);
    let log = c.wait(&format!("{pod}'s log"), 60, || {
        let l = c.try_kubectl(&["logs", pod]).unwrap_or_default();
        if l.contains("NoNewPrivs") {
            Ok(l)
        } else {
            Err(l)
        }
    });
    log.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The masked paths of the pod's container as containerd made its OCI spec (`ctr containers info`
/// on the pod's node).
fn oci_spec_masked_paths(c: &Cluster, pod: &str) -> Vec<String> {
    let id = jsonpath(
        c,
        &format!("pod/{pod}"),
        "{.status.containerStatuses[0].containerID}",
    );
    let id = id.strip_prefix("containerd://").unwrap_or(&id).to_string();
    let node = jsonpath(c, &format!("pod/{pod}"), "{.spec.nodeName}");
    let info = c
        .lab
        .ssh_ok(&node, &format!("ctr -n k8s.io containers info {id}"));
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    v.pointer("/Spec/linux/maskedPaths")
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn events_of(c: &Cluster, name: &str) -> String {
    c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}",
    ])
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn security_contexts_and_private_registry_pulls_on_containerd() {
    let name = std::env::var("KILN_TEST_LAB").unwrap_or_else(|_| "t-security".into());
    let lab = TestLab::up(&name, 2, true);
    // One unsafe sysctl prefix allowed and some CPU and memory reserved, through cluster.yaml into
    // the kubelets' KubeletConfiguration.
    let file = lab.dir.join("cluster.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap().replacen(
        "  kubelet:\n",
        "  kubelet:\n    allowedUnsafeSysctls: [\"kernel.shm*\"]\n    \
         systemReserved: {cpu: 100m, memory: 256Mi}\n    kubeReserved: {memory: 128Mi}\n",
        1,
    );
    std::fs::write(&file, yaml).unwrap();
    let c = Cluster::on(lab, "");
    c.kiln(&["init", "--wait-timeout", "150"]);
    security_contexts(&c);
    node_reservations(&c);
    qos_and_oom(&c);
    let _registry = start_private_registry(&c.lab);
    push_private_image(&c.lab);
    trust_private_registry(&c.lab);
    private_pulls(&c);
}

fn security_contexts(c: &Cluster) {
    apply(c, &pod("plain", BUSYBOX, "", ""));
    apply(
        c,
        &pod(
            "hardened",
            BUSYBOX,
            "  securityContext:\n    seccompProfile:\n      type: RuntimeDefault\n",
            "    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n        \
             drop: [ALL]\n        add: [NET_BIND_SERVICE]\n",
        ),
    );
    let hardened = proc_status(c, "hardened");
    // NET_BIND_SERVICE is capability 10: exactly that bit, and nothing else.
    assert_eq!(hardened["CapEff"], "0000000000000400", "{hardened:?}");
    assert_eq!(hardened["CapBnd"], "0000000000000400", "{hardened:?}");
    assert_eq!(
        hardened["Seccomp"], "2",
        "RuntimeDefault filters: {hardened:?}"
    );
    assert_eq!(hardened["NoNewPrivs"], "1", "{hardened:?}");
    // The same image without a securityContext: the runtime's default capabilities, unconfined
    // (upstream's default without seccompDefault), privilege escalation allowed.
    let plain = proc_status(c, "plain");
    assert_ne!(plain["CapEff"], "0000000000000400", "{plain:?}");
    assert_ne!(plain["CapEff"], "0000000000000000", "{plain:?}");
    assert_eq!(plain["Seccomp"], "0", "{plain:?}");
    assert_eq!(plain["NoNewPrivs"], "0", "{plain:?}");

    // Upstream's masked paths reach the runtime (powercap is not in containerd's own defaults); a
    // privileged container (whose sandbox must then be privileged too) gets none.
    let masked = oci_spec_masked_paths(c, "plain");
    assert!(
        masked.contains(&"/sys/devices/virtual/powercap".to_string()),
        "{masked:?}"
    );
    apply(
        c,
        &pod(
            "privileged",
            BUSYBOX,
            "",
            "    securityContext:\n      privileged: true\n",
        ),
    );
    let privileged = proc_status(c, "privileged");
    // Every capability the node has (a lab host's bounding set is the kernel's less what the lab keeps).
    let node = jsonpath(c, "pod/privileged", "{.spec.nodeName}");
    let all = c
        .lab
        .ssh_ok(&node, "grep CapBnd /proc/self/status")
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    assert_eq!(privileged["CapEff"], all, "{privileged:?}");
    assert_eq!(oci_spec_masked_paths(c, "privileged"), Vec::<String>::new());

    // runAsNonRoot with an image that runs as root: not created, upstream's reason and message.
    apply(
        c,
        &pod(
            "nonroot",
            BUSYBOX,
            "  securityContext:\n    runAsNonRoot: true\n",
            "",
        ),
    );
    let message = wait_waiting(c, "nonroot", "CreateContainerConfigError");
    let uid = jsonpath(c, "pod/nonroot", "{.metadata.uid}");
    let want = format!(
        "container has runAsNonRoot and image will run as root (pod: \"nonroot_default({uid})\", container: c)"
    );
    assert_eq!(message, want);
    let events = events_of(c, "nonroot");
    assert!(
        events.contains(&format!("Warning Failed: Error: {want}")),
        "{events}"
    );
    // An explicit runAsUser 0 breaks the policy with its own message; a non-root one runs.
    apply(
        c,
        &pod(
            "nonroot-uid0",
            BUSYBOX,
            "  securityContext:\n    runAsNonRoot: true\n",
            "    securityContext:\n      runAsUser: 0\n",
        ),
    );
    let message = wait_waiting(c, "nonroot-uid0", "CreateContainerConfigError");
    assert!(
        message.starts_with(
            "container's runAsUser breaks non-root policy (pod: \"nonroot-uid0_default("
        ),
        "{message}"
    );
    apply(
        c,
        &pod(
            "nonroot-ok",
            BUSYBOX,
            "  securityContext:\n    runAsNonRoot: true\n    runAsUser: 1000\n",
            "",
        ),
    );
    let ok_status = proc_status(c, "nonroot-ok");
    assert!(ok_status["Uid"].starts_with("1000"), "{ok_status:?}");
    runtime_features_and_user(c, "nonroot-ok");

    // A Localhost profile that is not in the kubelet's seccomp dir: the runtime refuses the container.
    apply(
        c,
        &pod(
            "no-profile",
            BUSYBOX,
            "",
            "    securityContext:\n      seccompProfile:\n        type: Localhost\n        \
             localhostProfile: profiles/missing.json\n",
        ),
    );
    let message = wait_waiting(c, "no-profile", "CreateContainerError");
    assert!(
        message.contains("/var/lib/kiln/kubelet/seccomp/profiles/missing.json"),
        "{message}"
    );
    sysctls_and_apparmor(c);
    for p in [
        "plain",
        "hardened",
        "privileged",
        "nonroot",
        "nonroot-uid0",
        "nonroot-ok",
        "no-profile",
        "sysctl-safe",
        "sysctl-allowed",
        "sysctl-unsafe",
        "apparmor",
    ] {
        c.kubectl(&["delete", "pod", p, "--wait=false"]);
    }
}

/// The runtime's features and a container's user as upstream's kubelet reports them: from the CRI
/// runtime's Status and ContainerStatus when it reports them (containerd 2.0+), left out when it
/// does not (containerd 1.x, which the lab hosts run).
fn runtime_features_and_user(c: &Cluster, pod: &str) {
    // Read strictly: a failed read must not pass for "no runtime version".
    let get = |what: &str, path: &str| c.kubectl(&["get", what, "-o", &format!("jsonpath={path}")]);
    let node = get(&format!("pod/{pod}"), "{.spec.nodeName}");
    let runtime = get(
        &format!("node/{node}"),
        "{.status.nodeInfo.containerRuntimeVersion}",
    );
    let features = jsonpath(c, &format!("node/{node}"), "{.status.features}");
    let user = jsonpath(
        c,
        &format!("pod/{pod}"),
        "{.status.containerStatuses[0].user}",
    );
    if runtime.starts_with("containerd://1.") {
        assert_eq!(features, "", "{runtime} reports no features");
        assert_eq!(user, "", "{runtime} reports no container user");
    } else {
        let user: serde_json::Value = serde_json::from_str(&user).unwrap_or_else(|e| {
            panic!("{runtime} on {node}: containerStatuses[0].user {user:?}: {e}")
        });
        assert_eq!(user["linux"]["uid"], 1000, "{user}");
        assert!(features.contains("supplementalGroupsPolicy"), "{features}");
    }
}

/// A quantity as the kubelet writes capacity and allocatable (`16318712Ki`, `1900m`, `2`), in bytes
/// or millicores (`milli`: the unit-less number is cores).
fn quantity(q: &str, milli: bool) -> i64 {
    let (n, mul) = if let Some(n) = q.strip_suffix("Ki") {
        (n, 1 << 10)
    } else if let Some(n) = q.strip_suffix("Mi") {
        (n, 1 << 20)
    } else if let Some(n) = q.strip_suffix("Gi") {
        (n, 1 << 30)
    } else if let Some(n) = q.strip_suffix('m') {
        (n, 1)
    } else {
        (q, if milli { 1000 } else { 1 })
    };
    n.parse::<i64>()
        .unwrap_or_else(|_| panic!("quantity {q:?}"))
        * mul
}

/// cluster.yaml's systemReserved (cpu 100m, memory 256Mi) and kubeReserved (memory 128Mi), through the
/// KubeletConfiguration file: they come off the node's allocatable (the lab's evictionHard has no
/// memory signal, so nothing else does) and bound the `kubepods` cgroup, as upstream's
/// `--enforce-node-allocatable=pods`.
fn node_reservations(c: &Cluster) {
    let node = |path: &str| jsonpath(c, "node/host2", path);
    let cap_mem = quantity(&node("{.status.capacity.memory}"), false);
    let alloc_mem = quantity(&node("{.status.allocatable.memory}"), false);
    assert_eq!(
        cap_mem - alloc_mem,
        384 << 20,
        "memory: {cap_mem} - {alloc_mem}"
    );
    let cap_cpu = quantity(&node("{.status.capacity.cpu}"), true);
    let alloc_cpu = quantity(&node("{.status.allocatable.cpu}"), true);
    assert_eq!(cap_cpu - alloc_cpu, 100, "cpu: {cap_cpu} - {alloc_cpu}");
    let v2 = c
        .lab
        .ssh_ok(
            "host2",
            "test -f /sys/fs/cgroup/cgroup.controllers && echo v2; true",
        )
        .trim()
        == "v2";
    let file = if v2 {
        "/sys/fs/cgroup/kubepods/memory.max"
    } else {
        "/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes"
    };
    let limit: i64 = c
        .lab
        .ssh_ok("host2", &format!("cat {file}"))
        .trim()
        .parse()
        .unwrap();
    // The kernel keeps whole pages.
    let want = cap_mem - (384 << 20);
    assert_eq!(
        limit,
        want / 4096 * 4096,
        "{file}: {limit}, capacity {cap_mem}"
    );
}

/// Waits for the pod to be Failed; returns `reason|message`.
fn wait_failed(c: &Cluster, pod: &str) -> String {
    c.wait(&format!("{pod} failed"), 120, || {
        let got = jsonpath(
            c,
            &format!("pod/{pod}"),
            "{.status.phase}|{.status.reason}|{.status.message}",
        );
        match got.split_once('|') {
            Some(("Failed", rest)) => Ok(rest.to_string()),
            _ => Err(got),
        }
    })
}

/// The kubelet's sysctl and AppArmor admission: a safe sysctl runs, an unsafe one (not in
/// --allowed-unsafe-sysctls) fails the pod with upstream's reason and message; a pod asking for an
/// AppArmor profile runs where the host enforces AppArmor and fails with reason AppArmor elsewhere.
fn sysctls_and_apparmor(c: &Cluster) {
    let sysctl = |name: &str, value: &str| {
        format!("  securityContext:\n    sysctls:\n    - name: {name}\n      value: \"{value}\"\n")
    };
    apply(
        c,
        &pod(
            "sysctl-safe",
            BUSYBOX,
            &sysctl("net.ipv4.ip_unprivileged_port_start", "0"),
            "",
        ),
    );
    wait_running(c, "sysctl-safe");
    let got = c.kubectl(&[
        "exec",
        "sysctl-safe",
        "--",
        "cat",
        "/proc/sys/net/ipv4/ip_unprivileged_port_start",
    ]);
    assert_eq!(got.trim(), "0");
    apply(
        c,
        &pod(
            "sysctl-unsafe",
            BUSYBOX,
            &sysctl("kernel.msgmax", "65536"),
            "",
        ),
    );
    // kernel.shm* is allowed by cluster.yaml's kubelet.allowedUnsafeSysctls, which reaches the
    // kubelet only through its KubeletConfiguration file (no flag says so).
    let node = jsonpath(c, "pod/sysctl-safe", "{.spec.nodeName}");
    let cmdline = c.lab.ssh_ok(
        &node,
        "tr '\\0' ' ' < /proc/$(pgrep -x kiln-kubelet | head -1)/cmdline",
    );
    assert!(
        cmdline.contains("--config=/etc/kiln/kubelet-config.yaml")
            && !cmdline.contains("--allowed-unsafe-sysctls"),
        "{cmdline}"
    );
    apply(
        c,
        &pod(
            "sysctl-allowed",
            BUSYBOX,
            &sysctl("kernel.shmmni", "8192"),
            "",
        ),
    );
    wait_running(c, "sysctl-allowed");
    let got = c.kubectl(&[
        "exec",
        "sysctl-allowed",
        "--",
        "cat",
        "/proc/sys/kernel/shmmni",
    ]);
    assert_eq!(got.trim(), "8192");
    assert_eq!(
        wait_failed(c, "sysctl-unsafe"),
        "SysctlForbidden|Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted"
    );
    let events = events_of(c, "sysctl-unsafe");
    assert!(
        events.contains(
            "Warning SysctlForbidden: forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        ),
        "{events}"
    );
    apply(
        c,
        &pod(
            "apparmor",
            BUSYBOX,
            "",
            "    securityContext:\n      appArmorProfile:\n        type: RuntimeDefault\n",
        ),
    );
    let node = c.wait("apparmor scheduled", 60, || {
        let n = jsonpath(c, "pod/apparmor", "{.spec.nodeName}");
        if n.is_empty() {
            Err(n)
        } else {
            Ok(n)
        }
    });
    // What the kubelet reads (runc's check): securityfs has AppArmor and the module says Y.
    let enabled = c
        .lab
        .ssh(
            &node,
            "test -d /sys/kernel/security/apparmor && cat /sys/module/apparmor/parameters/enabled",
        )
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().starts_with('Y'))
        .unwrap_or(false);
    if enabled {
        wait_running(c, "apparmor");
    } else {
        assert_eq!(
            wait_failed(c, "apparmor"),
            "AppArmor|Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"
        );
    }
}

/// QoS classes through the whole cluster: the API server sets `status.qosClass`, the kubelet on
/// host2 puts each pod's cgroup under its class with upstream's values (Guaranteed at the top of
/// kubepods with the pod's limits, Burstable with shares from its request, BestEffort with 2
/// shares), and a container past its memory limit is OOMKilled, restarted, and `kubectl describe`
/// says so as upstream's does.
fn qos_and_oom(c: &Cluster) {
    let resources = |r: &str| format!("    resources:\n{r}");
    apply(
        c,
        &pod(
            "guaranteed",
            BUSYBOX,
            "",
            &resources("      limits: {memory: 32Mi, cpu: 200m}\n"),
        )
        // Past its limit: tail buffers a line that never ends.
        .replace(
            "cat /proc/1/status; sleep 3600",
            "sleep 2; exec tail /dev/zero",
        ),
    );
    apply(
        c,
        &pod(
            "burstable",
            BUSYBOX,
            "",
            &resources("      requests: {cpu: 50m}\n"),
        ),
    );
    apply(c, &pod("besteffort", BUSYBOX, "", ""));
    for (p, class) in [
        ("guaranteed", "Guaranteed"),
        ("burstable", "Burstable"),
        ("besteffort", "BestEffort"),
    ] {
        assert_eq!(
            jsonpath(c, &format!("pod/{p}"), "{.status.qosClass}"),
            class
        );
    }
    wait_running(c, "burstable");
    wait_running(c, "besteffort");
    let describe = c.wait("guaranteed OOMKilled and restarted", 180, || {
        let d = c.kubectl(&["describe", "pod", "guaranteed"]);
        // kubectl aligns the values with spaces: compare with single spaces.
        let flat = d.split_whitespace().collect::<Vec<_>>().join(" ");
        if flat.contains("Last State: Terminated Reason: OOMKilled Exit Code: 137")
            && !flat.contains("Restart Count: 0")
        {
            Ok(d)
        } else {
            Err(d)
        }
    });
    assert!(describe.contains("QoS Class:"), "{describe}");
    assert_eq!(
        jsonpath(
            c,
            "pod/guaranteed",
            "{.status.containerStatuses[0].lastState.terminated.reason}/{.status.containerStatuses[0].lastState.terminated.exitCode}"
        ),
        "OOMKilled/137"
    );
    // cgroupfs: kubepods/[class/]pod<uid> under each v1 controller, or in the v2 tree.
    let cgroup = |p: &str, class: &str, v1: &str, v2: &str| {
        let uid = jsonpath(c, &format!("pod/{p}"), "{.metadata.uid}");
        let dir = format!("kubepods/{class}pod{uid}");
        c.lab
            .ssh_ok(
                &jsonpath(c, &format!("pod/{p}"), "{.spec.nodeName}"),
                &match v1.split_once('/') {
                    // v1: /sys/fs/cgroup/<controller>/kubepods/…/<file>.
                    Some((controller, file)) => {
                        format!("cat /sys/fs/cgroup/{controller}/{dir}/{file}")
                    }
                    None => format!("cat /sys/fs/cgroup/{dir}/{v2}"),
                },
            )
            .trim()
            .to_string()
    };
    let v2 = c
        .lab
        .ssh_ok(
            "host2",
            "test -f /sys/fs/cgroup/cgroup.controllers && echo v2; true",
        )
        .trim()
        == "v2";
    if v2 {
        assert_eq!(cgroup("guaranteed", "", "", "memory.max"), "33554432");
        assert_eq!(cgroup("guaranteed", "", "", "cpu.max"), "20000 100000");
    } else {
        assert_eq!(
            cgroup("guaranteed", "", "memory/memory.limit_in_bytes", ""),
            "33554432"
        );
        assert_eq!(
            cgroup("guaranteed", "", "cpu/cpu.cfs_quota_us", ""),
            "20000"
        );
        assert_eq!(cgroup("guaranteed", "", "cpu/cpu.shares", ""), "204");
        // 50m: 50 × 1024 / 1000 shares; no limit, no quota.
        assert_eq!(
            cgroup("burstable", "burstable/", "cpu/cpu.shares", ""),
            "51"
        );
        assert_eq!(
            cgroup("burstable", "burstable/", "cpu/cpu.cfs_quota_us", ""),
            "-1"
        );
        assert_eq!(
            cgroup("besteffort", "besteffort/", "cpu/cpu.shares", ""),
            "2"
        );
    }

    for p in ["guaranteed", "burstable", "besteffort"] {
        c.kubectl(&["delete", "pod", p, "--wait=false"]);
    }
}

fn private_pulls(c: &Cluster) {
    // No credentials: the registry refuses the pull; ErrImagePull, then the back-off.
    // (ErrImagePull shows until the next sync, so it is checked in the events, which stay.)
    apply(c, &pod("anonymous", PRIVATE_IMAGE, "", ""));
    let message = wait_waiting(c, "anonymous", "ImagePullBackOff");
    assert_eq!(
        message,
        format!("Back-off pulling image \"{PRIVATE_IMAGE}\"")
    );
    let events = events_of(c, "anonymous");
    assert!(
        events.contains("Warning Failed: Error: ErrImagePull"),
        "{events}"
    );
    let refused = events
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "Warning Failed: Failed to pull image \"{PRIVATE_IMAGE}\": "
            ))
        })
        .unwrap_or_else(|| panic!("no pull failure event: {events}"));
    assert!(refused.contains("401 Unauthorized"), "{refused}");

    // A dockerconfigjson secret for the registry: the pull authenticates and the pod runs.
    c.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        "regcred",
        &format!("--docker-server={PRIVATE_ADDR}"),
        &format!("--docker-username={USER}"),
        &format!("--docker-password={PASSWORD}"),
    ]);
    assert_eq!(
        jsonpath(c, "secret/regcred", "{.type}"),
        "kubernetes.io/dockerconfigjson"
    );
    apply(
        c,
        &pod(
            "with-secret",
            PRIVATE_IMAGE,
            "  imagePullSecrets:\n  - name: nosuch\n  - name: regcred\n",
            "",
        ),
    );
    wait_running(c, "with-secret");
    // The missing one is named, on the pod.
    let events = c.wait("the missing pull secret's warning", 30, || {
        let e = events_of(c, "with-secret");
        if e.contains("FailedToRetrieveImagePullSecret") {
            Ok(e)
        } else {
            Err(e)
        }
    });
    assert!(
        events.contains(
            "Warning FailedToRetrieveImagePullSecret: Unable to retrieve some image pull secrets (nosuch); attempting to pull the image may not succeed."
        ),
        "{events}"
    );

    // Through a ServiceAccount: admission copies its imagePullSecrets into the pod.
    c.kubectl(&["create", "serviceaccount", "puller"]);
    c.kubectl(&[
        "patch",
        "serviceaccount",
        "puller",
        "-p",
        "{\"imagePullSecrets\": [{\"name\": \"regcred\"}]}",
    ]);
    apply(
        c,
        &pod(
            "via-sa",
            PRIVATE_IMAGE,
            "  serviceAccountName: puller\n",
            "",
        ),
    );
    assert_eq!(
        jsonpath(c, "pod/via-sa", "{.spec.imagePullSecrets[*].name}"),
        "regcred"
    );
    wait_running(c, "via-sa");

    // The image is on the node now, but Always pulls again: still refused without credentials.
    let waiting = jsonpath(
        c,
        "pod/anonymous",
        "{.status.containerStatuses[0].state.waiting.reason}",
    );
    assert!(
        waiting == "ImagePullBackOff" || waiting == "ErrImagePull",
        "{waiting}"
    );
    // The kubelet never logs the password.
    let o = run(&mut c.lab.ssh(
        "host2",
        &format!("grep -rl -- '{PASSWORD}' /var/log/kiln 2>/dev/null | head -1"),
    ));
    assert_eq!(stdout(&o), "", "a kubelet log holds the registry password");
}
