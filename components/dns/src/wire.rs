//! Bytes in, bytes out: decoding untrusted packets, the size limit of a reply (512, the client's
//! EDNS0 payload size, or 64 KiB over TCP) and truncation. [`answer_bytes`] is what the UDP and TCP
//! loops call for every packet (and what the fuzz target feeds).

use hickory_proto::op::{Header, Message, MessageType, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::answer::{answer, Outcome, MAX_UDP_PAYLOAD};
use crate::index::Index;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// An encoded reply and what /metrics counts of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub bytes: Vec<u8>,
    /// The question's type (None when the request had no parsable question).
    pub qtype: Option<RecordType>,
    pub rcode: ResponseCode,
}

/// A request that needs the upstreams before it can be answered.
#[derive(Debug, Clone)]
pub struct Pending {
    pub request: Message,
    /// For an ExternalName chase: the response so far and the name to resolve upstream.
    pub chase: Option<(Message, Name)>,
    pub transport: Transport,
}

#[derive(Debug, Clone)]
pub enum Reply {
    Send(Sent),
    /// Nothing to send: not even a query header could be read, or the packet is a response.
    Drop,
    /// Boxed: a request is much bigger than an encoded reply.
    Forward(Box<Pending>),
}

/// Answers one packet from the index. Never panics on any input: a packet whose header parses but
/// whose body does not gets FORMERR; anything else unparsable, and every response, is dropped.
pub fn answer_bytes(index: &Index, bytes: &[u8], transport: Transport) -> Reply {
    let request = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(_) => return formerr(bytes),
    };
    if request.metadata.message_type == MessageType::Response {
        return Reply::Drop;
    }
    match answer(index, &request) {
        Outcome::Answer(resp) => Reply::Send(finish(&request, &resp, transport)),
        Outcome::Forward => Reply::Forward(Box::new(Pending {
            request,
            chase: None,
            transport,
        })),
        Outcome::Chase { response, target } => Reply::Forward(Box::new(Pending {
            request,
            chase: Some((response, target)),
            transport,
        })),
    }
}

fn formerr(bytes: &[u8]) -> Reply {
    let Ok(header) = Header::read(&mut BinDecoder::new(bytes)) else {
        return Reply::Drop;
    };
    let m = header.metadata;
    if m.message_type == MessageType::Response {
        return Reply::Drop;
    }
    let mut resp = Message::error_msg(m.id, m.op_code, ResponseCode::FormErr);
    resp.metadata.recursion_desired = m.recursion_desired;
    resp.metadata.recursion_available = true;
    Reply::Send(Sent {
        bytes: encode_limited(&resp, 512),
        qtype: None,
        rcode: ResponseCode::FormErr,
    })
}

/// The most a reply to `request` may be: 64 KiB over TCP; over UDP the client's EDNS0 payload size
/// (at least 512, at most [`MAX_UDP_PAYLOAD`]), or 512 without EDNS0.
pub fn size_limit(request: &Message, transport: Transport) -> usize {
    match transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => usize::from(
            request
                .edns
                .as_ref()
                .map_or(512, |e| e.max_payload().clamp(512, MAX_UDP_PAYLOAD)),
        ),
    }
}

/// Encodes `response` for `request` over `transport`.
pub fn finish(request: &Message, response: &Message, transport: Transport) -> Sent {
    Sent {
        bytes: encode_limited(response, size_limit(request, transport)),
        qtype: request.queries.first().map(|q| q.query_type()),
        rcode: response.metadata.response_code,
    }
}

/// Encodes `msg` in at most `limit` bytes: whole if it fits; else without the additional section
/// (optional data, no TC needed); else just the question and OPT with TC set, so the client retries
/// over TCP. A message that cannot be encoded at all becomes SERVFAIL.
pub fn encode_limited(msg: &Message, limit: usize) -> Vec<u8> {
    match msg.to_vec() {
        Ok(b) if b.len() <= limit => return b,
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(error = %e, "cannot encode a response; SERVFAIL");
            let mut fail = msg.clone();
            fail.answers.clear();
            fail.authorities.clear();
            fail.additionals.clear();
            fail.metadata.response_code = ResponseCode::ServFail;
            return fail.to_vec().unwrap_or_default();
        }
    }
    let mut m = msg.clone();
    m.additionals.clear();
    if let Ok(b) = m.to_vec() {
        if b.len() <= limit {
            return b;
        }
    }
    m.answers.clear();
    m.authorities.clear();
    m.metadata.truncation = true;
    m.to_vec().unwrap_or_default()
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
