//! A scripted upstream resolver on 127.0.0.1 (UDP and TCP on one port) for the forwarding tests.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{Name, RData, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

pub struct FakeUpstream {
    pub addr: SocketAddr,
    /// Queries received (UDP and TCP).
    pub queries: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn n(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

fn soa() -> Record {
    let soa = SOA::new(n("ns.example."), n("h.example."), 1, 1, 1, 1, 60);
    Record::from_rdata(n("example."), 300, RData::SOA(soa))
}

/// The scripted answer; None = stay silent.
fn respond(req: &Message, tcp: bool) -> Option<Message> {
    let q = req.queries.first()?;
    let mut m = Message::response(req.metadata.id, req.metadata.op_code);
    m.metadata.recursion_available = true;
    m.queries = req.queries.clone();
    let a = |last: u8, ttl| {
        Record::from_rdata(
            q.name().clone(),
            ttl,
            RData::A(A(Ipv4Addr::new(192, 0, 2, last))),
        )
    };
    match q.name().to_lowercase().to_ascii().as_str() {
        "a.example." | "spoof.example." => m.answers.push(a(1, 300)),
        "www.example.com." => m.answers.push(a(80, 300)),
        "big.example." if tcp => m.answers.extend((1..=50).map(|i| a(i, 300))),
        "big.example." => m.metadata.truncation = true,
        "fail.example." => m.metadata.response_code = ResponseCode::ServFail,
        "silent.example." => return None,
        _ => {
            m.metadata.response_code = ResponseCode::NXDomain;
            m.authorities.push(soa());
        }
    }
    Some(m)
}

impl FakeUpstream {
    pub async fn start() -> FakeUpstream {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind(addr).await.unwrap();
        let queries = Arc::new(AtomicUsize::new(0));
        let count = queries.clone();
        let udp_task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65535];
            loop {
                let Ok((len, peer)) = udp.recv_from(&mut buf).await else {
                    continue;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(req) = Message::from_vec(&buf[..len]) else {
                    continue;
                };
                let Some(resp) = respond(&req, false) else {
                    continue;
                };
                if req.queries[0].name().to_ascii() == "spoof.example." {
                    // a stray answer first: wrong id, then one for another question
                    let mut wrong = resp.clone();
                    wrong.metadata.id = req.metadata.id.wrapping_add(1);
                    wrong.answers[0].data = RData::A(A(Ipv4Addr::new(203, 0, 113, 66)));
                    let _ = udp.send_to(&wrong.to_vec().unwrap(), peer).await;
                    let mut other = wrong.clone();
                    other.metadata.id = req.metadata.id;
                    other.queries[0].set_name(n("other.example."));
                    let _ = udp.send_to(&other.to_vec().unwrap(), peer).await;
                }
                let _ = udp.send_to(&resp.to_vec().unwrap(), peer).await;
            }
        });
        let count = queries.clone();
        let tcp_task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = tcp.accept().await else {
                    continue;
                };
                let count = count.clone();
                tokio::spawn(async move {
                    let mut len = [0u8; 2];
                    if s.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if s.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let Ok(req) = Message::from_vec(&body) else {
                        return;
                    };
                    let Some(resp) = respond(&req, true) else {
                        return;
                    };
                    let out = resp.to_vec().unwrap();
                    let mut framed = (out.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&out);
                    let _ = s.write_all(&framed).await;
                });
            }
        });
        FakeUpstream {
            addr,
            queries,
            tasks: vec![udp_task, tcp_task],
        }
    }

    /// A UDP socket that reads and never answers (a dead resolver that does not even refuse).
    pub async fn silent() -> FakeUpstream {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        let queries = Arc::new(AtomicUsize::new(0));
        let count = queries.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65535];
            while udp.recv_from(&mut buf).await.is_ok() {
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        FakeUpstream {
            addr,
            queries,
            tasks: vec![task],
        }
    }

    pub fn count(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

/// Response type check used by the tests.
pub fn is_response(m: &Message) -> bool {
    m.metadata.message_type == MessageType::Response
}
