//! shared helpers for the cross-crate tests
