//! `connect HOST:PORT`: one TCP (or UDP) connection attempt whose failure is printed with a fixed
//! prefix the network-policy and Service e2e tests check for: `TIMEOUT`, `REFUSED`, `DNS`, `OTHER`,
//! `UNKNOWN`. Success is silent with status 0.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// host:port to connect to.
    pub dest: String,
    /// Maximum time before returning an error (a Go duration; 0 means the system's own limit).
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    pub timeout: Duration,
    /// tcp or udp (sctp is not supported by kiln's agnhost).
    #[arg(long, default_value = "tcp")]
    pub protocol: String,
    /// The UDP payload sent to the server.
    #[arg(long = "udp-data", default_value = "hostname")]
    pub udp_data: String,
    /// The SCTP payload (accepted for compatibility; SCTP is not supported).
    #[arg(long = "sctp-data", default_value = "hostname")]
    pub sctp_data: String,
}

fn parse_go_duration(s: &str) -> Result<Duration, String> {
    kiln_common::duration::parse_duration(s).map_err(|e| e.to_string())
}

/// The outcome as upstream prints it on stderr (None: connected).
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    Unknown(String),
    Dns(String),
    Timeout(String),
    Refused(String),
    Other(String),
}

impl Failure {
    pub fn line(&self) -> String {
        match self {
            Failure::Unknown(e) => format!("UNKNOWN: {e}"),
            Failure::Dns(e) => format!("DNS: {e}"),
            Failure::Timeout(e) if e.is_empty() => "TIMEOUT".into(),
            Failure::Timeout(e) => format!("TIMEOUT: {e}"),
            Failure::Refused(e) if e.is_empty() => "REFUSED".into(),
            Failure::Refused(e) => format!("REFUSED: {e}"),
            Failure::Other(e) => format!("OTHER: {e}"),
        }
    }
}

async fn resolve(dest: &str) -> Result<SocketAddr, Failure> {
    let (host, port) = dest
        .rsplit_once(':')
        .ok_or_else(|| Failure::Unknown(format!("address {dest}: missing port in address")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port
        .parse()
        .map_err(|_| Failure::Dns(format!("address {dest}: invalid port")))?;
    let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Failure::Dns(format!("lookup {host}: {e}")))?
        .collect();
    // Go dials IPv4 first.
    addrs.sort_by_key(|a| !a.is_ipv4());
    addrs
        .into_iter()
        .next()
        .ok_or_else(|| Failure::Dns(format!("lookup {host}: no such host")))
}

async fn within<T>(timeout: Duration, f: impl std::future::Future<Output = T>) -> Result<T, ()> {
    if timeout.is_zero() {
        Ok(f.await)
    } else {
        tokio::time::timeout(timeout, f).await.map_err(|_| ())
    }
}

pub async fn tcp(dest: &str, timeout: Duration) -> Result<(), Failure> {
    let addr = resolve(dest).await?;
    match within(timeout, tokio::net::TcpStream::connect(addr)).await {
        Err(()) => Err(Failure::Timeout(String::new())),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(Failure::Refused(String::new()))
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
            Err(Failure::Timeout(String::new()))
        }
        Ok(Err(e)) => Err(Failure::Other(format!(
            "dial tcp {addr}: connect: {}",
            crate::gofmt::errno_text(&e)
        ))),
    }
}

pub async fn udp(dest: &str, timeout: Duration, data: &str) -> Result<(), Failure> {
    let addr = resolve(dest).await?;
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let sock = tokio::net::UdpSocket::bind(bind)
        .await
        .map_err(|e| Failure::Other(e.to_string()))?;
    sock.connect(addr)
        .await
        .map_err(|e| Failure::Other(e.to_string()))?;
    let classify = |e: std::io::Error| {
        let text = format!("read udp {addr}: {}", crate::gofmt::errno_text(&e));
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            Failure::Refused(text)
        } else {
            Failure::Unknown(text)
        }
    };
    let exchange = async {
        sock.send(format!("{data}\n").as_bytes())
            .await
            .map_err(classify)?;
        let mut buf = [0u8; 1024];
        let n = sock.recv(&mut buf).await.map_err(classify)?;
        if n == 0 {
            return Err(Failure::Other("No data received from the server. Cannot guarantee the server received the request.".into()));
        }
        Ok(())
    };
    match within(timeout, exchange).await {
        Err(()) => Err(Failure::Timeout(format!("read udp {addr}: i/o timeout"))),
        Ok(r) => r,
    }
}

pub async fn run(args: ConnectArgs) -> i32 {
    let result = match args.protocol.as_str() {
        "" | "tcp" => tcp(&args.dest, args.timeout).await,
        "udp" => udp(&args.dest, args.timeout, &args.udp_data).await,
        other => {
            eprintln!("Unsupported protocol {other}");
            return 1;
        }
    };
    match result {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("{}", f.line());
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tcp_connects_to_a_listener() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        assert_eq!(tcp(&addr.to_string(), Duration::from_secs(2)).await, Ok(()));
    }

    #[tokio::test]
    async fn tcp_to_a_closed_port_is_refused() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let f = tcp(&addr.to_string(), Duration::from_secs(2))
            .await
            .unwrap_err();
        assert_eq!(f.line(), "REFUSED");
    }

    #[tokio::test]
    async fn a_missing_port_is_unknown() {
        let f = tcp("127.0.0.1", Duration::from_secs(1)).await.unwrap_err();
        assert!(f.line().starts_with("UNKNOWN: "), "{}", f.line());
    }

    #[tokio::test]
    async fn udp_needs_an_answer() {
        let srv = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = srv.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let (n, peer) = srv.recv_from(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"hostname\n");
            srv.send_to(b"pod", peer).await.unwrap();
        });
        assert_eq!(
            udp(&addr.to_string(), Duration::from_secs(2), "hostname").await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn udp_without_an_answer_times_out() {
        let srv = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = srv.local_addr().unwrap();
        let f = udp(&addr.to_string(), Duration::from_millis(200), "x")
            .await
            .unwrap_err();
        assert!(f.line().starts_with("TIMEOUT"), "{}", f.line());
        drop(srv);
    }
}
