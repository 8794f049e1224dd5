//! `kubectl get pods -A` reads Table pages (`limit` + `continue`) that the server writes straight
//! from the stored bytes: every pod comes back exactly once across pages, in the same rows and
//! columns as one unpaged Table, each row's object the pod's metadata with its resourceVersion.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kiln_testkit::{rows, Cluster};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

async fn get_table(client: &kube::Client, uri: &str) -> Value {
    let req = http::Request::get(uri)
        .header(http::header::ACCEPT, TABLE)
        .body(Vec::new())
        .unwrap();
    serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_pages_hold_every_pod_once_with_kubectl_columns() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
    )
    .await
    .unwrap();
    let mut expected = BTreeSet::new();
    for (namespace, count) in [("default", 7), ("other", 6)] {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        for i in 0..count {
            let name = format!("p-{i:02}");
            let pod = json!({"metadata": {"name": name, "labels": {"i": i.to_string()}},
                             "spec": {"containers": [{"name": "c", "image": "kiln/pause:1"}]}});
            pods.create(
                &PostParams::default(),
                &serde_json::from_value(pod).unwrap(),
            )
            .await
            .unwrap();
            expected.insert((namespace.to_string(), name));
        }
    }
    // One pod with a status, so the wide columns have something to show.
    let status = json!({"status": {"phase": "Running", "podIP": "10.244.1.7",
        "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2, "image": "kiln/pause:1",
                               "imageID": "", "state": {"running": {}}}]}});
    Api::<Pod>::namespaced(client.clone(), "other")
        .patch_status("p-03", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();

    // kubectl in pages of 4: every pod exactly once, upstream's wide columns.
    let out = c
        .kubectl_ok(&["get", "pods", "-A", "-o", "wide", "--chunk-size=4"])
        .await;
    let table = rows(&out);
    assert_eq!(
        table[0],
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ]
    );
    let seen: Vec<(String, String)> = table[1..]
        .iter()
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    assert_eq!(seen.len(), expected.len(), "{out}");
    assert_eq!(seen.iter().cloned().collect::<BTreeSet<_>>(), expected);
    let running = table
        .iter()
        .find(|r| r[0] == "other" && r[1] == "p-03")
        .unwrap();
    assert_eq!(running[2..5], ["1/1", "Running", "2"], "{out}");
    assert_eq!(running[6], "10.244.1.7", "{out}");

    // The raw pages: at most `limit` rows each, together the unpaged Table's rows in order.
    let whole = get_table(&client, "/api/v1/pods").await;
    let mut paged_rows = Vec::new();
    let mut uri = "/api/v1/pods?limit=5".to_string();
    loop {
        let page = get_table(&client, &uri).await;
        assert_eq!(page["columnDefinitions"], whole["columnDefinitions"]);
        let page_rows = page["rows"].as_array().unwrap();
        assert!(page_rows.len() <= 5, "{page}");
        paged_rows.extend(page_rows.iter().cloned());
        match page["metadata"]["continue"].as_str() {
            Some(token) => {
                uri = format!(
                    "/api/v1/pods?limit=5&continue={}",
                    token.replace('=', "%3D")
                )
            }
            None => break,
        }
    }
    let cells =
        |rows: &[Value]| -> Vec<Value> { rows.iter().map(|r| r["cells"].clone()).collect() };
    let whole_rows = whole["rows"].as_array().unwrap();
    assert_eq!(paged_rows.len(), expected.len());
    assert_eq!(cells(&paged_rows), cells(whole_rows));
    let names: Vec<&str> = whole["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );

    // Each row's object: the pod's metadata as PartialObjectMetadata, resourceVersion included and
    // equal to the pod's own.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "other");
    let pod = pods.get("p-03").await.unwrap();
    let row = paged_rows
        .iter()
        .find(|r| {
            r["object"]["metadata"]["name"] == "p-03"
                && r["object"]["metadata"]["namespace"] == "other"
        })
        .unwrap();
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(
        row["object"]["metadata"]["resourceVersion"].as_str(),
        pod.metadata.resource_version.as_deref()
    );
    assert_eq!(row["object"]["metadata"]["labels"]["i"], "3");
    assert!(row["object"]["metadata"]["managedFields"].is_array());

    // A label selector still filters the pages, and includeObject=Object carries the whole pod.
    let selected = get_table(
        &client,
        "/api/v1/pods?labelSelector=i%3D3&limit=2&includeObject=Object",
    )
    .await;
    let mut found = selected["rows"].as_array().unwrap().clone();
    let mut token = selected["metadata"]["continue"]
        .as_str()
        .map(str::to_string);
    while let Some(t) = token {
        let page = get_table(
            &client,
            &format!(
                "/api/v1/pods?labelSelector=i%3D3&limit=2&includeObject=Object&continue={}",
                t.replace('=', "%3D")
            ),
        )
        .await;
        found.extend(page["rows"].as_array().unwrap().iter().cloned());
        token = page["metadata"]["continue"].as_str().map(str::to_string);
    }
    let spaces: BTreeSet<&str> = found
        .iter()
        .map(|r| r["object"]["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(spaces, BTreeSet::from(["default", "other"]));
    let whole_pod = found
        .iter()
        .find(|r| r["object"]["metadata"]["namespace"] == "other")
        .unwrap();
    assert_eq!(whole_pod["object"]["kind"], "Pod");
    assert_eq!(whole_pod["object"]["status"]["podIP"], "10.244.1.7");
    assert_eq!(
        whole_pod["object"]["metadata"]["resourceVersion"].as_str(),
        pod.metadata.resource_version.as_deref()
    );
    assert_eq!(
        whole_pod["object"]["spec"]["containers"][0]["image"],
        "kiln/pause:1"
    );
}
