//! Batch workloads on a 2-host lab with real kubectl: a Job of 5 completions at parallelism 2, a
//! failing Job stopped at its backoffLimit, an Indexed Job whose pods see their index and hostname,
//! per-index retry limits, podgc collecting a pod whose node does not exist,
//! a TTL'd Job deleted after it finished, suspend and resume, a Job that converges when the
//! controller manager is killed mid-run (never more completions than asked), and bad input refused
//! with upstream's field errors.

use kiln_tests::{run, stdout, Cluster, TestLab};

const BUSYBOX: &str = "10.250.0.1:5000/kiln/busybox:1";

fn job(name: &str, spec: &str, script: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n{spec}  template:\n    spec:\n      \
         restartPolicy: Never\n      containers:\n      - name: c\n        image: {BUSYBOX}\n        \
         command: [sh, -c, '{script}']\n"
    )
}

fn apply(c: &Cluster, manifest: &str) -> std::process::Output {
    let file = c.lab.dir.join("manifest.yaml");
    std::fs::write(&file, manifest).unwrap();
    run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "apply",
        "-f",
        file.to_str().unwrap(),
    ]))
}

fn jsonpath(c: &Cluster, what: &str, path: &str) -> String {
    c.try_kubectl(&["get", what, "-o", &format!("jsonpath={path}")])
        .unwrap_or_default()
}

fn wait_condition(c: &Cluster, job: &str, condition: &str) {
    c.kubectl(&[
        "wait",
        &format!("--for=condition={condition}"),
        &format!("job/{job}"),
        "--timeout=180s",
    ]);
}

fn pods_of(c: &Cluster, job: &str) -> Vec<String> {
    c.kubectl(&[
        "get",
        "pods",
        "-l",
        &format!("batch.kubernetes.io/job-name={job}"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn jobs_run_to_completion_fail_at_their_limit_and_survive_a_controller_restart() {
    let lab = TestLab::up("t-batch", 2, true);
    let c = Cluster::on(lab, "");
    c.kiln(&["init", "--wait-timeout", "150"]);
    // A pod bound to a node that does not exist: podgc collects it while the rest runs.
    let ghost = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ghost\nspec:\n  nodeName: ghost-node\n  \
         containers:\n  - name: c\n    image: {BUSYBOX}\n"
    );
    let o = apply(&c, &ghost);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // 5 completions, 2 at a time: Complete with exactly 5 succeeded pods, as `kubectl get` shows.
    let o = apply(
        &c,
        &job("five", "  completions: 5\n  parallelism: 2\n", "sleep 1"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_condition(&c, "five", "complete");
    let pods = pods_of(&c, "five");
    assert_eq!(pods.len(), 5, "{pods:?}");
    assert!(pods.iter().all(|p| p.ends_with(" Succeeded")), "{pods:?}");
    let row = c.kubectl(&["get", "job", "five", "--no-headers"]);
    assert!(row.contains("Complete") && row.contains("5/5"), "{row}");
    assert_eq!(
        jsonpath(
            &c,
            "job/five",
            "{.status.conditions[?(@.type==\"Complete\")].reason}"
        ),
        "CompletionsReached"
    );

    // backoffLimit 1: two failed pods, then Failed with BackoffLimitExceeded and its event.
    apply(&c, &job("failing", "  backoffLimit: 1\n", "exit 3"));
    wait_condition(&c, "failing", "failed");
    assert_eq!(
        jsonpath(
            &c,
            "job/failing",
            "{.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "BackoffLimitExceeded"
    );
    assert_eq!(jsonpath(&c, "job/failing", "{.status.failed}"), "2");
    let events = c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=failing",
    ]);
    assert!(
        events.contains("Job has reached the specified backoff limit"),
        "{events}"
    );

    // Indexed: each pod sees its index in JOB_COMPLETION_INDEX and is named <job>-<index>.
    apply(
        &c,
        &job(
            "indexed",
            "  completions: 3\n  parallelism: 3\n  completionMode: Indexed\n",
            "echo index=$JOB_COMPLETION_INDEX host=$(hostname)",
        ),
    );
    wait_condition(&c, "indexed", "complete");
    assert_eq!(
        jsonpath(&c, "job/indexed", "{.status.completedIndexes}"),
        "0-2"
    );
    let mut seen = Vec::new();
    for line in pods_of(&c, "indexed") {
        let pod = line.split_whitespace().next().unwrap().to_string();
        let index = jsonpath(
            &c,
            &format!("pod/{pod}"),
            "{.metadata.annotations.batch\\.kubernetes\\.io/job-completion-index}",
        );
        let log = c.kubectl(&["logs", &pod]);
        assert_eq!(
            log.trim(),
            format!("index={index} host=indexed-{index}"),
            "{pod}"
        );
        seen.push(index);
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"]);

    // backoffLimitPerIndex 1: odd indexes fail twice each and are marked failed, even ones
    // succeed; every index runs, and the Job fails with FailedIndexes.
    apply(
        &c,
        &job(
            "per-index",
            "  completions: 4\n  parallelism: 2\n  completionMode: Indexed\n  backoffLimitPerIndex: 1\n",
            "exit $((JOB_COMPLETION_INDEX % 2))",
        ),
    );
    wait_condition(&c, "per-index", "failed");
    assert_eq!(
        jsonpath(
            &c,
            "job/per-index",
            "{.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "FailedIndexes"
    );
    assert_eq!(
        jsonpath(&c, "job/per-index", "{.status.failedIndexes}"),
        "1,3"
    );
    assert_eq!(
        jsonpath(&c, "job/per-index", "{.status.completedIndexes}"),
        "0,2"
    );
    assert_eq!(jsonpath(&c, "job/per-index", "{.status.failed}"), "4");
    assert_eq!(jsonpath(&c, "job/per-index", "{.status.succeeded}"), "2");

    // ttlSecondsAfterFinished: the finished Job goes, its pod with it.
    apply(&c, &job("ttl", "  ttlSecondsAfterFinished: 2\n", "true"));
    c.wait("the TTL'd job deleted", 120, || {
        match c.try_kubectl(&["get", "job", "ttl", "--ignore-not-found", "-o", "name"]) {
            Some(s) if s.trim().is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    c.wait("the TTL'd job's pod deleted", 120, || {
        let left = pods_of(&c, "ttl");
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });

    // Suspended: the Suspended condition and no pods; resumed: it runs to completion.
    apply(
        &c,
        &job("paused", "  suspend: true\n  completions: 2\n", "true"),
    );
    wait_condition(&c, "paused", "suspended");
    assert!(pods_of(&c, "paused").is_empty());
    c.kubectl(&[
        "patch",
        "job",
        "paused",
        "--type=merge",
        "-p",
        "{\"spec\":{\"suspend\":false}}",
    ]);
    wait_condition(&c, "paused", "complete");
    assert_eq!(
        jsonpath(
            &c,
            "job/paused",
            "{.status.conditions[?(@.type==\"Suspended\")].reason}"
        ),
        "JobResumed"
    );

    // The controller manager killed while a Job runs: after its restart (the kubelet restarts the
    // static pod) the Job completes with exactly its 6 completions — nothing lost, nothing doubled.
    apply(
        &c,
        &job("steady", "  completions: 6\n  parallelism: 2\n", "sleep 2"),
    );
    c.wait("the first pods of job steady", 120, || {
        let n = pods_of(&c, "steady").len();
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} pods"))
        }
    });
    c.lab.ssh_ok("host1", "kill $(pgrep -x kiln-controller)");
    wait_condition(&c, "steady", "complete");
    let pods = pods_of(&c, "steady");
    assert_eq!(pods.len(), 6, "{pods:?}");
    assert_eq!(jsonpath(&c, "job/steady", "{.status.succeeded}"), "6");

    // podgc: the pod of the node that does not exist is gone (after its quarantine).
    c.wait(
        "podgc to delete the pod bound to a missing node",
        180,
        || match c.try_kubectl(&["get", "pod", "ghost", "--ignore-not-found", "-o", "name"]) {
            Some(s) if s.trim().is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // Bad input: upstream's field errors, nothing created.
    let o = apply(&c, &job("negative", "  completions: -1\n", "true"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("spec.completions: Invalid value: -1: must be greater than or equal to 0"),
        "{err}"
    );
    let always = job("always", "", "true").replace("restartPolicy: Never", "restartPolicy: Always");
    let o = apply(&c, &always);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
        ),
        "{err}"
    );
    let o = run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "patch",
        "job",
        "five",
        "--type=merge",
        "-p",
        "{\"spec\":{\"completions\":9}}",
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("spec.completions: Invalid value: 9: field is immutable"),
        "{err}{}",
        stdout(&o)
    );
}
