//! The API server compacts the store's history every `--etcd-compaction-interval` (upstream's
//! compactor), so old continue tokens expire with 410 and upstream's inconsistent-continue token,
//! and the store records the round on `compact_rev_key`.

use k8s_openapi::api::core::v1::ConfigMap;
use kiln_testkit::{eventually_within, Cluster};
use kube::api::{Api, ListParams, PostParams};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_compacted_and_old_continue_tokens_expire() {
    let c = Cluster::start_with(&["--etcd-compaction-interval=1s"]).await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin().await, "default");
    for i in 0..6 {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("cm-{i}")}, "data": {"i": i.to_string()}
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    // Writes after the first page, so the page's revision falls behind the next compaction.
    let mut later: ConfigMap = api.get("cm-0").await.unwrap();
    later
        .data
        .get_or_insert_default()
        .insert("i".into(), "again".into());
    api.replace("cm-0", &PostParams::default(), &later)
        .await
        .unwrap();

    let expired = eventually_within(
        Duration::from_secs(30),
        "the continue token to expire",
        || {
            let api = api.clone();
            let token = token.clone();
            async move {
                match api
                    .list(&ListParams::default().limit(2).continue_token(&token))
                    .await
                {
                    Err(kube::Error::Api(e)) if e.code == 410 => Some(e),
                    _ => None,
                }
            }
        },
    )
    .await;
    assert_eq!(expired.reason, "Expired", "{expired:?}");
    assert!(
        expired.message.contains("continue"),
        "upstream's message names the continue parameter: {expired:?}"
    );

    // The 410's Status carries an inconsistent continue token: the rest of the list, from the same
    // key on, at the latest revision.
    let client = c.admin().await;
    let req = http::Request::get(format!(
        "/api/v1/namespaces/default/configmaps?limit=2&continue={token}"
    ))
    .body(Vec::new())
    .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(resp.status(), 410);
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let inconsistent = status["metadata"]["continue"]
        .as_str()
        .expect("an inconsistent continue token")
        .to_string();
    let rest = api
        .list(
            &ListParams::default()
                .limit(10)
                .continue_token(&inconsistent),
        )
        .await
        .unwrap();
    let names: Vec<String> = rest
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .filter(|n| n.starts_with("cm-"))
        .collect();
    assert_eq!(
        names,
        ["cm-2", "cm-3", "cm-4", "cm-5"],
        "the rest after the first page"
    );

    let mut etcd = c.etcd.client().await;
    let round = etcd.get("compact_rev_key", None).await.unwrap();
    let kv = round.kvs().first().expect("compact_rev_key written");
    assert!(kv.version() >= 2, "at least two rounds: {kv:?}");
}
