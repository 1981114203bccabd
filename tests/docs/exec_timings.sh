#!/usr/bin/env bash
# The executor timing blocks of docs/PERF.md (section 3) and docs/EXECUTOR.md (Performance) are
# in the format tools/exec_timings.py writes (it measures nothing here: --check parses the docs),
# and --check notices when they are not: each corruption below, made in a temporary copy, must
# fail it. Then the writer, fed a made-up measurement, replaces only its blocks, writes what
# --check accepts and is idempotent. Writes only in its temporary folder.
set -euo pipefail
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
tool=$src/tools/exec_timings.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

check() { python3 "$tool" --check --perf "$1" --executor "$2" >"$work/out" 2>&1; }

python3 "$tool" --help >"$work/help" || fail "--help exits non-zero"
grep -q -- "--check" "$work/help" || fail "--help does not describe --check"

# 1. The repository's docs agree with the tool.
if ! check "$src/docs/PERF.md" "$src/docs/EXECUTOR.md"; then
  cat "$work/out" >&2
  fail "the repository's docs do not pass --check"
fi

# 2. Each corruption of a copy fails --check, with a message that says what is wrong.
# corrupt NAME FILE(perf|executor) PYTHON-EXPRESSION-ON-s EXPECTED-MESSAGE
corrupt() {
  local name=$1 which=$2 expr=$3 want=$4
  cp "$src/docs/PERF.md" "$work/PERF.md"
  cp "$src/docs/EXECUTOR.md" "$work/EXECUTOR.md"
  local f=$work/PERF.md
  [ "$which" = executor ] && f=$work/EXECUTOR.md
  python3 - "$f" "$expr" <<'PY'
import sys
path, expr = sys.argv[1], sys.argv[2]
s = open(path).read()
t = eval(expr, {"s": s, "re": __import__("re")})
if t == s:
    sys.exit(f"the corruption changed nothing in {path}")
open(path, "w").write(t)
PY
  if check "$work/PERF.md" "$work/EXECUTOR.md"; then
    fail "$name: --check passed on the corrupted copy"
  elif ! grep -qF -- "$want" "$work/out"; then
    fail "$name: --check failed without saying '$want':"
    cat "$work/out" >&2
  fi
}
corrupt "timing header" perf \
  's.replace("| model | TP strategy | runs |", "| model | TP | runs |", 1)' \
  "timing table header found 0 times"
corrupt "ratio header" executor \
  's.replace("| ratio in each round |", "| ratios |", 1)' "ratio table header found 0 times"
corrupt "separator" perf \
  's.replace("|---|---|---:|---:|---:|---:|---:|---:|---|", "|---|---|---|---:|---:|---:|---:|---:|---|", 1)' \
  "the line under the header"
corrupt "BEGIN twice" executor \
  're.sub(r"(<!-- BEGIN generated[^\n]*\n)", r"\1\1", s, count=1)' "found 2 times"
corrupt "END missing" perf \
  're.sub(r"<!-- END generated[^\n]*\n", "", s, count=1)' "found 0 times"
corrupt "command" perf \
  're.sub(r"(exec_timings.py --runs )(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1), s, count=1)' \
  "where the command says --runs"
corrupt "script command" executor \
  's.replace("tools/bench/cpu_timings.sh plans/models/test-mid.json", "tools/bench/cpu_timings.sh plans/models/test-mid.json ", 1)' \
  "is missing"
corrupt "hand text after the section" perf \
  're.sub(r"(<!-- END generated[^\n]*\n)", r"\1\nRe-measured by hand: 9.9 s.\n", s, count=1)' \
  "text after the END marker"
corrupt "a total" executor \
  're.sub(r"\*\*(\d+)\.(\d)", lambda m: "**" + str(int(m.group(1)) + 7) + "." + m.group(2), s, count=1)' \
  "is not the median of the run totals"
corrupt "a ratio" perf \
  're.sub(r"(\| test-small \| )(\d+\.\d+)×", lambda m: m.group(1) + "%.2f×" % (float(m.group(2)) + 0.5), s, count=1)' \
  "is not"

# 3. The writer: a made-up measurement, written into copies.
python3 - "$work/m.json" <<'PY'
import json, sys
def run(scale):
    return {"reduce_scatter": 0.01 * scale, "elementwise": 0.001 * scale,
            "matrix": 0.2 * scale, "all_gather": 0.005 * scale, "total": 0.216 * scale}
cases = {}
for model, f in (("test-small", 1.0), ("test-mid", 20.0)):
    per = {"sc": [run(f * x) for x in (1.0, 1.2, 0.9)],
           "rollback": [run(f * x / 2) for x in (1.1, 1.0, 0.8)]}
    cases[model] = {"per_run": per, "median": {"sc": run(f), "rollback": run(f / 2)}}
json.dump({"runs": 3, "steps": 4, "commit": "abc1234", "date": "2000-01-02", "load": [0.5, 0.6, 0.7],
           "machine": {"cpus": 2, "cpu": "Test CPU", "blas": "OpenBLAS 0.0", "mpi": "Open MPI 0.0"},
           "cases": cases}, open(sys.argv[1], "w"))
PY
cp "$src/docs/PERF.md" "$work/PERF.md"
cp "$src/docs/EXECUTOR.md" "$work/EXECUTOR.md"
write() { python3 "$tool" --from-json "$work/m.json" --write --perf "$work/PERF.md" --executor "$work/EXECUTOR.md"; }
write || fail "--from-json --write failed"
check "$work/PERF.md" "$work/EXECUTOR.md" || { cat "$work/out" >&2; fail "--check rejects what --write wrote"; }
grep -qF "python3 tools/exec_timings.py --runs 3 --steps 4 --write" "$work/PERF.md" ||
  fail "the written PERF.md does not record the command of the measurement"
grep -qF "| test-mid | rollback | 3 | 0.1000 | 0.0100 | 2.0000 | 0.0500 | **2.1600** | 2.376 2.160 1.728 |" \
  "$work/EXECUTOR.md" || fail "the written EXECUTOR.md lacks the measurement's test-mid rollback row"
grep -qF "| test-small | 2.00× | 1.82 2.40 2.25 | 2.25× |" "$work/PERF.md" ||
  fail "the written PERF.md lacks the measurement's test-small ratios"
# Outside the blocks nothing changed.
strip() { sed '/<!-- BEGIN generated by tools\/exec_timings.py/,/<!-- END generated by tools\/exec_timings.py/d' "$1"; }
for f in PERF.md EXECUTOR.md; do
  strip "$src/docs/$f" >"$work/a"
  strip "$work/$f" >"$work/b"
  cmp -s "$work/a" "$work/b" || fail "--write changed $f outside its block"
done
cp "$work/PERF.md" "$work/PERF.once"
write && cmp -s "$work/PERF.md" "$work/PERF.once" || fail "a second --write changed PERF.md"
# Without markers the writer refuses and leaves the file as it was.
grep -v "exec_timings.py (executor-performance)" "$src/docs/EXECUTOR.md" >"$work/EXECUTOR.md"
cp "$work/EXECUTOR.md" "$work/EXECUTOR.before"
if write 2>"$work/out"; then
  fail "--write succeeded on a copy without markers"
else
  grep -qF "found 0 times" "$work/out" || fail "--write without markers did not say why"
  cmp -s "$work/EXECUTOR.md" "$work/EXECUTOR.before" || fail "--write changed a file without markers"
fi

[ "$fails" -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "exec_timings docs: ok"
