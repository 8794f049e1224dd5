//! How a storage failure reads as an API Status: etcd being unreachable is a 503 clients retry,
//! anything else a 500.

use crate::status::ApiError;
use crate::storage::StoreError;

pub fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Etcd(e) => ApiError::unavailable(format!("storage unavailable: {e}")),
        other => ApiError::internal(other.to_string()),
    }
}
