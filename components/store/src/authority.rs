//! A shim on plain-HTTP client connections for etcdctl 3.4's per-endpoint connections.
//!
//! etcdctl 3.4 (grpc-go with a `passthrough:///http://host:port` target) sends the endpoint
//! URL, scheme included, as the HTTP/2 `:authority` of `endpoint status|health|hashkv` and
//! `snapshot save`; the `h2` crate under tonic refuses such a header as malformed and resets
//! the stream, while etcd's grpc-go server ignores it. kiln-store never looks at `:authority`,
//! so this shim renames the header on the way in: an `:authority` literal that names the
//! static table entry, and after which no pseudo-header can follow in its block (grpc-go sends
//! it last; Rust's h2 sends `:path` after it and keeps its valid authority), becomes a literal
//! `x-orig-aut` header — same name length, so both HPACK dynamic tables keep the same sizes and
//! indexes — and the value bytes pass untouched (they may be Huffman-coded; nothing here
//! decodes them). Only HEADERS and CONTINUATION frames are rewritten (re-framed as one header
//! block); everything else streams through. Anything that does not parse as expected passes
//! through unchanged.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// The largest frame a peer may send before settings say otherwise; re-framed header blocks
/// stay under it.
const MAX_FRAME: usize = 16_384;
/// HPACK static table index of `:authority`.
const AUTHORITY_INDEX: u64 = 1;
/// Same length as `:authority`, so a dynamic table entry keeps its size.
const RENAMED: &[u8] = b"x-orig-aut";

#[derive(Debug)]
enum State {
    Preface,
    FrameHeader,
    /// Streaming the payload of a frame that is not rewritten.
    Passing(usize),
    /// Collecting a header block: (HEADERS flags, stream id, priority bytes, block so far).
    Block {
        frame: [u8; FRAME_HEADER],
        priority: Vec<u8>,
        block: Vec<u8>,
    },
    /// Not HTTP/2 with prior knowledge, or something unexpected: hands off.
    Raw,
}

/// Wraps a server-side connection; reads come out rewritten, writes go straight through.
pub struct AuthorityFix<T> {
    inner: T,
    state: State,
    /// Bytes read from `inner` not yet processed.
    input: Vec<u8>,
    /// Processed bytes not yet handed to the reader.
    output: Vec<u8>,
    eof: bool,
}

impl<T> AuthorityFix<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            state: State::Preface,
            input: Vec::new(),
            output: Vec::new(),
            eof: false,
        }
    }

    /// Moves as many complete units from `input` to `output` as possible.
    fn process(&mut self) {
        loop {
            match &mut self.state {
                State::Raw => {
                    self.output.append(&mut self.input);
                    return;
                }
                State::Preface => {
                    let n = self.input.len().min(PREFACE.len());
                    if self.input[..n] != PREFACE[..n] {
                        self.state = State::Raw;
                        continue;
                    }
                    if n < PREFACE.len() {
                        return;
                    }
                    self.output.extend(self.input.drain(..PREFACE.len()));
                    self.state = State::FrameHeader;
                }
                State::FrameHeader => {
                    if self.input.len() < FRAME_HEADER {
                        return;
                    }
                    let mut frame = [0u8; FRAME_HEADER];
                    frame.copy_from_slice(&self.input[..FRAME_HEADER]);
                    let len = frame_len(&frame);
                    if frame[3] == TYPE_HEADERS {
                        if self.input.len() < FRAME_HEADER + len {
                            return;
                        }
                        let payload: Vec<u8> = self
                            .input
                            .drain(..FRAME_HEADER + len)
                            .skip(FRAME_HEADER)
                            .collect();
                        match split_headers_payload(frame[4], &payload) {
                            Some((priority, fragment)) => {
                                self.state = State::Block {
                                    frame,
                                    priority: priority.to_vec(),
                                    block: fragment.to_vec(),
                                };
                                self.finish_block_if_done(frame[4]);
                            }
                            None => {
                                self.output.extend_from_slice(&frame);
                                self.output.extend_from_slice(&payload);
                            }
                        }
                    } else {
                        self.output.extend(self.input.drain(..FRAME_HEADER));
                        self.state = State::Passing(len);
                    }
                }
                State::Passing(left) => {
                    let n = (*left).min(self.input.len());
                    self.output.extend(self.input.drain(..n));
                    *left -= n;
                    if *left > 0 {
                        return;
                    }
                    self.state = State::FrameHeader;
                }
                State::Block { block, .. } => {
                    if self.input.len() < FRAME_HEADER {
                        return;
                    }
                    let len = frame_len(&self.input[..FRAME_HEADER]);
                    if self.input[3] != TYPE_CONTINUATION {
                        // A protocol error the server should see: give up rewriting.
                        let State::Block {
                            frame,
                            priority,
                            block,
                        } = std::mem::replace(&mut self.state, State::Raw)
                        else {
                            unreachable!("matched above")
                        };
                        emit_original(&mut self.output, frame, &priority, &block);
                        continue;
                    }
                    if self.input.len() < FRAME_HEADER + len {
                        return;
                    }
                    let flags = self.input[4];
                    block.extend(self.input.drain(..FRAME_HEADER + len).skip(FRAME_HEADER));
                    self.finish_block_if_done(flags);
                }
            }
        }
    }

    /// After a fragment with `flags`: on END_HEADERS, emits the rewritten block.
    fn finish_block_if_done(&mut self, flags: u8) {
        if flags & FLAG_END_HEADERS == 0 {
            return;
        }
        let State::Block {
            frame,
            priority,
            block,
        } = std::mem::replace(&mut self.state, State::FrameHeader)
        else {
            return;
        };
        match rename_authority(&block) {
            Some(rewritten) => emit_block(&mut self.output, frame, &priority, &rewritten),
            None => emit_block(&mut self.output, frame, &priority, &block),
        }
    }
}

fn frame_len(header: &[u8]) -> usize {
    (header[0] as usize) << 16 | (header[1] as usize) << 8 | header[2] as usize
}

fn frame_header(len: usize, kind: u8, flags: u8, stream: &[u8]) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    h[0] = (len >> 16) as u8;
    h[1] = (len >> 8) as u8;
    h[2] = len as u8;
    h[3] = kind;
    h[4] = flags;
    h[5..].copy_from_slice(stream);
    h
}

/// (priority fields, header block fragment) of a HEADERS payload, padding dropped.
fn split_headers_payload(flags: u8, payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut body = payload;
    let mut pad = 0;
    if flags & FLAG_PADDED != 0 {
        pad = *body.first()? as usize;
        body = &body[1..];
    }
    let prio = if flags & FLAG_PRIORITY != 0 { 5 } else { 0 };
    if body.len() < prio + pad {
        return None;
    }
    Some((&body[..prio], &body[prio..body.len() - pad]))
}

/// Emits a header block as HEADERS (+ CONTINUATION) frames, END_HEADERS on the last.
fn emit_block(out: &mut Vec<u8>, frame: [u8; FRAME_HEADER], priority: &[u8], block: &[u8]) {
    let stream = &frame[5..];
    let end_stream = frame[4] & 0x1;
    let prio_flag = frame[4] & FLAG_PRIORITY;
    let first_room = MAX_FRAME - priority.len();
    let (first, mut rest) = block.split_at(block.len().min(first_room));
    let flags = end_stream | prio_flag | if rest.is_empty() { FLAG_END_HEADERS } else { 0 };
    out.extend_from_slice(&frame_header(
        priority.len() + first.len(),
        TYPE_HEADERS,
        flags,
        stream,
    ));
    out.extend_from_slice(priority);
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let (chunk, more) = rest.split_at(rest.len().min(MAX_FRAME));
        let flags = if more.is_empty() { FLAG_END_HEADERS } else { 0 };
        out.extend_from_slice(&frame_header(chunk.len(), TYPE_CONTINUATION, flags, stream));
        out.extend_from_slice(chunk);
        rest = more;
    }
}

/// What was collected so far, as it came (padding aside), when rewriting gave up.
fn emit_original(out: &mut Vec<u8>, frame: [u8; FRAME_HEADER], priority: &[u8], block: &[u8]) {
    let stream = &frame[5..];
    let flags = frame[4] & !(FLAG_PADDED | FLAG_END_HEADERS);
    out.extend_from_slice(&frame_header(
        priority.len() + block.len(),
        TYPE_HEADERS,
        flags,
        stream,
    ));
    out.extend_from_slice(priority);
    out.extend_from_slice(block);
}

/// An HPACK integer with an `n`-bit prefix at `buf[*pos]`; advances `pos`.
fn read_int(buf: &[u8], pos: &mut usize, n: u32) -> Option<u64> {
    let mask = (1u64 << n) - 1;
    let mut value = *buf.get(*pos)? as u64 & mask;
    *pos += 1;
    if value < mask {
        return Some(value);
    }
    let mut shift = 0;
    loop {
        let b = *buf.get(*pos)? as u64;
        *pos += 1;
        value = value.checked_add((b & 0x7f).checked_shl(shift)?)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift > 56 {
            return None;
        }
    }
}

/// Skips an HPACK string literal at `pos`.
fn skip_string(buf: &[u8], pos: &mut usize) -> Option<()> {
    let len = read_int(buf, pos, 7)? as usize;
    *pos = pos.checked_add(len).filter(|end| *end <= buf.len())?;
    Some(())
}

/// One parsed HPACK representation.
struct Field {
    start: usize,
    end: usize,
    /// Static/dynamic table index (of the field, or of the name for literals); 0 = literal
    /// name; `None` for a table size update.
    index: Option<u64>,
    /// Literal representations: the first byte's pattern (0x40, 0x10 or 0x00) and where
    /// the value string starts.
    literal: Option<(u8, usize)>,
}

/// HPACK static table indexes 1..=14 name pseudo-headers.
const LAST_PSEUDO_INDEX: u64 = 14;
const STATIC_TABLE_LEN: u64 = 61;

fn parse_block(block: &[u8]) -> Option<Vec<Field>> {
    let mut fields = Vec::new();
    let mut pos = 0;
    while pos < block.len() {
        let start = pos;
        let b = block[pos];
        let field = if b & 0x80 != 0 {
            let index = read_int(block, &mut pos, 7)?;
            Field {
                start,
                end: pos,
                index: Some(index),
                literal: None,
            }
        } else if b & 0xE0 == 0x20 {
            read_int(block, &mut pos, 5)?;
            Field {
                start,
                end: pos,
                index: None,
                literal: None,
            }
        } else {
            let (prefix, pattern) = if b & 0xC0 == 0x40 {
                (6, 0x40u8)
            } else {
                (4, b & 0xF0)
            };
            let index = read_int(block, &mut pos, prefix)?;
            if index == 0 {
                skip_string(block, &mut pos)?;
            }
            let value_at = pos;
            skip_string(block, &mut pos)?;
            Field {
                start,
                end: pos,
                index: Some(index),
                literal: Some((pattern, value_at)),
            }
        };
        fields.push(field);
    }
    Some(fields)
}

/// Surely a regular (non-pseudo) header: a literal name (encoders name pseudo-headers by
/// their static index), or a static entry past the pseudo-headers. A dynamic entry might be
/// anything.
fn surely_regular(f: &Field) -> bool {
    match f.index {
        None => true,
        Some(0) => f.literal.is_some(),
        Some(i) => i > LAST_PSEUDO_INDEX && i <= STATIC_TABLE_LEN,
    }
}

/// The header block with `:authority` literals (static name index) renamed, where no
/// pseudo-header can follow them (a regular header before a pseudo-header is malformed;
/// grpc-go sends `:authority` last). `None` when nothing was renamed or the block does not
/// parse.
fn rename_authority(block: &[u8]) -> Option<Vec<u8>> {
    let fields = parse_block(block)?;
    let mut out = Vec::with_capacity(block.len() + 16);
    let mut changed = false;
    for (i, f) in fields.iter().enumerate() {
        match f.literal {
            Some((pattern, value_at))
                if f.index == Some(AUTHORITY_INDEX)
                    && fields[i + 1..].iter().all(surely_regular) =>
            {
                out.push(pattern);
                out.push(RENAMED.len() as u8);
                out.extend_from_slice(RENAMED);
                out.extend_from_slice(&block[value_at..f.end]);
                changed = true;
            }
            _ => out.extend_from_slice(&block[f.start..f.end]),
        }
    }
    changed.then_some(out)
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityFix<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output[..n]);
                this.output.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // Whatever could not be completed goes through as it is.
                if !this.input.is_empty() {
                    this.output.append(&mut this.input);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    if rb.filled().is_empty() {
                        this.eof = true;
                    } else {
                        this.input.extend_from_slice(rb.filled());
                        this.process();
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for AuthorityFix<tokio::net::TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_literals_are_renamed_and_the_rest_kept() {
        // :method GET (indexed 2), :authority "a://b" with incremental indexing (name index 1),
        // then a literal name/value without indexing.
        let mut block = vec![0x82, 0x41, 5];
        block.extend_from_slice(b"a://b");
        block.extend_from_slice(&[0x00, 1, b'k', 1, b'v']);
        let out = rename_authority(&block).expect("renamed");
        let mut want = vec![0x82, 0x40, 10];
        want.extend_from_slice(RENAMED);
        want.extend_from_slice(&[5]);
        want.extend_from_slice(b"a://b");
        want.extend_from_slice(&[0x00, 1, b'k', 1, b'v']);
        assert_eq!(out, want);
        // The never-indexed form keeps its kind.
        let mut want = vec![0x10, 10];
        want.extend_from_slice(RENAMED);
        want.extend_from_slice(&[1, b'x']);
        assert_eq!(rename_authority(&[0x11, 1, b'x']).unwrap(), want);
        // Nothing to rename, or garbage: left alone.
        assert!(rename_authority(&[0x82, 0x84]).is_none());
        // A pseudo-header (:path, static 4) or a dynamic entry after it: kept as it is.
        assert!(rename_authority(&[0x41, 1, b'h', 0x84]).is_none());
        assert!(rename_authority(&[0x41, 1, b'h', 0xbe]).is_none());
        assert!(rename_authority(&[0x41, 200]).is_none());
    }

    #[tokio::test]
    async fn headers_frames_are_rewritten_and_other_frames_stream_through() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut block = vec![0x82, 0x41, 3];
        block.extend_from_slice(b"h:1");
        // HEADERS split over a CONTINUATION, then a DATA frame.
        let mut wire = PREFACE.to_vec();
        wire.extend_from_slice(&frame_header(2, TYPE_HEADERS, 0x1, &[0, 0, 0, 1]));
        wire.extend_from_slice(&block[..2]);
        wire.extend_from_slice(&frame_header(
            block.len() - 2,
            TYPE_CONTINUATION,
            FLAG_END_HEADERS,
            &[0, 0, 0, 1],
        ));
        wire.extend_from_slice(&block[2..]);
        wire.extend_from_slice(&frame_header(4, 0x0, 0x1, &[0, 0, 0, 1]));
        wire.extend_from_slice(b"data");
        let (mut client, server) = tokio::io::duplex(7);
        let writer = tokio::spawn(async move {
            client.write_all(&wire).await.unwrap();
            client.shutdown().await.unwrap();
        });
        let mut fixed = AuthorityFix::new(server);
        let mut got = Vec::new();
        fixed.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        let renamed = rename_authority(&block).unwrap();
        let mut want = PREFACE.to_vec();
        want.extend_from_slice(&frame_header(
            renamed.len(),
            TYPE_HEADERS,
            0x1 | FLAG_END_HEADERS,
            &[0, 0, 0, 1],
        ));
        want.extend_from_slice(&renamed);
        want.extend_from_slice(&frame_header(4, 0x0, 0x1, &[0, 0, 0, 1]));
        want.extend_from_slice(b"data");
        assert_eq!(got, want);
    }
}
