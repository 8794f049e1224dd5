//! The adapters clients and peers talk to, thin over the member layer: etcd's v3 gRPC
//! services and the peer transport's server (`grpc`; member errors become tonic statuses there)
//! and the HTTP endpoints (`http`: /health, /metrics).

pub mod grpc;
pub mod http;
