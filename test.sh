#!/usr/bin/env bash
# kiln's tests: unit, in-process integration (real etcd, etcdctl, kubectl, sshd) and lab end-to-end (root).
# The end-to-end tests start the built binaries (kiln, kiln-store, ...), so build them first.
# Usage: ./test.sh [cargo test options] [-- test-binary options], e.g. `./test.sh -- --include-ignored`.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
# --all-targets: the same feature resolution as `cargo test`, so nothing (RocksDB!) is built twice.
cargo build --workspace --all-targets

cargo_args=() test_args=()
seen_dashes=0
for a in "$@"; do
  if [ "$seen_dashes" = 0 ] && [ "$a" = "--" ]; then seen_dashes=1; continue; fi
  if [ "$seen_dashes" = 0 ]; then cargo_args+=("$a"); else test_args+=("$a"); fi
done

logs=$(mktemp -d /tmp/kiln-test.XXXXXX)
rc=0

# The conformance lab test (tests/conformance/tests/lab.rs) mostly waits on its cluster for ~18 minutes, so it
# runs beside the rest instead of after it: its own executable, from its package dir as cargo would run it.
# Its output is printed after the rest, whole; the digest at the end names what failed in either. The other
# 3-host labs (the kiln-tests package, run last) wait for it to end (KILN_TESTS_AFTER, tests/lib.rs): it
# overlaps the unit, in-process and component tests, never a second big cluster.
CONFORMANCE=the_conformance_list_on_a_three_host_lab
conf_pid=
only_flags=1
for a in "${test_args[@]}"; do [[ "$a" == --* ]] || only_flags=0; done
# Only for a whole-workspace run with no test name filter (a narrower run is cargo's alone).
if [ "${#cargo_args[@]}" = 0 ] && [ "$only_flags" = 1 ]; then
  # --workspace (not -p): the same feature resolution as the build above, so this only lists.
  conf_exe=$(cargo test --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if (m.get("reason") == "compiler-artifact" and m["target"]["name"] == "lab" and m.get("executable")
            and m["manifest_path"].endswith("tests/conformance/Cargo.toml")):
        print(m["executable"])')
  [ -x "$conf_exe" ] || { echo "test.sh: the conformance lab test executable was not found" >&2; exit 1; }
  # The marker is written whatever the exit status (set -e holds in the subshell too: a failing run that
  # skipped it once left the labs below waiting out their whole bound, 45 minutes).
  (cd tests/conformance && conf_status=0 &&
   { "$conf_exe" --exact "$CONFORMANCE" "${test_args[@]}" >"$logs/conformance.log" 2>&1 || conf_status=$?; }
   echo "$conf_status" >"$logs/conformance.rc") &
  conf_pid=$!
  test_args+=(--skip "$CONFORMANCE")
  export KILN_TESTS_AFTER="$logs/conformance.rc"
fi

# pipefail: the pipeline fails when cargo does.
cargo test --workspace --no-fail-fast "${cargo_args[@]}" -- "${test_args[@]}" 2>&1 | tee "$logs/workspace.log" ||
  rc=$?

if [ -n "$conf_pid" ]; then
  wait "$conf_pid" || true
  echo "==== $CONFORMANCE (ran beside the rest) ===="
  cat "$logs/conformance.log"
  conf_rc=$(cat "$logs/conformance.rc" 2>/dev/null || echo 1)
  [ "$conf_rc" = 0 ] || rc=$conf_rc
fi

# CI shows the head and the tail of this output: end with what failed and why, one short block per test.
if [ "$rc" != 0 ]; then
  echo "==== failure digest (whole output: $logs) ===="
  cat "$logs"/*.log | .ci/failure-digest
  [ "${conf_rc:-0}" = 0 ] || echo "    \`-p kiln-conformance --test lab\` (beside the rest; exit $conf_rc)"
fi
exit "$rc"
