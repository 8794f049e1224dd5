//! kiln-controller-manager
