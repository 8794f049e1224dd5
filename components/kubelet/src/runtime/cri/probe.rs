//! Container probes (liveness, readiness): httpGet and tcpSocket from the node to the pod IP, exec through
//! CRI ExecSync; and the per-probe bookkeeping (initial delay, period, thresholds) as a pure state machine.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::net::TcpStream;

use super::api::CriApi;
use super::http_get::{http_get, Scheme};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(String),
}

/// The probe's timing and thresholds with the API defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(p: &Probe) -> Self {
        let secs =
            |v: Option<i32>, default: i32| Duration::from_secs(v.unwrap_or(default).max(0) as u64);
        Timing {
            initial_delay: secs(p.initial_delay_seconds, 0),
            period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// One probe of one container run. `result` is the probe's verdict so far: readiness starts false
/// (not ready until it succeeds), liveness starts true (alive until proven otherwise).
#[derive(Debug, Clone)]
pub struct ProbeState {
    pub timing: Timing,
    next_at: Instant,
    successes: u32,
    failures: u32,
    pub result: bool,
    pub last_failure: Option<String>,
}

impl ProbeState {
    pub fn new(p: &Probe, started: Instant, initial: bool) -> Self {
        let timing = Timing::of(p);
        ProbeState {
            timing,
            next_at: started + timing.initial_delay,
            successes: 0,
            failures: 0,
            result: initial,
            last_failure: None,
        }
    }

    pub fn due(&self, now: Instant) -> bool {
        now >= self.next_at
    }

    /// Records an outcome; returns true when the verdict changed.
    pub fn record(&mut self, now: Instant, outcome: Outcome) -> bool {
        self.next_at = now + self.timing.period;
        let before = self.result;
        match outcome {
            Outcome::Success => {
                self.failures = 0;
                self.successes += 1;
                if self.successes >= self.timing.success_threshold {
                    self.result = true;
                }
            }
            Outcome::Failure(msg) => {
                self.successes = 0;
                self.failures += 1;
                self.last_failure = Some(msg);
                if self.failures >= self.timing.failure_threshold {
                    self.result = false;
                }
            }
        }
        before != self.result
    }
}

pub(super) fn port_of(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("no container port named {name:?}")),
    }
}

/// Runs one probe against a container. Errors of the probe itself (bad port name, unsupported kind) are
/// failures, as the kubelet reports them.
pub async fn run(
    p: &Probe,
    c: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
    cri: &dyn CriApi,
) -> Outcome {
    let timeout = Timing::of(p).timeout;
    if let Some(exec) = &p.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        return match cri
            .exec_sync(container_id, cmd, timeout.as_secs() as i64)
            .await
        {
            Ok(r) if r.exit_code == 0 => Outcome::Success,
            Ok(r) => Outcome::Failure(format!(
                "exec probe exited {}: {}",
                r.exit_code,
                String::from_utf8_lossy(&r.stdout).trim()
            )),
            Err(e) => Outcome::Failure(format!("exec probe: {e}")),
        };
    }
    if let Some(tcp) = &p.tcp_socket {
        let port = match port_of(&tcp.port, c) {
            Ok(p) => p,
            Err(e) => return Outcome::Failure(e),
        };
        let host = tcp
            .host
            .as_deref()
            .or(pod_ip)
            .unwrap_or("127.0.0.1")
            .to_string();
        return match tokio::time::timeout(timeout, TcpStream::connect((host.as_str(), port))).await
        {
            Ok(Ok(_)) => Outcome::Success,
            Ok(Err(e)) => Outcome::Failure(format!("dial tcp {host}:{port}: {e}")),
            Err(_) => Outcome::Failure(format!("dial tcp {host}:{port}: timeout")),
        };
    }
    if let Some(http) = &p.http_get {
        let port = match port_of(&http.port, c) {
            Ok(p) => p,
            Err(e) => return Outcome::Failure(e),
        };
        let scheme = match Scheme::parse(http.scheme.as_deref()) {
            Ok(s) => s,
            Err(e) => return Outcome::Failure(format!("httpGet probe: {e}")),
        };
        let host = http
            .host
            .as_deref()
            .or(pod_ip)
            .unwrap_or("127.0.0.1")
            .to_string();
        let path = http.path.as_deref().unwrap_or("/");
        let headers: String = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| format!("{}: {}\r\n", h.name, h.value))
            .collect();
        let url = format!("{}://{host}:{port}{path}", scheme.as_str());
        let get = http_get(scheme, &host, port, path, &headers);
        return match tokio::time::timeout(timeout, get).await {
            Ok(Ok(code)) if (200..400).contains(&code) => Outcome::Success,
            Ok(Ok(code)) => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
            Ok(Err(e)) => Outcome::Failure(format!("Get \"{url}\": {e}")),
            Err(_) => Outcome::Failure(format!("Get \"{url}\": context deadline exceeded")),
        };
    }
    Outcome::Failure("probe kind not supported (grpc) or no handler given".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn probe(json: serde_json::Value) -> Probe {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn thresholds_and_period() {
        let p = probe(
            serde_json::json!({"exec": {"command": ["true"]}, "initialDelaySeconds": 5,
            "periodSeconds": 2, "failureThreshold": 2, "successThreshold": 2}),
        );
        let t0 = Instant::now();
        let mut s = ProbeState::new(&p, t0, false);
        assert!(!s.due(t0 + Duration::from_secs(4)));
        assert!(s.due(t0 + Duration::from_secs(5)));
        let t = t0 + Duration::from_secs(5);
        assert!(!s.record(t, Outcome::Success), "one success of two");
        assert!(!s.due(t + Duration::from_secs(1)));
        assert!(s.record(t + Duration::from_secs(2), Outcome::Success));
        assert!(s.result);
        assert!(!s.record(t + Duration::from_secs(4), Outcome::Failure("x".into())));
        assert!(s.record(t + Duration::from_secs(6), Outcome::Failure("y".into())));
        assert!(!s.result);
        assert_eq!(s.last_failure.as_deref(), Some("y"));
    }

    #[tokio::test]
    async fn http_and_tcp_probes_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let code = if req.starts_with("GET /healthz ") {
                    "200 OK"
                } else {
                    "404 Not Found"
                };
                let _ = s
                    .write_all(format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let c = Container {
            name: "c".into(),
            ports: Some(vec![serde_json::from_value(
                serde_json::json!({"name": "http", "containerPort": port}),
            )
            .unwrap()]),
            ..Default::default()
        };
        let cri = crate::runtime::cri::fake::FakeCri::default();
        let ok = probe(serde_json::json!({"httpGet": {"path": "/healthz", "port": "http"}}));
        assert_eq!(
            run(&ok, &c, "id", Some("127.0.0.1"), &cri).await,
            Outcome::Success
        );
        let bad = probe(serde_json::json!({"httpGet": {"path": "/nope", "port": port}}));
        assert!(
            matches!(run(&bad, &c, "id", Some("127.0.0.1"), &cri).await, Outcome::Failure(m) if m.contains("404"))
        );
        let tcp = probe(serde_json::json!({"tcpSocket": {"port": port}}));
        assert_eq!(
            run(&tcp, &c, "id", Some("127.0.0.1"), &cri).await,
            Outcome::Success
        );
        let missing = probe(serde_json::json!({"tcpSocket": {"port": "nope"}}));
        assert!(matches!(
            run(&missing, &c, "id", Some("127.0.0.1"), &cri).await,
            Outcome::Failure(_)
        ));
    }
}
