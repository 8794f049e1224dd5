//! the Transport trait: SSH (russh) and local
