#!/usr/bin/env bash
# A signal that ends canzona while it writes an output (-o) leaves the output whole and no
# temporary file beside it: the atomic writer holds SIGINT, SIGTERM, SIGHUP and SIGQUIT back
# while its PATH.tmp.XXXXXX exists, and the signal takes effect once the file is renamed into
# place. The signal is raised from inside fsync (a preloaded helper, CZ_FSYNC_SHIM), the one
# moment the temporary file is sure to exist. Everything happens inside one mktemp -d folder.
set -u
: "${CZ:?CZ must point at the canzona binary}" "${CZ_SOURCE_DIR:?}"
[ -x "$CZ" ] || { echo "skip: $CZ not built"; exit 77; }
[ -n "${CZ_FSYNC_SHIM:-}" ] && [ -f "$CZ_FSYNC_SHIM" ] || { echo "skip: no fsync helper"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
M=$CZ_SOURCE_DIR/plans/models/test-small.json
C=$CZ_SOURCE_DIR/plans/clusters/cpu-4-dp2-tp2.json
H=$CZ_SOURCE_DIR/tests/data/hf/mixtral-tiny.config.json
"$CZ" plan -q -m "$M" -c "$C" -o "$work/ref.plan.json" || { echo "FAIL: cannot plan"; exit 1; }
fails=0
total=0
pass() { total=$((total + 1)); echo "ok   $*"; }
fail() { total=$((total + 1)); fails=$((fails + 1)); echo "FAIL $*"; }

# The helper is not built with the sanitizers' runtime first in line; ASan must not mind.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
# signal-number name what-it-writes command... (its output path is $work/out.*)
interrupted() {
  local sig=$1 name=$2 out=$3
  shift 3
  echo old >"$out"
  local rc=0
  LD_PRELOAD=$CZ_FSYNC_SHIM CZ_TEST_RAISE_IN_FSYNC=$sig "$@" >"$work/stdout" 2>"$work/err" || rc=$?
  local left
  left=$(ls "$out".tmp.* 2>/dev/null | wc -l)
  if [ "$rc" -ne $((128 + sig)) ]; then
    fail "$name: exit status $rc, expected $((128 + sig)) (ended by signal $sig): $(cat "$work/err")"
  elif [ "$left" -ne 0 ]; then
    fail "$name: $left temporary file(s) left beside the output"
  elif [ "$(cat "$out")" = old ]; then
    fail "$name: the output was not written before the signal took effect"
  else
    pass "$name: ended by signal $sig after the output was renamed into place, nothing left"
  fi
}
for sig in 15 2 1; do
  interrupted "$sig" "plan -o, signal $sig" "$work/out.plan.json" \
    "$CZ" plan -q -m "$M" -c "$C" -o "$work/out.plan.json"
  if cmp -s "$work/out.plan.json" "$work/ref.plan.json"; then
    pass "plan -o, signal $sig: the output is the whole plan"
  else
    fail "plan -o, signal $sig: the output differs from the plan written without a signal"
  fi
done
interrupted 15 "render -o" "$work/out.svg" "$CZ" render "$work/ref.plan.json" -o "$work/out.svg"
grep -q '</svg>' "$work/out.svg" || fail "render -o: the picture is not whole"
interrupted 15 "import-hf -o" "$work/out.model.json" "$CZ" import-hf "$H" -o "$work/out.model.json"
"$CZ" plan -q -m "$work/out.model.json" -c "$CZ_SOURCE_DIR/tests/data/cluster_tiny.json" -o - \
  >/dev/null 2>&1 || fail "import-hf -o: the model written is not whole"

echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
