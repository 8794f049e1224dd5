//! Watch fragmentation: a watcher created with `fragment: true` gets a response larger than
//! --max-request-bytes split into several, `fragment` set on all but the last; a watcher
//! without it gets the one big response. The etcd-client crate has no fragment flag on its
//! responses, so the flag is checked with a raw gRPC client speaking etcd's protobuf.

mod common;

use bytes::{Buf, BufMut};
use etcd_client::proto::PbWatchResponse;
use etcd_client::{Txn, TxnOp, WatchOptions};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Status;

const LIMIT: usize = 64 * 1024;
const VALUE: usize = 20 * 1024;
const KEYS: usize = 10;

/// etcd's WatchCreateRequest, the fields this test sets.
#[derive(Clone, PartialEq, prost::Message)]
struct CreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    start_revision: i64,
    #[prost(bool, tag = "8")]
    fragment: bool,
}

/// etcd's WatchRequest with only its create_request arm.
#[derive(Clone, PartialEq, prost::Message)]
struct WatchRequest {
    #[prost(message, optional, tag = "1")]
    create_request: Option<CreateRequest>,
}

#[derive(Clone, Copy, Default)]
struct RawCodec;
#[derive(Clone, Copy, Default)]
struct RawEncoder;
#[derive(Clone, Copy, Default)]
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = WatchRequest;
    type Decode = PbWatchResponse;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = WatchRequest;
    type Error = Status;
    fn encode(&mut self, item: WatchRequest, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item.encode_to_vec());
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = PbWatchResponse;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<PbWatchResponse>, Status> {
        let mut bytes = vec![0u8; src.remaining()];
        src.copy_to_slice(&mut bytes);
        PbWatchResponse::decode(bytes.as_slice())
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

/// Watches the prefix from `start` over a raw stream; returns the responses that carry
/// events, until `KEYS` events arrived.
async fn raw_watch(addr: std::net::SocketAddr, start: i64, fragment: bool) -> Vec<PbWatchResponse> {
    let channel = tonic::transport::Endpoint::from_shared(common::endpoint(addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(16 << 20);
    grpc.ready().await.unwrap();
    let create = WatchRequest {
        create_request: Some(CreateRequest {
            key: b"/frag/".to_vec(),
            range_end: b"/frag0".to_vec(),
            start_revision: start,
            fragment,
        }),
    };
    // Keep the request stream open (a closed one ends the watch).
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(create).await.unwrap();
    let mut stream = grpc
        .streaming(
            tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
            PathAndQuery::from_static("/etcdserverpb.Watch/Watch"),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    let mut events = 0;
    while events < KEYS {
        let resp = tokio::time::timeout(common::WAIT, stream.message())
            .await
            .expect("watch response in time")
            .unwrap()
            .expect("stream open");
        if !resp.events.is_empty() {
            events += resp.events.len();
            got.push(resp);
        }
    }
    drop(tx);
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_watch_responses_are_fragmented_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.max_request_bytes = LIMIT;
    let store = common::start_with(config).await;
    let mut c = common::client(store.client_addr()).await;

    // A live watcher through etcd-client, with fragments on.
    let mut live = c
        .watch(
            "/frag/",
            Some(WatchOptions::new().with_prefix().with_fragment()),
        )
        .await
        .unwrap();
    // One revision with ten 20 KiB values: ~200 KiB of events, over three times the limit.
    let ops: Vec<TxnOp> = (0..KEYS)
        .map(|i| TxnOp::put(format!("/frag/{i}"), vec![b'x'; VALUE], None))
        .collect();
    let rev = c
        .txn(Txn::new().and_then(ops))
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();

    // History replay, fragments requested: several responses, each under the limit, all
    // flagged but the last, events complete and in order.
    let parts = raw_watch(store.client_addr(), rev, true).await;
    assert!(parts.len() >= 3, "{} responses", parts.len());
    for (i, p) in parts.iter().enumerate() {
        assert!(
            p.encoded_len() < LIMIT,
            "fragment {i} is {} bytes",
            p.encoded_len()
        );
        assert_eq!(p.fragment, i + 1 < parts.len(), "fragment flag of part {i}");
    }
    let keys: Vec<String> = parts
        .iter()
        .flat_map(|p| &p.events)
        .map(|e| String::from_utf8_lossy(&e.kv.as_ref().unwrap().key).into_owned())
        .collect();
    let expected: Vec<String> = (0..KEYS).map(|i| format!("/frag/{i}")).collect();
    assert_eq!(keys, expected);

    // Without the flag the revision comes whole.
    let whole = raw_watch(store.client_addr(), rev, false).await;
    assert_eq!(whole.len(), 1);
    assert!(!whole[0].fragment);
    assert!(whole[0].encoded_len() > LIMIT);

    // The live watcher got the same events split over several responses.
    let mut live_events = 0;
    let mut responses = 0;
    while live_events < KEYS {
        let resp = tokio::time::timeout(common::WAIT, live.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if !resp.events().is_empty() {
            responses += 1;
            live_events += resp.events().len();
        }
    }
    assert_eq!(live_events, KEYS);
    assert!(responses >= 3, "{responses} live responses");
    store.shutdown().await;
}
