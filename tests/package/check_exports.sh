#!/usr/bin/env bash
# The shared libraries export exactly their public API (as jansson's check-exports does):
#   * every dynamic symbol a library defines is a function declared in its public headers,
#   * every function declared in canzona.h is exported by libcanzona.so, every function declared
#     in canzona_exec.h by libcanzona-exec.so, and the executor exports the plan-file functions
#     a job needs next to it (cz_plan_read, cz_plan_free, cz_error_clear, cz_error_code_name,
#     cz_version),
#   * libcanzona-exec.so does not depend on GLPK (it carries only the plan-format code).
# Usage: check_exports.sh <cc> <libcanzona.so> <libcanzona-exec.so> <source dir> <generated
#        include dir (canzona_version.h)>
set -euo pipefail
cc=$1 planner_lib=$2 exec_lib=$3 src=$4 generated=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# Functions a header declares: preprocess it (no comments, no macros), take every cz_ name
# followed by an opening parenthesis (a function pointer typedef is "(*name)(", not matched).
declared() {
  "$cc" -E -P -I"$src/planner/include" -I"$generated" -I"$src/executor/include" "$1" |
    grep -oE '\bcz_[a-z0-9_]+[[:space:]]*\(' | sed 's/[[:space:]]*($//' | sort -u
}
exported() {
  nm -D --defined-only "$1" | awk '{print $NF}' | sort -u
}

declared "$src/planner/include/canzona.h" > "$tmp/planner.h.txt"
# canzona_exec.h includes canzona.h: its own functions are the ones canzona.h lacks.
declared "$src/executor/include/canzona_exec.h" > "$tmp/all.h.txt"
comm -23 "$tmp/all.h.txt" "$tmp/planner.h.txt" > "$tmp/exec.h.txt"
exported "$planner_lib" > "$tmp/planner.so.txt"
exported "$exec_lib" > "$tmp/exec.so.txt"
[ -s "$tmp/planner.h.txt" ] && [ -s "$tmp/exec.h.txt" ] || { echo "FAIL: no functions found in the headers"; exit 1; }

report() { # <what> <file>
  if [ -s "$2" ]; then
    echo "FAIL: $1:"; sed 's/^/  /' "$2"; fail=1
  fi
}
comm -23 "$tmp/planner.so.txt" "$tmp/planner.h.txt" > "$tmp/d1"
report "libcanzona.so exports symbols that canzona.h does not declare" "$tmp/d1"
comm -13 "$tmp/planner.so.txt" "$tmp/planner.h.txt" > "$tmp/d2"
report "functions declared in canzona.h that libcanzona.so does not export" "$tmp/d2"
comm -23 "$tmp/exec.so.txt" "$tmp/all.h.txt" > "$tmp/d3"
report "libcanzona-exec.so exports symbols that canzona.h and canzona_exec.h do not declare" "$tmp/d3"
comm -13 "$tmp/exec.so.txt" "$tmp/exec.h.txt" > "$tmp/d4"
report "functions declared in canzona_exec.h that libcanzona-exec.so does not export" "$tmp/d4"
printf '%s\n' cz_error_clear cz_error_code_name cz_plan_free cz_plan_read cz_version |
  comm -13 "$tmp/exec.so.txt" - > "$tmp/d5"
report "plan-file functions a job needs that libcanzona-exec.so does not export" "$tmp/d5"

if readelf -d "$exec_lib" | grep -i 'NEEDED.*glpk'; then
  echo "FAIL: libcanzona-exec.so depends on GLPK; the executor must link the plan-format library only"
  fail=1
fi
[ "$fail" -eq 0 ] || exit 1
echo "ok: libcanzona.so exports $(wc -l < "$tmp/planner.so.txt") functions, libcanzona-exec.so $(wc -l < "$tmp/exec.so.txt"); no GLPK in the executor"
