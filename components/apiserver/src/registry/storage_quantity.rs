//! resource.Quantity, shared with the controller-manager's quota controller: see
//! `kiln_common::quantity`.

pub use kiln_common::quantity::*;
