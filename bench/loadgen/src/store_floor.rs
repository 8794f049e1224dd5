//! The floor under any durable etcd put on this machine: an etcd v3 KV server (the same tonic /
//! HTTP/2 stack as kiln-store) whose Put does nothing but what a put cannot skip — append the
//! request to a preallocated, zero-filled log file, fdatasync it, answer — right in the handler,
//! with no Raft, no state machine and no hand-off to another thread. `bench/store.sh` runs the
//! 1-client put load against it beside kiln-store and etcd, so the ratio the goal asks for can be
//! read against what the disk and the client leave possible (like `cri-floor` for pod starts).
//! Not a store: it keeps no index, reads nothing back, and answers every Range empty (enough for
//! `etcdctl endpoint health`). Only 127.0.0.1.

use std::fs::{File, OpenOptions};
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Mutex;

use etcd_client::proto::{
    PbCompactionRequest, PbCompactionResponse, PbDeleteRequest, PbDeleteResponse, PbKvServer,
    PbKvService, PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse,
    PbRangeStreamResponse, PbResponseHeader, PbTxnRequest, PbTxnResponse,
};
use futures::Stream;
use tonic::{Request, Response, Status};

/// The log file's size; appends wrap around to the start when they reach its end.
const LOG_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    #[error("store floor log {path}: {source}")]
    Log { path: String, source: io::Error },
    #[error("store floor: listen {addr} must be a 127.0.0.1 address")]
    NotLoopback { addr: SocketAddr },
    #[error("store floor server on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        source: tonic::transport::Error,
    },
}

struct Log {
    file: File,
    size: u64,
    at: u64,
    revision: i64,
}

pub struct Floor {
    log: Mutex<Log>,
}

impl Floor {
    /// Creates the log at `path`, written through with zeros so appends change no file
    /// metadata (etcd's WAL preallocates its segments for the same reason).
    pub fn create(path: &Path, size: u64) -> Result<Self, FloorError> {
        let err = |source| FloorError::Log {
            path: path.display().to_string(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(err)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < size {
            let n = (size - at).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], at).map_err(err)?;
            at += n as u64;
        }
        file.sync_all().map_err(err)?;
        Ok(Self {
            log: Mutex::new(Log {
                file,
                size,
                at: 0,
                revision: 1,
            }),
        })
    }

    /// Appends one record (length, key, value) and syncs it; returns the put's revision.
    fn append(&self, key: &[u8], value: &[u8]) -> io::Result<i64> {
        let mut record = Vec::with_capacity(8 + key.len() + value.len());
        record.extend_from_slice(&(key.len() as u32).to_le_bytes());
        record.extend_from_slice(&(value.len() as u32).to_le_bytes());
        record.extend_from_slice(key);
        record.extend_from_slice(value);
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if log.at + record.len() as u64 > log.size {
            log.at = 0;
        }
        log.file.write_all_at(&record, log.at)?;
        log.file.sync_data()?;
        log.at += record.len() as u64;
        log.revision += 1;
        Ok(log.revision)
    }
}

fn header(revision: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader {
        cluster_id: 1,
        member_id: 1,
        revision,
        raft_term: 1,
    })
}

fn unsupported() -> Status {
    Status::unimplemented("the store floor serves Put (and an empty Range) only")
}

#[tonic::async_trait]
impl PbKvService for Floor {
    async fn range(
        &self,
        _request: Request<PbRangeRequest>,
    ) -> Result<Response<PbRangeResponse>, Status> {
        Ok(Response::new(PbRangeResponse {
            header: header(0),
            ..Default::default()
        }))
    }

    type RangeStreamStream =
        Pin<Box<dyn Stream<Item = Result<PbRangeStreamResponse, Status>> + Send + 'static>>;

    async fn range_stream(
        &self,
        _request: Request<PbRangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        Err(unsupported())
    }

    async fn put(&self, request: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        let r = request.into_inner();
        // On the handler's own thread: a hand-off to another thread is exactly the cost this
        // floor leaves out.
        let revision = self
            .append(&r.key, &r.value)
            .map_err(|e| Status::internal(format!("store floor log: {e}")))?;
        Ok(Response::new(PbPutResponse {
            header: header(revision),
            prev_kv: None,
        }))
    }

    async fn delete_range(
        &self,
        _request: Request<PbDeleteRequest>,
    ) -> Result<Response<PbDeleteResponse>, Status> {
        Err(unsupported())
    }

    async fn txn(
        &self,
        _request: Request<PbTxnRequest>,
    ) -> Result<Response<PbTxnResponse>, Status> {
        Err(unsupported())
    }

    async fn compact(
        &self,
        _request: Request<PbCompactionRequest>,
    ) -> Result<Response<PbCompactionResponse>, Status> {
        Err(unsupported())
    }
}

/// Serves the floor on `addr` (127.0.0.1 only) with its log at `log`, until killed.
pub async fn serve(addr: SocketAddr, log: &Path) -> Result<(), FloorError> {
    if !addr.ip().is_loopback() {
        return Err(FloorError::NotLoopback { addr });
    }
    let floor = Floor::create(log, LOG_BYTES)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| FloorError::Log {
            path: addr.to_string(),
            source,
        })?;
    // Like kiln-store's client listener (server.rs): Nagle off on every accepted connection.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(PbKvServer::new(floor))
        .serve_with_incoming(incoming)
        .await
        .map_err(|source| FloorError::Serve { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_are_synced_in_order_and_wrap_at_the_end() {
        let dir = std::env::temp_dir().join(format!("kiln-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("floor.log");
        let floor = Floor::create(&path, 4096).unwrap();
        assert_eq!(floor.append(b"k", b"v1").unwrap(), 2);
        assert_eq!(floor.append(b"k", b"v2").unwrap(), 3);
        let mut head = [0u8; 11];
        floor
            .log
            .lock()
            .unwrap()
            .file
            .read_exact_at(&mut head, 0)
            .unwrap();
        assert_eq!(&head, b"\x01\0\0\0\x02\0\0\0kv1");
        // A second create on the same path is refused, naming it.
        let again = Floor::create(&path, 4096).err().unwrap().to_string();
        assert!(again.contains("floor.log"), "{again}");
        floor.log.lock().unwrap().at = 4096 - 4;
        floor.append(b"k", b"v3").unwrap();
        assert_eq!(floor.log.lock().unwrap().at, 11);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
