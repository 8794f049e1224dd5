//! Container lifecycle hooks (postStart, preStop): `exec` through CRI ExecSync, `httpGet` from the node to
//! the pod IP (like upstream, any HTTP answer counts as done: only a failed request is a failure), and
//! `sleep`. `tcpSocket` is deprecated and not a runnable handler: upstream fails such a hook at runtime
//! ("Cannot run handler"), and so does this, with a warning in the log.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use super::api::CriApi;
use super::http_get::{http_get, Scheme};
use super::probe;

/// Runs `h` for container `id`; `limit` bounds it (None: no bound of its own, as upstream's postStart).
/// The error is the description upstream puts after "failed - error: " in the hook's event.
pub async fn run(
    h: &LifecycleHandler,
    c: &Container,
    id: &str,
    pod_ip: Option<&str>,
    cri: &dyn CriApi,
    limit: Option<Duration>,
) -> Result<(), String> {
    let work = run_unbounded(h, c, id, pod_ip, cri, limit);
    match limit {
        Some(l) => tokio::time::timeout(l, work)
            .await
            .unwrap_or_else(|_| Err(format!("did not complete within {}s", l.as_secs()))),
        None => work.await,
    }
}

async fn run_unbounded(
    h: &LifecycleHandler,
    c: &Container,
    id: &str,
    pod_ip: Option<&str>,
    cri: &dyn CriApi,
    limit: Option<Duration>,
) -> Result<(), String> {
    if let Some(exec) = &h.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        // 0: no timeout in CRI ExecSync.
        let timeout = limit.map(|l| l.as_secs().max(1) as i64).unwrap_or(0);
        let r = cri
            .exec_sync(id, cmd.clone(), timeout)
            .await
            .map_err(|e| e.to_string())?;
        if r.exit_code == 0 {
            return Ok(());
        }
        let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
        out.push_str(&String::from_utf8_lossy(&r.stderr));
        return Err(format!(
            "command '{}' exited with {}: {}",
            cmd.join(" "),
            r.exit_code,
            out.trim()
        ));
    }
    if let Some(http) = &h.http_get {
        let port = probe::port_of(&http.port, c)?;
        let scheme = Scheme::parse(http.scheme.as_deref())?;
        let host = http.host.as_deref().or(pod_ip).unwrap_or("127.0.0.1");
        let path = http.path.as_deref().unwrap_or("/");
        let headers: String = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| format!("{}: {}\r\n", h.name, h.value))
            .collect();
        return http_get(scheme, host, port, path, &headers)
            .await
            .map(|_| ())
            .map_err(|e| format!("Get \"{}://{host}:{port}{path}\": {e}", scheme.as_str()));
    }
    if let Some(sleep) = &h.sleep {
        tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
        return Ok(());
    }
    if h.tcp_socket.is_some() {
        tracing::warn!(container = %c.name, "lifecycle hook: tcpSocket is deprecated and cannot be run");
    }
    Err("Cannot run handler: invalid handler (only exec, httpGet and sleep run)".into())
}

/// What the hook was, as upstream names it in the event: `Exec lifecycle hook ([cmd])` or
/// `HTTP lifecycle hook (path)`.
pub fn describe(h: &LifecycleHandler) -> String {
    if let Some(exec) = &h.exec {
        format!(
            "Exec lifecycle hook ({:?})",
            exec.command.clone().unwrap_or_default()
        )
    } else if let Some(http) = &h.http_get {
        format!(
            "HTTP lifecycle hook ({})",
            http.path.as_deref().unwrap_or("/")
        )
    } else if h.sleep.is_some() {
        "Sleep lifecycle hook".into()
    } else {
        "Lifecycle hook".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cri::fake::FakeCri;

    fn handler(json: serde_json::Value) -> LifecycleHandler {
        serde_json::from_value(json).unwrap()
    }

    fn ctr() -> Container {
        Container {
            name: "main".into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn exec_hooks_succeed_on_zero_and_fail_with_the_exit_code() {
        let cri = FakeCri::default();
        let h = handler(serde_json::json!({"exec": {"command": ["sh", "-c", "echo hi"]}}));
        assert_eq!(run(&h, &ctr(), "c1", None, &cri, None).await, Ok(()));
        cri.st().exec_results.push_back(3);
        let err = run(&h, &ctr(), "c1", None, &cri, Some(Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert!(err.contains("exited with 3"), "{err}");
        assert_eq!(
            cri.calls(),
            vec!["ExecSync c1 sh -c echo hi", "ExecSync c1 sh -c echo hi"]
        );
    }

    #[tokio::test]
    async fn http_hooks_need_an_answer_not_a_good_status() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 500 Oops\r\n\r\n").await;
            }
        });
        let cri = FakeCri::default();
        let h = handler(serde_json::json!({"httpGet": {"path": "/hook", "port": port}}));
        assert_eq!(
            run(&h, &ctr(), "c1", Some("127.0.0.1"), &cri, None).await,
            Ok(())
        );
        // Nothing listens on port 1.
        let down = handler(serde_json::json!({"httpGet": {"path": "/hook", "port": 1}}));
        let err = run(&down, &ctr(), "c1", Some("127.0.0.1"), &cri, None)
            .await
            .unwrap_err();
        assert!(err.starts_with("Get \"http://127.0.0.1:1/hook\""), "{err}");
    }

    #[tokio::test]
    async fn tcp_socket_hooks_fail_as_upstream_and_sleep_is_bounded() {
        let cri = FakeCri::default();
        let tcp = handler(serde_json::json!({"tcpSocket": {"port": 80}}));
        assert!(run(&tcp, &ctr(), "c1", None, &cri, None)
            .await
            .unwrap_err()
            .contains("Cannot run handler"));
        let sleep = handler(serde_json::json!({"sleep": {"seconds": 100}}));
        let err = run(
            &sleep,
            &ctr(),
            "c1",
            None,
            &cri,
            Some(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
        assert!(err.contains("within 1s"), "{err}");
    }
}
