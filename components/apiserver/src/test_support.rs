//! Helpers shared by the crate's unit tests.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// A header map from name/value pairs, repeated names appended (as a client sends them).
pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).expect("a header name"),
            HeaderValue::from_str(v).expect("a header value"),
        );
    }
    h
}
