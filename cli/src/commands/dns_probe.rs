//! `kiln status`'s DNS lines: each node's kiln-dns asked, over UDP on the node's address, for the
//! `kubernetes` Service's name — the same question an in-cluster client's first lookup asks.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("bad name {name:?}: {source}")]
    Name {
        name: String,
        source: hickory_proto::ProtoError,
    },
    #[error("{0}")]
    Wire(#[from] hickory_proto::ProtoError),
    #[error("undecodable answer: {0}")]
    Decode(#[from] hickory_proto::serialize::binary::DecodeError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("answered {0}")]
    Rcode(ResponseCode),
    #[error("answered without an address")]
    Empty,
    #[error("node address {0:?} is not an IP address (set the host's nodeIP)")]
    NotAnIp(String),
}

/// The addresses a node's kiln-dns (`server`, port 53) gives for `kubernetes.default.svc.<zone>`,
/// and how long it took.
pub async fn kubernetes_service(
    server: IpAddr,
    zone: &str,
    timeout: Duration,
) -> Result<(Vec<IpAddr>, Duration), ProbeError> {
    exchange(SocketAddr::new(server, 53), zone, timeout).await
}

async fn exchange(
    server: SocketAddr,
    zone: &str,
    timeout: Duration,
) -> Result<(Vec<IpAddr>, Duration), ProbeError> {
    let fqdn = format!("kubernetes.default.svc.{zone}.");
    let name = Name::from_ascii(&fqdn).map_err(|source| ProbeError::Name {
        name: fqdn.clone(),
        source,
    })?;
    let mut q = Message::new(rand::random(), MessageType::Query, OpCode::Query);
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(name, RecordType::A));
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("valid")
    } else {
        "[::]:0".parse().expect("valid")
    };
    let sock = tokio::net::UdpSocket::bind(bind).await?;
    sock.connect(server).await?;
    let start = Instant::now();
    sock.send(&q.to_vec()?).await?;
    let mut buf = vec![0u8; 4096];
    let answer = loop {
        let n = tokio::time::timeout(timeout, sock.recv(&mut buf))
            .await
            .map_err(|_| ProbeError::Timeout(timeout))??;
        let m = Message::from_vec(&buf[..n])?;
        // A stray datagram (another query's late answer) is not ours.
        if m.metadata.id == q.metadata.id {
            break m;
        }
    };
    let took = start.elapsed();
    if answer.metadata.response_code != ResponseCode::NoError {
        return Err(ProbeError::Rcode(answer.metadata.response_code));
    }
    let ips: Vec<IpAddr> = answer
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect();
    if ips.is_empty() {
        return Err(ProbeError::Empty);
    }
    Ok((ips, took))
}

/// One `kiln status` line for a node's DNS.
pub fn line(host: &str, zone: &str, r: &Result<(Vec<IpAddr>, Duration), ProbeError>) -> String {
    match r {
        Ok((ips, took)) => format!(
            "dns {host:<10} answering: kubernetes.default.svc.{zone} -> {} ({:.1} ms)",
            ips.iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            took.as_secs_f64() * 1000.0
        ),
        Err(e) => format!("dns {host:<10} NOT ANSWERING: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_answering_or_not() {
        let ok = line(
            "host1",
            "cluster.local",
            &Ok((
                vec!["10.96.0.1".parse().unwrap()],
                Duration::from_micros(1500),
            )),
        );
        assert_eq!(
            ok,
            "dns host1      answering: kubernetes.default.svc.cluster.local -> 10.96.0.1 (1.5 ms)"
        );
        let bad = line(
            "host2",
            "cluster.local",
            &Err(ProbeError::Timeout(Duration::from_secs(2))),
        );
        assert_eq!(bad, "dns host2      NOT ANSWERING: no answer within 2s");
    }

    /// A real exchange on loopback: a responder that answers one A record, built with the same crate.
    #[tokio::test]
    async fn a_real_answer_is_read_and_a_wrong_rcode_reported() {
        for rcode in [ResponseCode::NoError, ResponseCode::NXDomain] {
            let server = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let addr = server.local_addr().unwrap();
            let responder = tokio::spawn(async move {
                let mut buf = vec![0u8; 512];
                let (n, from) = server.recv_from(&mut buf).await.unwrap();
                let q = Message::from_vec(&buf[..n]).unwrap();
                let mut r = Message::error_msg(q.metadata.id, OpCode::Query, rcode);
                r.add_queries(q.queries.clone());
                if rcode == ResponseCode::NoError {
                    let name = q.queries[0].name().clone();
                    r.add_answer(hickory_proto::rr::Record::from_rdata(
                        name,
                        5,
                        RData::A(hickory_proto::rr::rdata::A("10.96.0.1".parse().unwrap())),
                    ));
                }
                server.send_to(&r.to_vec().unwrap(), from).await.unwrap();
            });
            // The responder's own port: binding 53 would need root.
            let got = exchange(addr, "cluster.local", Duration::from_secs(2)).await;
            responder.await.unwrap();
            match rcode {
                ResponseCode::NoError => {
                    assert_eq!(got.unwrap().0, ["10.96.0.1".parse::<IpAddr>().unwrap()])
                }
                _ => assert!(matches!(
                    got,
                    Err(ProbeError::Rcode(ResponseCode::NXDomain))
                )),
            }
        }
    }
}
