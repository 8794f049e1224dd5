//! A tonic codec for [`Frame`]s (prost-encoded by hand, so the crate needs no generated code
//! and no extra codec crate).

use bytes::{Buf, BufMut};
use prost::Message as _;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::peer::Frame;

#[derive(Debug, Clone, Copy, Default)]
pub struct FrameCodec;

#[derive(Debug, Clone, Copy, Default)]
pub struct FrameEncoder;

#[derive(Debug, Clone, Copy, Default)]
pub struct FrameDecoder;

impl Codec for FrameCodec {
    type Encode = Frame;
    type Decode = Frame;
    type Encoder = FrameEncoder;
    type Decoder = FrameDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        FrameEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        FrameDecoder
    }
}

impl Encoder for FrameEncoder {
    type Item = Frame;
    type Error = Status;

    fn encode(&mut self, item: Frame, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        let bytes = item.encode_to_vec();
        dst.put_slice(&bytes);
        Ok(())
    }
}

impl Decoder for FrameDecoder {
    type Item = Frame;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Frame>, Status> {
        let mut bytes = vec![0u8; src.remaining()];
        src.copy_to_slice(&mut bytes);
        Frame::decode(bytes.as_slice())
            .map(Some)
            .map_err(|e| Status::internal(format!("bad peer frame: {e}")))
    }
}
