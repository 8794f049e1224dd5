//! kiln-scheduler
