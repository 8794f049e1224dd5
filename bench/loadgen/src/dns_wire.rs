//! The few DNS messages the DNS benchmark sends itself (RFC 1035): a query of one name and type, and a
//! response's header and answer records (A, CNAME, SRV; others by type only). No I/O.

use std::net::Ipv4Addr;

pub const TYPE_A: u16 = 1;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SRV: u16 = 33;

pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_NXDOMAIN: u8 = 3;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("message cut short at byte {0}")]
    Short(usize),
    #[error("bad name at byte {0}")]
    BadName(usize),
}

/// A query with recursion desired (what a stub resolver in a pod sends), no EDNS.
pub fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut m = Vec::with_capacity(18 + name.len());
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x01, 0x00]); // RD
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // QDCOUNT 1
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes()); // IN
    m
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rdata {
    A(Ipv4Addr),
    Cname(String),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub name: String,
    pub rtype: u16,
    pub ttl: u32,
    pub data: Rdata,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub id: u16,
    pub rcode: u8,
    pub authoritative: bool,
    pub truncated: bool,
    pub answers: Vec<Answer>,
}

impl Response {
    /// The A records of the answer section, sorted.
    pub fn a_records(&self) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = self
            .answers
            .iter()
            .filter_map(|a| match a.data {
                Rdata::A(ip) => Some(ip),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, WireError> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(WireError::Short(at))
}

/// The name at `at` (following compression pointers) and the position after it in the message.
fn read_name(b: &[u8], mut at: usize) -> Result<(String, usize), WireError> {
    let mut labels: Vec<String> = Vec::new();
    let mut end = None;
    // Each pointer must go backwards, so the walk ends; the hop bound guards the rest.
    for _ in 0..128 {
        let len = *b.get(at).ok_or(WireError::Short(at))? as usize;
        match len {
            0 => {
                let name = if labels.is_empty() {
                    ".".to_string()
                } else {
                    labels.join(".") + "."
                };
                return Ok((name, end.unwrap_or(at + 1)));
            }
            l if l & 0xC0 == 0xC0 => {
                let ptr = (u16_at(b, at)? & 0x3FFF) as usize;
                if ptr >= at {
                    return Err(WireError::BadName(at));
                }
                end.get_or_insert(at + 2);
                at = ptr;
            }
            l if l < 64 => {
                let label = b.get(at + 1..at + 1 + l).ok_or(WireError::Short(at))?;
                labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
                at += 1 + l;
            }
            _ => return Err(WireError::BadName(at)),
        }
    }
    Err(WireError::BadName(at))
}

/// A response's header and its answer section (authority and additional sections are not read).
pub fn parse(b: &[u8]) -> Result<Response, WireError> {
    let id = u16_at(b, 0)?;
    let flags = u16_at(b, 2)?;
    let qd = u16_at(b, 4)?;
    let an = u16_at(b, 6)?;
    let mut at = 12;
    for _ in 0..qd {
        at = read_name(b, at)?.1 + 4;
    }
    let mut answers = Vec::with_capacity(an as usize);
    for _ in 0..an {
        let (name, next) = read_name(b, at)?;
        let rtype = u16_at(b, next)?;
        let ttl = (u16_at(b, next + 4)? as u32) << 16 | u16_at(b, next + 6)? as u32;
        let len = u16_at(b, next + 8)? as usize;
        let rd = next + 10;
        let rdata = b.get(rd..rd + len).ok_or(WireError::Short(rd))?;
        let data = match rtype {
            TYPE_A if len == 4 => Rdata::A(Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3])),
            TYPE_CNAME => Rdata::Cname(read_name(b, rd)?.0),
            TYPE_SRV if len >= 7 => Rdata::Srv {
                priority: u16_at(b, rd)?,
                weight: u16_at(b, rd + 2)?,
                port: u16_at(b, rd + 4)?,
                target: read_name(b, rd + 6)?.0,
            },
            _ => Rdata::Other,
        };
        answers.push(Answer {
            name,
            rtype,
            ttl,
            data,
        });
        at = rd + len;
    }
    Ok(Response {
        id,
        rcode: (flags & 0x000F) as u8,
        authoritative: flags & 0x0400 != 0,
        truncated: flags & 0x0200 != 0,
        answers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_bytes() {
        let q = query(0x1234, "a.b.", TYPE_SRV);
        assert_eq!(
            q,
            [0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'a', 1, b'b', 0, 0, 33, 0, 1]
        );
        // without the trailing dot, the same
        assert_eq!(query(0x1234, "a.b", TYPE_SRV), q);
    }

    /// A response as a server writes it: the question, then answers whose names point back at it.
    fn response(answers: &[u8], an: u8, flags: [u8; 2]) -> Vec<u8> {
        let mut m = vec![0xAB, 0xCD, flags[0], flags[1], 0, 1, 0, an, 0, 0, 0, 0];
        // question at byte 12: svc.ns.  A IN
        m.extend_from_slice(&[3, b's', b'v', b'c', 2, b'n', b's', 0, 0, 1, 0, 1]);
        m.extend_from_slice(answers);
        m
    }

    #[test]
    fn a_cname_and_srv_answers_with_compression() {
        let mut ans = Vec::new();
        // svc.ns. (pointer to 12) A, TTL 5, 10.96.0.10
        ans.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 96, 0, 10]);
        // svc.ns. CNAME ext.svc.ns. (label then pointer)
        ans.extend_from_slice(&[0xC0, 12, 0, 5, 0, 1, 0, 0, 0, 5, 0, 6]);
        ans.extend_from_slice(&[3, b'e', b'x', b't', 0xC0, 12]);
        // svc.ns. SRV 0 100 80 svc.ns.
        ans.extend_from_slice(&[0xC0, 12, 0, 33, 0, 1, 0, 0, 0, 5, 0, 8]);
        ans.extend_from_slice(&[0, 0, 0, 100, 0, 80, 0xC0, 12]);
        let r = parse(&response(&ans, 3, [0x85, 0x00])).unwrap();
        assert_eq!(r.id, 0xABCD);
        assert_eq!(r.rcode, RCODE_NOERROR);
        assert!(r.authoritative);
        assert!(!r.truncated);
        assert_eq!(r.answers.len(), 3);
        assert_eq!(r.answers[0].name, "svc.ns.");
        assert_eq!(r.answers[0].ttl, 5);
        assert_eq!(r.a_records(), vec![Ipv4Addr::new(10, 96, 0, 10)]);
        assert_eq!(r.answers[1].data, Rdata::Cname("ext.svc.ns.".into()));
        assert_eq!(
            r.answers[2].data,
            Rdata::Srv {
                priority: 0,
                weight: 100,
                port: 80,
                target: "svc.ns.".into()
            }
        );
    }

    #[test]
    fn nxdomain_and_broken_messages() {
        let r = parse(&response(&[], 0, [0x81, 0x83])).unwrap();
        assert_eq!(r.rcode, RCODE_NXDOMAIN);
        assert!(r.answers.is_empty());
        // an answer announced but missing
        assert!(matches!(
            parse(&response(&[], 1, [0x81, 0x80])),
            Err(WireError::Short(_))
        ));
        // a pointer to itself
        let mut loop_ = response(&[0xC0, 24], 1, [0x81, 0x80]);
        loop_.extend_from_slice(&[0; 10]);
        assert!(matches!(parse(&loop_), Err(WireError::BadName(24))));
    }
}
