#!/usr/bin/env bash
# kiln's tests: unit, in-process integration (real etcd, etcdctl, kubectl, sshd) and lab end-to-end (root).
# The end-to-end tests start the built binaries (kiln, kiln-store, ...), so build them first.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
# --all-targets: the same feature resolution as `cargo test`, so nothing (RocksDB!) is built twice.
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast "$@"
