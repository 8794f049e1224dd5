//! The client end of SPDY/3.1 as a container runtime's streaming server speaks it (moby/spdystream
//! over Go's SPDY framer), reduced to what a remote command needs: open streams (SYN_STREAM), send
//! and half-close data, answer pings; read replies, data, resets and GOAWAY. No crate speaks SPDY,
//! and the framing is small (draft-mbelshe-httpbis-spdy-00, sections 2.2 and 2.6).
//!
//! Header blocks are zlib streams that continue from frame to frame. Ours are compressed without
//! SPDY's preset dictionary: a zlib header without FDICT tells Go's reader not to use one. The
//! server's header blocks (SYN_REPLY) carry nothing a remote command reads, so they are skipped
//! undecoded. spdystream does no flow control (WINDOW_UPDATE frames go unhandled), so neither do we.

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::TranslatorError;

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
/// FLAG_FIN on a data frame and on SYN_STREAM / SYN_REPLY: the sender's half of the stream is done.
const FLAG_FIN: u8 = 0x01;
/// Largest data frame we send (the length field has 24 bits; spdystream's reads are 64 KiB).
pub const MAX_DATA: usize = 32 * 1024;

/// A frame from the server, as far as a remote command client cares.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// The server accepted a stream we opened (`fin`: and will send nothing on it).
    SynReply {
        stream: u32,
        fin: bool,
    },
    Data {
        stream: u32,
        fin: bool,
        data: Bytes,
    },
    Reset {
        stream: u32,
        status: u32,
    },
    Ping(u32),
    GoAway,
    /// SETTINGS, HEADERS, WINDOW_UPDATE, NOOP, a SYN_STREAM of the server's: nothing to act on.
    Other,
}

/// Builds the frames this end sends; owns the connection's header compression stream.
pub struct Encoder {
    zlib: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            zlib: Compress::new(Compression::default(), true),
        }
    }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

impl Encoder {
    /// SYN_STREAM opening `stream` with these headers (names lower case, as SPDY requires).
    pub fn syn_stream(
        &mut self,
        stream: u32,
        headers: &[(&str, &str)],
    ) -> Result<Vec<u8>, TranslatorError> {
        let block = self.header_block(headers)?;
        let mut payload = Vec::with_capacity(10 + block.len());
        payload.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        payload.extend_from_slice(&0u32.to_be_bytes()); // associated-to-stream-id
        payload.extend_from_slice(&[0, 0]); // priority 0, slot 0
        payload.extend_from_slice(&block);
        Ok(control(SYN_STREAM, 0, &payload))
    }

    /// The name/value block, compressed and sync-flushed so the server can read it whole.
    fn header_block(&mut self, headers: &[(&str, &str)]) -> Result<Vec<u8>, TranslatorError> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            raw.extend_from_slice(&(name.len() as u32).to_be_bytes());
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
            raw.extend_from_slice(value.as_bytes());
        }
        let start = self.zlib.total_in();
        let mut out = Vec::new();
        loop {
            out.reserve(raw.len() + 64);
            let consumed = (self.zlib.total_in() - start) as usize;
            self.zlib
                .compress_vec(&raw[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| TranslatorError::Spdy(format!("compress headers: {e}")))?;
            // Done once all input is in and the flush did not fill the space it had.
            if (self.zlib.total_in() - start) as usize == raw.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// A data frame on `stream` (`fin`: our half of the stream ends with it).
pub fn data(stream: u32, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.push(if fin { FLAG_FIN } else { 0 });
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

/// The answer to the server's PING: the same frame back.
pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// GOAWAY (status OK): this end opens no more streams.
pub fn go_away() -> Vec<u8> {
    control(GOAWAY, 0, &[0; 8])
}

fn word(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        .unwrap_or(0)
}

/// The next frame, or None at a clean end of the connection (between frames).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Frame>, TranslatorError> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        let n = r
            .read(&mut head[got..])
            .await
            .map_err(|e| TranslatorError::Spdy(format!("read frame: {e}")))?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(TranslatorError::Spdy(
                    "connection ended inside a frame".into(),
                ))
            };
        }
        got += n;
    }
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)
        .await
        .map_err(|e| TranslatorError::Spdy(format!("read frame: {e}")))?;
    if head[0] & 0x80 == 0 {
        let stream = word(&head, 0) & 0x7fff_ffff;
        return Ok(Some(Frame::Data {
            stream,
            fin: flags & FLAG_FIN != 0,
            data: payload.into(),
        }));
    }
    let kind = u16::from_be_bytes([head[2], head[3]]);
    Ok(Some(match kind {
        SYN_REPLY => Frame::SynReply {
            stream: word(&payload, 0) & 0x7fff_ffff,
            fin: flags & FLAG_FIN != 0,
        },
        RST_STREAM => Frame::Reset {
            stream: word(&payload, 0) & 0x7fff_ffff,
            status: word(&payload, 4),
        },
        PING => Frame::Ping(word(&payload, 0)),
        GOAWAY => Frame::GoAway,
        _ => Frame::Other,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn syn_stream_carries_a_readable_header_block() {
        let mut enc = Encoder::default();
        let first = enc.syn_stream(1, &[("streamtype", "error")]).unwrap();
        let second = enc.syn_stream(3, &[("streamtype", "stdout")]).unwrap();
        // Control bit, version 3, type 1, no flags, length of the rest.
        assert_eq!(&first[..4], &[0x80, 0x03, 0x00, 0x01]);
        assert_eq!(first[4], 0);
        let len = u32::from_be_bytes([0, first[5], first[6], first[7]]) as usize;
        assert_eq!(len, first.len() - 8);
        assert_eq!(word(&first, 8), 1);
        assert_eq!(word(&second, 8), 3);
        // zlib header without FDICT (Go then reads without SPDY's dictionary).
        assert_eq!(first[18] & 0x0f, 8);
        assert_eq!(first[19] & 0x20, 0);
        // The two blocks are one zlib stream: decompressing them in order gives both header sets.
        let mut stream = first[18..].to_vec();
        stream.extend_from_slice(&second[18..]);
        let mut d = flate2::Decompress::new(true);
        let mut out = Vec::with_capacity(256);
        d.decompress_vec(&stream, &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        let mut expected = Vec::new();
        for value in ["error", "stdout"] {
            expected.extend_from_slice(&1u32.to_be_bytes());
            expected.extend_from_slice(&10u32.to_be_bytes());
            expected.extend_from_slice(b"streamtype");
            expected.extend_from_slice(&(value.len() as u32).to_be_bytes());
            expected.extend_from_slice(value.as_bytes());
        }
        assert_eq!(out, expected);
        // And a plain zlib reader agrees on the first block alone (it was flushed whole).
        let mut z = flate2::read::ZlibDecoder::new(&first[18..]);
        let mut head = [0u8; 4];
        z.read_exact(&mut head).unwrap();
        assert_eq!(u32::from_be_bytes(head), 1);
    }

    #[tokio::test]
    async fn frames_round_trip_through_the_reader() {
        let mut wire = Vec::new();
        wire.extend(data(5, false, b"hello"));
        wire.extend(data(3, true, b""));
        wire.extend(ping(7));
        wire.extend(control(SYN_REPLY, FLAG_FIN, &[0, 0, 0, 9, 0, 0]));
        wire.extend(control(RST_STREAM, 0, &[0, 0, 0, 1, 0, 0, 0, 5]));
        wire.extend(control(9, 0, &[0, 0, 0, 1, 0, 0, 1, 0])); // WINDOW_UPDATE
        wire.extend(go_away());
        let mut r = &wire[..];
        let mut frames = Vec::new();
        while let Some(f) = read_frame(&mut r).await.unwrap() {
            frames.push(f);
        }
        assert_eq!(
            frames,
            vec![
                Frame::Data {
                    stream: 5,
                    fin: false,
                    data: Bytes::from_static(b"hello")
                },
                Frame::Data {
                    stream: 3,
                    fin: true,
                    data: Bytes::new()
                },
                Frame::Ping(7),
                Frame::SynReply {
                    stream: 9,
                    fin: true
                },
                Frame::Reset {
                    stream: 1,
                    status: 5
                },
                Frame::Other,
                Frame::GoAway,
            ]
        );
        // A connection cut inside a frame is an error, not a clean end.
        let cut = data(1, false, b"abc");
        assert!(read_frame(&mut &cut[..5]).await.is_err());
    }
}
