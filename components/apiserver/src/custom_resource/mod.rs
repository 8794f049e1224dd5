//! One served version of a CRD as the registry and the generic handlers need it: its schema
//! (validation, defaulting, pruning, CEL rules, structural-schema checks), printer columns and scale
//! paths. Pure data and schema logic, below the registry (which points at it from a
//! `ResourceSpec`); `crate::crd` builds these from CRD objects and runs the controller.

pub mod defaulting;
pub mod formats;
pub mod prune;
pub mod schema;
pub mod structural;

use serde_json::Value;

use crate::status::Cause;

/// The finalizer a CRD carries until its custom resources are gone, as upstream's.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// One served version of a CRD, as the generic handlers need it.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomResource {
    /// `<plural>.<group>`.
    pub crd_name: String,
    /// This version's `openAPIV3Schema`; `None` only for objects stored before a schema existed.
    pub schema: Option<Value>,
    /// The version objects are stored in (every version shares one key space).
    pub storage_version: String,
    pub printer_columns: Vec<PrinterColumn>,
    pub scale: Option<CustomScale>,
    /// `deprecationWarning` (or upstream's default text) when the version is deprecated.
    pub deprecation: Option<String>,
    /// The CRD is being deleted: objects are read and deleted, never created.
    pub terminating: bool,
    /// The schema declares a default somewhere: reads apply it too ("defaulting from storage"), so
    /// objects stored before the default existed show it.
    pub has_defaults: bool,
    /// The CRD's store revision when this schema was first served: objects written after it were
    /// defaulted on write with this very schema, so list reads skip decoding them for defaults.
    pub defaults_since: i64,
    /// `spec.conversion.webhook` when the CRD converts between versions with a webhook.
    pub conversion_webhook: Option<Value>,
}

/// One `additionalPrinterColumns[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: u8,
    /// Kubernetes JSONPath without braces (`.spec.replicas`).
    pub json_path: String,
}

/// `subresources.scale`: where replicas and the selector live, as JSON pointers.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomScale {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

impl CustomResource {
    /// Schema defaults, applied on every write (and so kept by updates that omit a defaulted field).
    pub fn apply_defaults(&self, obj: &mut Value) {
        if let Some(schema) = &self.schema {
            defaulting::apply(schema, obj);
        }
    }

    /// Drops fields the schema does not know; returns their paths (for `fieldValidation=Strict`).
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        match &self.schema {
            Some(schema) => prune::prune_object(schema, obj),
            None => Vec::new(),
        }
    }

    /// Schema and CEL validation of a whole object; `old` is the stored object on update.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        match &self.schema {
            Some(schema) => schema::validate_object(schema, obj, old),
            None => Vec::new(),
        }
    }
}
