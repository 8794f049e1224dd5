//! KV service: Range, Put, DeleteRange, Txn, Compact.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;

use etcd_client::proto::{
    PbCompactionRequest, PbCompactionResponse, PbDeleteRequest, PbDeleteResponse, PbKvService,
    PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse, PbRangeStreamResponse,
    PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp, PbTxnResponse,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::command::{store_request::Op, store_response::Result as Res};
use crate::etcd_error::EtcdError;
use crate::member::context::StoreContext;
use crate::storage::mvcc::read::RangeEnd;
use crate::storage::mvcc::MvccError;

/// etcd's default --max-txn-ops.
const MAX_TXN_OPS: usize = 128;

pub struct KvService {
    ctx: Arc<StoreContext>,
}

impl KvService {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }
}

pub fn mvcc_status(e: MvccError) -> Status {
    match e {
        MvccError::Etcd(e) => Status::from(e),
        other => {
            tracing::error!(error = %other, "store read failed");
            Status::internal(other.to_string())
        }
    }
}

fn unexpected() -> Status {
    Status::internal("state machine returned a response of another kind")
}

fn check_range(r: &PbRangeRequest) -> Result<(), Status> {
    if r.key.is_empty() {
        return Err(EtcdError::EmptyKey.into());
    }
    if !(0..=2).contains(&r.sort_order) || !(0..=4).contains(&r.sort_target) {
        return Err(Status::invalid_argument("etcdserver: invalid sort option"));
    }
    Ok(())
}

fn check_put(r: &PbPutRequest) -> Result<(), Status> {
    if r.key.is_empty() {
        return Err(EtcdError::EmptyKey.into());
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(EtcdError::ValueProvided.into());
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(EtcdError::LeaseProvided.into());
    }
    Ok(())
}

fn check_delete(r: &PbDeleteRequest) -> Result<(), Status> {
    if r.key.is_empty() {
        return Err(EtcdError::EmptyKey.into());
    }
    Ok(())
}

fn check_txn(r: &PbTxnRequest) -> Result<(), Status> {
    if r.compare.len() > MAX_TXN_OPS
        || r.success.len() > MAX_TXN_OPS
        || r.failure.len() > MAX_TXN_OPS
    {
        return Err(EtcdError::TooManyOps.into());
    }
    for c in &r.compare {
        if c.key.is_empty() {
            return Err(EtcdError::EmptyKey.into());
        }
    }
    for op in r.success.iter().chain(&r.failure) {
        match &op.request {
            Some(PbTxnOpRequest::RequestRange(x)) => check_range(x)?,
            Some(PbTxnOpRequest::RequestPut(x)) => check_put(x)?,
            Some(PbTxnOpRequest::RequestDeleteRange(x)) => check_delete(x)?,
            Some(PbTxnOpRequest::RequestTxn(x)) => check_txn(x)?,
            None => {}
        }
    }
    check_intervals(&r.success)?;
    check_intervals(&r.failure)?;
    Ok(())
}

type Dels = Vec<(Vec<u8>, RangeEnd)>;

fn deleted(dels: &Dels, key: &[u8]) -> bool {
    dels.iter().any(|(start, end)| end.contains(start, key))
}

/// etcd's checkIntervals: within one branch no key is put twice or put and deleted; the two
/// branches of a nested txn may put the same key because only one of them runs.
fn check_intervals(ops: &[PbTxnRequestOp]) -> Result<(HashSet<Vec<u8>>, Dels), Status> {
    let dup = || Status::from(EtcdError::DuplicateKey);
    let mut dels: Dels = ops
        .iter()
        .filter_map(|op| match &op.request {
            Some(PbTxnOpRequest::RequestDeleteRange(d)) => {
                Some((d.key.clone(), RangeEnd::from_request(&d.range_end)))
            }
            _ => None,
        })
        .collect();
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        let Some(PbTxnOpRequest::RequestTxn(t)) = &op.request else {
            continue;
        };
        let (puts_then, dels_then) = check_intervals(&t.success)?;
        let (puts_else, dels_else) = check_intervals(&t.failure)?;
        for k in &puts_then {
            if puts.contains(k) || deleted(&dels, k) {
                return Err(dup());
            }
            puts.insert(k.clone());
        }
        for k in &puts_else {
            if (puts.contains(k) && !puts_then.contains(k)) || deleted(&dels, k) {
                return Err(dup());
            }
            puts.insert(k.clone());
        }
        dels.extend(dels_then);
        dels.extend(dels_else);
    }
    for op in ops {
        let Some(PbTxnOpRequest::RequestPut(p)) = &op.request else {
            continue;
        };
        if puts.contains(&p.key) || deleted(&dels, &p.key) {
            return Err(dup());
        }
        puts.insert(p.key.clone());
    }
    Ok((puts, dels))
}

/// (has writes, every range serializable) over the whole txn tree.
fn txn_shape(r: &PbTxnRequest) -> (bool, bool) {
    let mut writes = false;
    let mut serializable = true;
    for op in r.success.iter().chain(&r.failure) {
        match &op.request {
            Some(PbTxnOpRequest::RequestRange(x)) => serializable &= x.serializable,
            Some(PbTxnOpRequest::RequestPut(_)) | Some(PbTxnOpRequest::RequestDeleteRange(_)) => {
                writes = true
            }
            Some(PbTxnOpRequest::RequestTxn(x)) => {
                let (w, s) = txn_shape(x);
                writes |= w;
                serializable &= s;
            }
            None => {}
        }
    }
    (writes, serializable)
}

#[tonic::async_trait]
impl PbKvService for KvService {
    async fn range(
        &self,
        request: Request<PbRangeRequest>,
    ) -> Result<Response<PbRangeResponse>, Status> {
        let user = self.ctx.auth.key_caller(&request)?;
        let r = request.into_inner();
        check_range(&r)?;
        self.ctx.auth.state().check_range(&user, &r)?;
        if !r.serializable {
            self.ctx.linearizable().await?;
        }
        let mvcc = self.ctx.mvcc.clone();
        let mut resp = tokio::task::spawn_blocking(move || mvcc.range(&r))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(mvcc_status)?;
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    type RangeStreamStream =
        Pin<Box<dyn Stream<Item = Result<PbRangeStreamResponse, Status>> + Send + 'static>>;

    async fn range_stream(
        &self,
        _request: Request<PbRangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        // Not an etcd method: grpc-go's answer for a method a server does not know.
        Err(Status::unimplemented(
            "unknown method RangeStream for service etcdserverpb.KV",
        ))
    }

    async fn put(&self, request: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        let caller = self.ctx.auth.key_writer(&request)?;
        let r = request.into_inner();
        check_put(&r)?;
        self.ctx.auth.state().check_put(&caller.username, &r)?;
        let Res::Put(mut resp) = self.ctx.write_as(Op::Put(r), caller).await? else {
            return Err(unexpected());
        };
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn delete_range(
        &self,
        request: Request<PbDeleteRequest>,
    ) -> Result<Response<PbDeleteResponse>, Status> {
        let caller = self.ctx.auth.key_writer(&request)?;
        let r = request.into_inner();
        check_delete(&r)?;
        self.ctx.auth.state().check_delete(&caller.username, &r)?;
        let Res::DeleteRange(mut resp) = self.ctx.write_as(Op::DeleteRange(r), caller).await?
        else {
            return Err(unexpected());
        };
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn txn(&self, request: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        let caller = self.ctx.auth.key_writer(&request)?;
        let r = request.into_inner();
        check_txn(&r)?;
        self.ctx.auth.state().check_txn(&caller.username, &r)?;
        let (writes, serializable) = txn_shape(&r);
        let mut resp = if writes {
            let Res::Txn(resp) = self.ctx.write_as(Op::Txn(r), caller).await? else {
                return Err(unexpected());
            };
            resp
        } else {
            if !serializable {
                self.ctx.linearizable().await?;
            }
            let mvcc = self.ctx.mvcc.clone();
            tokio::task::spawn_blocking(move || mvcc.read_only_txn(&r))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(mvcc_status)?
        };
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn compact(
        &self,
        request: Request<PbCompactionRequest>,
    ) -> Result<Response<PbCompactionResponse>, Status> {
        let r = request.into_inner();
        let Res::Compact(mut resp) = self.ctx.write(Op::Compact(r)).await? else {
            return Err(unexpected());
        };
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str) -> PbTxnRequestOp {
        PbTxnRequestOp {
            request: Some(PbTxnOpRequest::RequestPut(PbPutRequest {
                key: key.into(),
                ..Default::default()
            })),
        }
    }

    fn del_prefix(key: &str, end: &str) -> PbTxnRequestOp {
        PbTxnRequestOp {
            request: Some(PbTxnOpRequest::RequestDeleteRange(PbDeleteRequest {
                key: key.into(),
                range_end: end.into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn duplicate_puts_and_put_in_deleted_range_are_refused() {
        assert!(check_intervals(&[put("a"), put("b")]).is_ok());
        assert!(check_intervals(&[put("a"), put("a")]).is_err());
        assert!(check_intervals(&[put("a/1"), del_prefix("a/", "a0")]).is_err());
    }

    #[test]
    fn nested_branches_may_put_the_same_key() {
        let nested = PbTxnRequestOp {
            request: Some(PbTxnOpRequest::RequestTxn(PbTxnRequest {
                success: vec![put("k")],
                failure: vec![put("k")],
                ..Default::default()
            })),
        };
        assert!(check_intervals(std::slice::from_ref(&nested)).is_ok());
        assert!(check_intervals(&[nested, put("k")]).is_err());
    }
}
