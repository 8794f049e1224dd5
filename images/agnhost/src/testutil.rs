//! Helpers for the unit tests: a router served on 127.0.0.1 and a GET against it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;

pub async fn spawn_router(app: Router) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(crate::server::serve(l, None, app, std::future::pending()));
    addr
}

pub async fn get(addr: SocketAddr, path_and_query: &str) -> (u16, http::HeaderMap, String) {
    let a = crate::client::get(
        &format!("http://{addr}{path_and_query}"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    (
        a.status.as_u16(),
        a.headers,
        String::from_utf8_lossy(&a.body).into_owned(),
    )
}
