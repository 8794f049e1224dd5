//! Container probes (liveness, readiness): httpGet, tcpSocket and gRPC health from the node to the pod IP,
//! exec through CRI ExecSync; and the per-probe bookkeeping (initial delay, period, thresholds) as a pure state machine.

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

    /// Not due before `at` (only ever moves the next probe later).
    pub fn hold_until(&mut self, at: Instant) {
        self.next_at = self.next_at.max(at);
    }

    /// The failures in a row have reached the failure threshold (a startup probe's verdict starts
    /// false, so [`ProbeState::record`] reports no change when it gives up).
    pub fn failed_out(&self) -> bool {
        self.failures >= self.timing.failure_threshold
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
    if let Some(g) = &p.grpc {
        let Ok(port) = u16::try_from(g.port) else {
            return Outcome::Failure(format!("grpc probe: invalid port {}", g.port));
        };
        let host = pod_ip.unwrap_or("127.0.0.1");
        let service = g.service.clone().unwrap_or_default();
        return grpc_health::check(host, port, service, timeout).await;
    }
    Outcome::Failure("no probe handler given".into())
}

/// gRPC probes: `grpc.health.v1.Health/Check` on the pod's IP, as upstream's gRPC prober (plaintext,
/// the probe's service name, SERVING is healthy). The two messages have one field each, so they are
/// encoded here rather than generated.
pub(super) mod grpc_health {
    use std::marker::PhantomData;
    use std::time::Duration;

    use bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::codegen::http::uri::PathAndQuery;
    use tonic::transport::Endpoint;
    use tonic::Status;

    use super::Outcome;

    pub const CHECK: &str = "/grpc.health.v1.Health/Check";
    /// HealthCheckResponse.ServingStatus names, by number.
    const STATUS: [&str; 4] = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];

    /// A protobuf message of one field: field 1 of HealthCheckRequest (string service) or of
    /// HealthCheckResponse (enum status).
    pub trait Wire: Sized + Send + 'static {
        fn put(&self, out: &mut Vec<u8>);
        fn get(b: &[u8]) -> Result<Self, String>;
    }

    /// HealthCheckRequest.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Request(pub String);
    /// HealthCheckResponse.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Response(pub i32);

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn get_varint(b: &mut &[u8]) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = b.split_first().ok_or("truncated varint")?;
            *b = rest;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }

    /// Field 1 of a message, skipping the others: (wire type, varint value or bytes).
    fn field_one(mut b: &[u8]) -> Result<Option<(u64, Vec<u8>)>, String> {
        let mut found = None;
        while !b.is_empty() {
            let key = get_varint(&mut b)?;
            let value: (u64, Vec<u8>) = match key & 7 {
                0 => (get_varint(&mut b)?, vec![]),
                1 | 5 => {
                    let n = if key & 7 == 1 { 8 } else { 4 };
                    let bytes = b.get(..n).ok_or("truncated fixed field")?.to_vec();
                    b = &b[n..];
                    (0, bytes)
                }
                2 => {
                    let n = usize::try_from(get_varint(&mut b)?).map_err(|e| e.to_string())?;
                    let bytes = b.get(..n).ok_or("truncated field")?.to_vec();
                    b = &b[n..];
                    (0, bytes)
                }
                w => return Err(format!("unsupported wire type {w}")),
            };
            if key >> 3 == 1 {
                found = Some(value);
            }
        }
        Ok(found)
    }

    impl Wire for Request {
        fn put(&self, out: &mut Vec<u8>) {
            if !self.0.is_empty() {
                out.push(0x0a);
                put_varint(out, self.0.len() as u64);
                out.extend_from_slice(self.0.as_bytes());
            }
        }
        fn get(b: &[u8]) -> Result<Self, String> {
            let s = field_one(b)?.map(|(_, bytes)| bytes).unwrap_or_default();
            String::from_utf8(s).map(Request).map_err(|e| e.to_string())
        }
    }

    impl Wire for Response {
        fn put(&self, out: &mut Vec<u8>) {
            if self.0 != 0 {
                out.push(0x08);
                put_varint(out, self.0 as u64);
            }
        }
        fn get(b: &[u8]) -> Result<Self, String> {
            Ok(Response(field_one(b)?.map_or(0, |(v, _)| v as i32)))
        }
    }

    /// A tonic codec sending `E` and receiving `D`.
    pub struct Pb<E, D>(PhantomData<fn() -> (E, D)>);

    impl<E, D> Default for Pb<E, D> {
        fn default() -> Self {
            Pb(PhantomData)
        }
    }

    impl<E: Wire, D: Wire> Codec for Pb<E, D> {
        type Encode = E;
        type Decode = D;
        type Encoder = Pb<E, D>;
        type Decoder = Pb<E, D>;
        fn encoder(&mut self) -> Self::Encoder {
            Pb::default()
        }
        fn decoder(&mut self) -> Self::Decoder {
            Pb::default()
        }
    }

    impl<E: Wire, D: Wire> Encoder for Pb<E, D> {
        type Item = E;
        type Error = Status;
        fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            let mut out = Vec::new();
            item.put(&mut out);
            dst.put_slice(&out);
            Ok(())
        }
    }

    impl<E: Wire, D: Wire> Decoder for Pb<E, D> {
        type Item = D;
        type Error = Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
            let bytes = src.copy_to_bytes(src.remaining());
            D::get(&bytes).map(Some).map_err(Status::internal)
        }
    }

    /// One Check call, bounded by the probe's timeout; the outcome and message as upstream's prober.
    pub async fn check(host: &str, port: u16, service: String, timeout: Duration) -> Outcome {
        let addr = if host.contains(':') {
            format!("http://[{host}]:{port}")
        } else {
            format!("http://{host}:{port}")
        };
        let endpoint = match Endpoint::from_shared(addr.clone()) {
            Ok(e) => e.connect_timeout(timeout).timeout(timeout),
            Err(e) => return Outcome::Failure(format!("grpc probe {addr}: {e}")),
        };
        let call = async {
            let channel = endpoint.connect().await.map_err(|e| {
                format!(
                    "timeout: failed to connect service \"{host}:{port}\" within {timeout:?}: {e}"
                )
            })?;
            let mut client = tonic::client::Grpc::new(channel);
            client
                .ready()
                .await
                .map_err(|e| format!("error: health rpc probe failed: {e}"))?;
            let path = PathAndQuery::from_static(CHECK);
            client
                .unary(
                    tonic::Request::new(Request(service)),
                    path,
                    Pb::<Request, Response>::default(),
                )
                .await
                .map(|r| r.into_inner())
                .map_err(|s| {
                    format!(
                        "error: health rpc probe failed: rpc error: code = {:?} desc = {}",
                        s.code(),
                        s.message()
                    )
                })
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(Response(1))) => Outcome::Success,
            Ok(Ok(Response(s))) => {
                let name = usize::try_from(s)
                    .ok()
                    .and_then(|i| STATUS.get(i))
                    .copied()
                    .unwrap_or("UNKNOWN");
                Outcome::Failure(format!("service unhealthy (responded with \"{name}\")"))
            }
            Ok(Err(e)) => Outcome::Failure(e),
            Err(_) => Outcome::Failure(format!(
                "timeout: health rpc did not complete within {timeout:?}"
            )),
        }
    }
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

    #[test]
    fn grpc_health_messages_round_trip_as_protobuf() {
        use grpc_health::{Request, Response, Wire};
        let mut out = Vec::new();
        Request("svc".into()).put(&mut out);
        assert_eq!(out, b"\x0a\x03svc");
        assert_eq!(Request::get(&out).unwrap(), Request("svc".into()));
        assert_eq!(Request::get(&[]).unwrap(), Request(String::new()));
        let mut out = Vec::new();
        Response(2).put(&mut out);
        assert_eq!(out, [0x08, 0x02]);
        // An unknown field (3, length-delimited) before the status is skipped.
        assert_eq!(
            Response::get(&[0x1a, 0x01, 0x00, 0x08, 0x01]).unwrap(),
            Response(1)
        );
        assert_eq!(
            Response::get(&[]).unwrap(),
            Response(0),
            "absent is UNKNOWN"
        );
    }

    /// A grpc.health.v1 server answering every Check with one status.
    #[derive(Clone)]
    struct Health(i32);

    impl tonic::server::NamedService for Health {
        const NAME: &'static str = "grpc.health.v1.Health";
    }

    impl tonic::server::UnaryService<grpc_health::Request> for Health {
        type Response = grpc_health::Response;
        type Future =
            std::future::Ready<Result<tonic::Response<grpc_health::Response>, tonic::Status>>;
        fn call(&mut self, _req: tonic::Request<grpc_health::Request>) -> Self::Future {
            std::future::ready(Ok(tonic::Response::new(grpc_health::Response(self.0))))
        }
    }

    impl tower::Service<tonic::codegen::http::Request<tonic::body::Body>> for Health {
        type Response = tonic::codegen::http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;
        fn poll_ready(
            &mut self,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
            let svc = self.clone();
            Box::pin(async move {
                let codec =
                    grpc_health::Pb::<grpc_health::Response, grpc_health::Request>::default();
                Ok(tonic::server::Grpc::new(codec).unary(svc, req).await)
            })
        }
    }

    async fn serve_health(status: i32) -> u16 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(Health(status))
                .serve(addr),
        );
        for _ in 0..50 {
            if TcpStream::connect(addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        port
    }

    #[tokio::test]
    async fn grpc_probes_succeed_only_when_serving() {
        let c = Container::default();
        let cri = crate::runtime::cri::fake::FakeCri::default();
        let serving = serve_health(1).await;
        let not_serving = serve_health(2).await;
        let p = |port: u16| probe(serde_json::json!({"grpc": {"port": port}}));
        assert_eq!(
            run(&p(serving), &c, "id", Some("127.0.0.1"), &cri).await,
            Outcome::Success
        );
        assert_eq!(
            run(&p(not_serving), &c, "id", Some("127.0.0.1"), &cri).await,
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert!(matches!(
            run(&p(closed), &c, "id", Some("127.0.0.1"), &cri).await,
            Outcome::Failure(m) if m.starts_with("timeout: failed to connect service")
        ));
    }
}
