//! API priority and fairness: the mandatory and suggested FlowSchemas and PriorityLevelConfigurations
//! exist with kubectl's columns, the API validates them, and a server out of seats answers 429 with
//! `Retry-After` instead of queueing — except for system:masters, which is exempt.

use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kiln_testkit::{rows, Cluster};
use kube::api::{Api, ListParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_control_objects_and_shedding() {
    let c = Cluster::start_with(&[
        "--max-requests-inflight=1",
        "--max-mutating-requests-inflight=1",
    ])
    .await;

    let fs = c.kubectl_ok(&["get", "flowschemas"]).await;
    let table = rows(&fs);
    assert_eq!(
        table[0],
        vec![
            "NAME",
            "PRIORITYLEVEL",
            "MATCHINGPRECEDENCE",
            "DISTINGUISHERMETHOD",
            "AGE",
            "MISSINGPL"
        ],
        "{fs}"
    );
    for name in [
        "exempt",
        "probes",
        "system-nodes",
        "service-accounts",
        "global-default",
        "catch-all",
    ] {
        assert!(table.iter().any(|r| r[0] == name), "{name} in {fs}");
    }
    let catch_all = table.iter().find(|r| r[0] == "catch-all").unwrap();
    assert_eq!(catch_all[1..4], ["catch-all", "10000", "ByUser"], "{fs}");
    let pl = c.kubectl_ok(&["get", "prioritylevelconfigurations"]).await;
    let table = rows(&pl);
    assert_eq!(
        table[0][..3],
        ["NAME", "TYPE", "NOMINALCONCURRENCYSHARES"],
        "{pl}"
    );
    let workload_low = table.iter().find(|r| r[0] == "workload-low").unwrap();
    assert_eq!(
        workload_low[1..6],
        ["Limited", "100", "128", "6", "50"],
        "{pl}"
    );
    assert!(
        table.iter().any(|r| r[0] == "exempt" && r[1] == "Exempt"),
        "{pl}"
    );

    // Validation as upstream.
    let bad = c.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: bad}\nspec:\n  matchingPrecedence: 20000\n  priorityLevelConfiguration: {name: global-default}\n",
    )
    .unwrap();
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "-f", bad.to_str().unwrap()],
        )
        .await;
    assert!(
        !ok && err.contains(
            "spec.matchingPrecedence: Invalid value: 20000: must be between 1 and 10000, inclusive"
        ),
        "{err}"
    );

    // Out of seats: a burst from an ordinary user meets 429 + Retry-After; the same burst from
    // system:masters is served whole.
    c.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "viewer",
        "--clusterrole=view",
        "--user=viewer",
    ])
    .await;
    // kube-rs retries 429s with back-off by default (what a shedding server wants of clients);
    // this client reports them, so the test sees what the server answered.
    let no_retry = |path: std::path::PathBuf| async move {
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    };
    let viewer = no_retry(c.kubeconfig_for("viewer", &[])).await;
    let burst = |client: kube::Client| async move {
        let cms: Api<ConfigMap> = Api::all(client);
        let results = join_all((0..200).map(|_| {
            let cms = cms.clone();
            async move { cms.list(&ListParams::default()).await }
        }))
        .await;
        let shed: Vec<String> = results
            .iter()
            .filter_map(|r| match r {
                Err(kube::Error::Api(e)) if e.code == 429 => {
                    Some(format!("{} {}", e.reason, e.message))
                }
                _ => None,
            })
            .collect();
        let other = results
            .iter()
            .filter(|r| matches!(r, Err(e) if !matches!(e, kube::Error::Api(a) if a.code == 429)))
            .count();
        (shed, other)
    };
    let (shed, other) = burst(viewer).await;
    assert_eq!(other, 0, "only 429s may fail");
    assert!(
        !shed.is_empty(),
        "200 concurrent lists through one seat: some are shed"
    );
    assert_eq!(
        shed[0],
        "TooManyRequests Too many requests, please try again later."
    );
    let (shed, other) = burst(no_retry(c.admin_kubeconfig.clone()).await).await;
    assert_eq!((shed.len(), other), (0, 0), "system:masters is exempt");
}
