//! CustomResourceDefinitions (apiextensions.k8s.io/v1): every served version of an established CRD
//! becomes a `ResourceSpec` in the registry, so custom resources go through the same generic handlers
//! as built-in kinds. What differs per CRD — its schema (validation, defaulting, pruning, CEL rules),
//! printer columns, scale paths and selectable fields — is data in a
//! [`CustomResource`](crate::custom_resource::CustomResource) the spec points at (`crate::custom_resource`,
//! below the registry). `controller.rs` keeps the registry and the CRDs' status in step with the
//! store; `cleanup.rs` removes a deleted CRD's objects.

pub mod build;
pub mod cleanup;
pub mod columns;
pub mod controller;
pub mod conversion;
pub mod convert;
pub mod names;
