//! Code shared by kiln's components and its CLI that must not pull in their heavy dependencies.

pub mod store_snapshot;
