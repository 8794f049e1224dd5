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

# The conformance lab test (tests/conformance/tests/lab.rs) mostly waits on its cluster for ~30 minutes, so it
# runs beside the rest instead of after it: its own executable, from its package dir as cargo would run it.
# Its output is printed after the rest, whole; the digest at the end names what failed in either.
#
# The kiln-tests package (lab end-to-end tests, ~30 minutes one after another) runs after the rest, two
# executables at a time: a lab test keeps the two cores only about half busy (it waits on hosts, containerd
# and the cluster's timers). Its labs start only once the conformance run has ended (KILN_TESTS_AFTER,
# tests/lib.rs), so at most one big cluster shares the machine with the unit, in-process and component tests.
CONFORMANCE=the_conformance_list_on_a_three_host_lab
# The longest kiln-tests executables first, so neither of the two slots is left with a long one at the end.
KILN_TESTS_FIRST="upgrade acceptance workloads autoscaling snapshot_day2 join_control_plane dns apply"
conf_pid=
lab_exes=()
only_flags=1
for a in "${test_args[@]}"; do [[ "$a" == --* ]] || only_flags=0; done
# Only for a whole-workspace run with no test name filter (a narrower run is cargo's alone).
if [ "${#cargo_args[@]}" = 0 ] && [ "$only_flags" = 1 ]; then
  # --workspace (not -p): the same feature resolution as the build above, so this only lists.
  # Lines: "conformance <exe>" and "kiln-tests <target> <exe>".
  listing=$(cargo test --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t, manifest = m["target"], m["manifest_path"]
    if t["name"] == "lab" and manifest.endswith("tests/conformance/Cargo.toml"):
        print("conformance", m["executable"])
    elif manifest.endswith("/tests/Cargo.toml"):
        print("kiln-tests", t["name"], m["executable"])')
  conf_exe=$(awk '$1 == "conformance" { print $2 }' <<<"$listing")
  [ -x "$conf_exe" ] || { echo "test.sh: the conformance lab test executable was not found" >&2; exit 1; }
  # The marker is written whatever the exit status (set -e holds in the subshell too: a failing run that
  # skipped it once left the labs below waiting out their whole bound, 45 minutes).
  (cd tests/conformance && conf_status=0 &&
   { "$conf_exe" --exact "$CONFORMANCE" "${test_args[@]}" >"$logs/conformance.log" 2>&1 || conf_status=$?; }
   echo "$conf_status" >"$logs/conformance.rc") &
  conf_pid=$!
  test_args+=(--skip "$CONFORMANCE")
  export KILN_TESTS_AFTER="$logs/conformance.rc"
  # "<target> <exe>" lines, KILN_TESTS_FIRST's order first, then the rest by name.
  mapfile -t lab_exes < <(awk -v first="$KILN_TESTS_FIRST" '
    BEGIN { n = split(first, f, " "); for (i = 1; i <= n; i++) rank[f[i]] = i }
    $1 == "kiln-tests" { print ($2 in rank ? rank[$2] : 1000), $2, $3 }' <<<"$listing" |
    sort -k1,1n -k2,2 | cut -d' ' -f2-)
  [ "${#lab_exes[@]}" -gt 0 ] || { echo "test.sh: no kiln-tests executables were found" >&2; exit 1; }
  cargo_args+=(--exclude kiln-tests)
fi

# pipefail: the pipeline fails when cargo does.
cargo test --workspace --no-fail-fast "${cargo_args[@]}" -- "${test_args[@]}" 2>&1 | tee "$logs/workspace.log" ||
  rc=$?

# One kiln-tests executable, from the package dir as cargo runs it; its output and exit status go to files.
run_lab_exe() {
  local target=$1 exe=$2 status=0
  shift 2
  (cd tests && "$exe" "$@") >"$logs/kiln-tests.$target.log" 2>&1 || status=$?
  echo "$status" >"$logs/kiln-tests.$target.rc"
}
if [ "${#lab_exes[@]}" -gt 0 ]; then
  echo "==== the kiln-tests package: ${#lab_exes[@]} executables, two at a time ===="
  export -f run_lab_exe
  export logs
  # xargs appends each line's "<target> <exe>" after the test options.
  printf '%s\n' "${lab_exes[@]}" |
    xargs -P 2 -L 1 bash -c 'n=$#; run_lab_exe "${@:n-1:1}" "${@:n:1}" "${@:1:n-2}"' _ "${test_args[@]}" ||
    true
  lab_failed=()
  for line in "${lab_exes[@]}"; do
    target=${line%% *}
    echo "     Running $target (kiln-tests, two at a time)"
    cat "$logs/kiln-tests.$target.log"
    [ "$(cat "$logs/kiln-tests.$target.rc" 2>/dev/null || echo 1)" = 0 ] || lab_failed+=("$target")
  done
  if [ "${#lab_failed[@]}" -gt 0 ]; then
    rc=101
    # In cargo's words, for the digest below.
    { echo "error: ${#lab_failed[@]} targets failed:"
      for t in "${lab_failed[@]}"; do echo "    \`-p kiln-tests --test $t\`"; done; } |
      tee "$logs/kiln-tests.failed.log"
  fi
fi

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
